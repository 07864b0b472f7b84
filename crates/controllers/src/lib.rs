//! The controllers of `skiff controller-manager` (seeds 001–003): each compares desired and actual
//! state through informers on the API server and writes back only through it; none calls another
//! component.
//!
//! Every controller is a kube-runtime `Controller` (its work queue never hands one key to two
//! workers at once) with a reconcile function over one object and an error policy that backs the
//! key off with [`skiff_runtime::backoff::ItemBackoff`]. Side effects on the API go through a trait
//! per controller with a recording fake, so that reconcile logic is unit-tested without a server.
//!
//! # Layout
//! One module per controller, named as upstream names it in `--controllers`:
//! - [`serviceaccount`]: a `default` ServiceAccount in every namespace.
//! - [`replicaset`]: `spec.replicas` pods per ReplicaSet (with [`expectations`], [`ranking`]).
//! - [`deployment`]: Deployments rolled out through ReplicaSets (a module directory).
//!
//! Shared by the workload controllers: [`informer`] (stores with change handlers), [`events`]
//! (a non-blocking event sink), [`podutil`] (pod and owner-reference helpers).

pub mod deployment;
pub mod events;
pub mod expectations;
pub mod informer;
pub mod podutil;
pub mod ranking;
pub mod replicaset;
pub mod serviceaccount;

use std::sync::Arc;

use futures::future::BoxFuture;
use kube::runtime::events::{Recorder, Reporter};

/// What every controller is given: the API client and who it reports events as.
#[derive(Clone)]
pub struct Context {
    pub client: kube::Client,
    /// `reportingController` / `reportingInstance` of the Events controllers record.
    pub reporter: Reporter,
}

impl Context {
    pub fn new(client: kube::Client, instance: &str) -> Context {
        Context {
            client,
            reporter: Reporter {
                controller: "skiff-controller-manager".into(),
                instance: Some(instance.into()),
            },
        }
    }

    /// An event recorder for one controller (events.k8s.io/v1, deduplicated into series).
    pub fn recorder(&self) -> Recorder {
        Recorder::new(self.client.clone(), self.reporter.clone())
    }
}

/// One controller `skiff controller-manager --controllers` can name.
pub struct Descriptor {
    /// Upstream's name for it (`kube-controller-manager --controllers`).
    pub name: &'static str,
    /// Whether `*` includes it.
    pub enabled_by_default: bool,
    /// Runs it until the process stops; returns only on a fatal error.
    pub run: fn(Arc<Context>) -> BoxFuture<'static, anyhow::Result<()>>,
}

/// Every controller Skiff has, in upstream's order.
pub const CONTROLLERS: &[Descriptor] = &[
    Descriptor {
        name: "serviceaccount",
        enabled_by_default: true,
        run: |ctx| Box::pin(serviceaccount::run(ctx)),
    },
    Descriptor {
        name: "deployment",
        enabled_by_default: true,
        run: |ctx| Box::pin(deployment::run(ctx)),
    },
    Descriptor {
        name: "replicaset",
        enabled_by_default: true,
        run: |ctx| Box::pin(replicaset::run(ctx)),
    },
];

/// The controllers a `--controllers` list selects, as upstream reads it: `*` is every controller
/// enabled by default, `name` adds one, `-name` removes one (and wins over `*`).
pub fn select(list: &[String]) -> Result<Vec<&'static Descriptor>, String> {
    let known = |name: &str| CONTROLLERS.iter().any(|d| d.name == name);
    for item in list {
        let name = item.strip_prefix('-').unwrap_or(item);
        if name != "*" && !known(name) {
            return Err(format!(
                "unknown controller {name:?} in --controllers; known: {}",
                CONTROLLERS
                    .iter()
                    .map(|d| d.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    let has = |s: &str| list.iter().any(|item| item == s);
    Ok(CONTROLLERS
        .iter()
        .filter(|d| {
            if has(&format!("-{}", d.name)) {
                false
            } else {
                has(d.name) || (has("*") && d.enabled_by_default)
            }
        })
        .collect())
}

/// Runs the selected controllers together; returns when one of them fails.
pub async fn run(ctx: Arc<Context>, controllers: &[&'static Descriptor]) -> anyhow::Result<()> {
    let mut running = tokio::task::JoinSet::new();
    for d in controllers {
        let ctx = ctx.clone();
        let name = d.name;
        let run = d.run;
        running.spawn(async move { (name, run(ctx).await) });
    }
    match running.join_next().await {
        None => std::future::pending().await,
        Some(Ok((name, Ok(())))) => anyhow::bail!("controller {name} stopped"),
        Some(Ok((name, Err(e)))) => Err(e.context(format!("controller {name}"))),
        Some(Err(e)) => Err(anyhow::anyhow!("a controller panicked: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Result<Vec<&'static str>, String> {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        select(&list).map(|ds| ds.iter().map(|d| d.name).collect())
    }

    #[test]
    fn star_selects_the_defaults_and_minus_removes() {
        assert!(names(&["*"]).unwrap().contains(&"serviceaccount"));
        assert!(
            !names(&["*", "-serviceaccount"])
                .unwrap()
                .contains(&"serviceaccount")
        );
        assert_eq!(names(&["serviceaccount"]).unwrap(), vec!["serviceaccount"]);
        assert!(names(&[]).unwrap().is_empty());
    }

    #[test]
    fn an_unknown_name_is_an_error_naming_it() {
        let err = names(&["*", "-nosuch"]).unwrap_err();
        assert!(err.contains("\"nosuch\""), "{err}");
    }
}
