//! The controllers of `skiff controller-manager` (seeds 001–003): each compares desired and actual
//! state through informers on the API server and writes back only through it; none calls another
//! component.
//!
//! Every controller reads the process's shared informers ([`Context::informers`]: one List+Watch
//! and one indexed cache per resource, whoever reads it), queues keys from their change handlers,
//! and reconciles them with [`skiff_runtime::controller::Controller`] (a rate-limited work queue
//! that never hands one key to two workers at once, and logs and backs off failures in one
//! place). Side effects on the API go through a trait per controller with a recording fake, so
//! that reconcile logic is unit-tested without a server.
//!
//! # Layout
//! One module per controller, named as upstream names it in `--controllers`:
//! - [`serviceaccount`]: a `default` ServiceAccount in every namespace.
//! - [`servicelb`] (Skiff's own, k3s's ServiceLB): node addresses in the status of
//!   LoadBalancer Services without a class.
//! - [`garbagecollector`]: deletes dependents of deleted owners
//!   (background, foreground, orphan).
//! - [`namespace`]: empties a terminating namespace, then removes its `kubernetes` finalizer.
//! - [`config`]: the controller flags [`Context`] carries.
//! - [`credentials`]: each controller's own ServiceAccount token
//!   (`--use-service-account-credentials`).
//! - [`nodeipam`]: a pod range from `--cluster-cidr` for every Node.
//! - [`nodelifecycle`]: node health from Leases and heartbeats; Unknown conditions, taints, and
//!   the NoExecute taints at the rate each zone's health allows.
//! - [`tainteviction`] (`taint-eviction-controller`): deletes pods that do not tolerate a
//!   node's NoExecute taints.
//! - [`certificates`] (`csrapproving`, `csrsigning`): kubelet TLS bootstrap's approver and signer.
//! - [`rootcacertpublisher`] (`root-ca-cert-publisher`): `kube-root-ca.crt` in every namespace.
//! - [`podgc`]: deletes excess terminated pods, pods of deleted nodes, unscheduled terminating
//!   pods.
//! - [`resourcequota`]: ResourceQuota `status.hard` and `status.used` (object counts, compute
//!   resources, scopes).
//! - [`resources`]: discovery of every served resource (for garbage-collector and namespace).
//! - [`statefulset`]: pods `<set>-<ordinal>` created, scaled and updated in order.
//! - [`statefulset_pods`]: a stateful pod's identity and claims.
//! - [`statefulset_claims`]: a stateful pod's claims' owners under the retention policy.
//! - [`statefulset_plan`]: the writes, status and requeue of one StatefulSet sync.
//! - [`status`]: status writes as updates retried on conflict (what controller roles grant).
//! - [`daemonset`]: one pod per eligible node, rolling updates, status.
//! - [`daemonset_pods`]: which nodes run a DaemonSet's pod and the pod it gets.
//! - [`endpoints`]: an Endpoints object per Service with a selector, from the pods it selects.
//! - [`endpointslice`]: EndpointSlices per Service with a selector, at most 100 endpoints each.
//! - [`revision`]: ControllerRevisions (template history and hashes) for daemonset and statefulset.
//! - [`service_pods`]: what `endpoints` and `endpointslice` share (pod selection, ports, readiness).
//! - [`job`]: a Job's pods run to completion; its status counts them.
//! - [`cronjob`]: a CronJob's Jobs start on its schedule.
//! - [`ttl_after_finished`]: finished Jobs deleted once their TTL has passed.
//! - [`triggers`]: informer handlers that queue keys (an object's own, or those it maps to),
//!   the runner of a controller keyed by one resource, and the pods-by-node index.
//! - [`disruption`]: PodDisruptionBudget status (healthy, desired, disruptions allowed).
//! - [`replicaset`]: `spec.replicas` pods per ReplicaSet (with [`expectations`], [`ranking`]).
//! - [`deployment`]: Deployments rolled out through ReplicaSets (a module directory).
//! - [`persistentvolume`] (`persistentvolume-binder`): claims bound to volumes, volumes
//!   reclaimed (a module directory).
//! - [`localpath`] (`local-path-provisioner`, Skiff's own): volumes for claims of the default
//!   `local-path` class, on the node the scheduler selected.
//! - [`ephemeral`] (`ephemeral-volume`): the claims of pods' generic ephemeral volumes.
//! - [`pvcprotection`] (`pvc-protection`), [`pvprotection`] (`pv-protection`): the storage
//!   protection finalizers removed once a claim or volume is no longer in use.
//!
//! Shared by the workload controllers: [`events`] (a non-blocking event sink), [`podutil`] (pod
//! and owner-reference helpers), [`claim`] (adoption and release by controller reference, and
//! the owners a change concerns).

pub mod certificates;
pub mod claim;
pub mod config;
pub mod credentials;
pub mod cronjob;
pub mod daemonset;
pub mod daemonset_pods;
pub mod deployment;
pub mod disruption;
pub mod endpoints;
pub mod endpointslice;
pub mod ephemeral;
pub mod events;
pub mod expectations;
pub mod garbagecollector;
pub mod job;
pub mod localpath;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod persistentvolume;
pub mod podautoscaler;
pub mod podgc;
pub mod podutil;
pub mod pvcprotection;
pub mod pvprotection;
pub mod ranking;
pub mod replicaset;
pub mod resourcequota;
pub mod resources;
pub mod revision;
pub mod rootcacertpublisher;
pub mod service_pods;
pub mod serviceaccount;
pub mod servicelb;
pub mod statefulset;
pub mod statefulset_claims;
pub mod statefulset_plan;
pub mod statefulset_pods;
pub mod status;
pub mod tainteviction;
pub mod triggers;
pub mod ttl_after_finished;

use std::sync::Arc;

use futures::future::BoxFuture;
use skiff_runtime::events::{Recorder, Reporter};
use skiff_runtime::informer::Informers;

/// The controller manager's program name: its `User-Agent`'s first word.
pub const PROGRAM: &str = "skiff-controller-manager";

/// Requests one controller-manager client has in flight at most (until their response heads
/// arrive; a watch's stream does not hold its slot). Upstream's clients are paced by client-go's
/// QPS limit (20, burst 30); Skiff's are not, and a ReplicaSet sync's 500 deletions at once
/// overflowed its flow's APF queues (6 queues of 50 in `workload-high`): the refused ones were
/// retried after the level's `Retry-After`, up to 32 s, and held the whole sync that long.
pub const IN_FLIGHT_PER_CLIENT: usize = 100;

/// The layer that keeps a client to [`IN_FLIGHT_PER_CLIENT`] requests in flight (each client
/// built with it has its own count).
pub fn in_flight_limit() -> tower::limit::ConcurrencyLimitLayer {
    tower::limit::ConcurrencyLimitLayer::new(IN_FLIGHT_PER_CLIENT)
}

/// What every controller is given: its API clients and who it reports events as.
#[derive(Clone)]
pub struct Context {
    /// The controller's own identity (its ServiceAccount with
    /// `--use-service-account-credentials`): every write and every direct read.
    pub client: kube::Client,
    /// The controller manager's identity: the lists and watches that fill informers (upstream
    /// shares its informers under that identity, so controller roles need not grant them).
    pub informer_client: kube::Client,
    /// The process's shared informers (on `informer_client`): one watch per resource, read by
    /// every controller.
    pub informers: Informers,
    /// The `reportingInstance` of the Events controllers record.
    pub instance: String,
    /// Controller flags.
    pub config: Arc<config::Config>,
}

impl Context {
    pub fn new(client: kube::Client, instance: &str) -> Context {
        Context {
            informer_client: client.clone(),
            informers: Informers::new(client.clone()),
            client,
            instance: instance.into(),
            config: Arc::new(config::Config::default()),
        }
    }

    /// The same context with these controller flags.
    pub fn with_config(mut self, config: config::Config) -> Context {
        self.config = Arc::new(config);
        self
    }

    /// The same context with this controller's own client (informers keep theirs).
    pub fn with_client(mut self, client: kube::Client) -> Context {
        self.client = client;
        self
    }

    /// The event recorder of one controller, reporting as `component` (upstream's event
    /// source: `replicaset-controller`, `job-controller`, …), through its own client.
    pub fn recorder(&self, component: &str) -> Recorder {
        let reporter = Reporter {
            controller: component.into(),
            instance: self.instance.clone(),
        };
        Recorder::new(self.client.clone(), reporter)
    }
}

/// Why a controller, or the controller manager's set of them, stopped.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    NodeIpam(#[from] nodeipam::Error),
    #[error("the CSR signer's CA: {0}")]
    Signer(String),
    #[error(transparent)]
    Credentials(#[from] credentials::Error),
    #[error("the {0} informer stopped")]
    InformerStopped(&'static str),
    #[error("controller {0} stopped")]
    Stopped(&'static str),
    #[error("controller {name}: {source}")]
    Failed {
        name: &'static str,
        source: Box<Error>,
    },
    #[error("a controller panicked: {0}")]
    Panicked(String),
}

/// One controller `skiff controller-manager --controllers` can name.
pub struct Descriptor {
    /// Upstream's name for it (`kube-controller-manager --controllers`).
    pub name: &'static str,
    /// The ServiceAccount `kube-system/<this>` it acts as with
    /// `--use-service-account-credentials` (upstream's `ClientBuilder.ClientOrDie` name; the
    /// node controllers share `node-controller`, as upstream's do).
    pub service_account: &'static str,
    /// Whether `*` includes it.
    pub enabled_by_default: bool,
    /// Runs it until the process stops; returns only on a fatal error.
    pub run: fn(Arc<Context>) -> BoxFuture<'static, Result<(), Error>>,
}

/// Every controller Skiff has, by name.
pub const CONTROLLERS: &[Descriptor] = &[
    Descriptor {
        name: "cronjob",
        service_account: "cronjob-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(cronjob::run(ctx)),
    },
    Descriptor {
        name: "csrapproving",
        service_account: "certificate-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(certificates::approver::run(ctx)),
    },
    Descriptor {
        name: "csrsigning",
        service_account: "certificate-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(certificates::signer::run(ctx)),
    },
    Descriptor {
        name: "daemonset",
        service_account: "daemon-set-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(daemonset::run(ctx)),
    },
    Descriptor {
        name: "deployment",
        service_account: "deployment-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(deployment::run(ctx)),
    },
    Descriptor {
        name: "disruption",
        service_account: "disruption-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(disruption::run(ctx)),
    },
    Descriptor {
        name: "endpoints",
        service_account: "endpoint-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(endpoints::run(ctx)),
    },
    Descriptor {
        name: "endpointslice",
        service_account: "endpointslice-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(endpointslice::run(ctx)),
    },
    Descriptor {
        name: "ephemeral-volume",
        service_account: "ephemeral-volume-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(ephemeral::run(ctx)),
    },
    Descriptor {
        name: "garbagecollector",
        service_account: "generic-garbage-collector",
        enabled_by_default: true,
        run: |ctx| Box::pin(garbagecollector::run(ctx)),
    },
    Descriptor {
        name: "horizontalpodautoscaling",
        service_account: "horizontal-pod-autoscaler",
        enabled_by_default: true,
        run: |ctx| Box::pin(podautoscaler::run(ctx)),
    },
    Descriptor {
        name: "job",
        service_account: "job-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(job::run(ctx)),
    },
    Descriptor {
        name: "local-path-provisioner",
        service_account: "local-path-provisioner",
        enabled_by_default: true,
        run: |ctx| Box::pin(localpath::run(ctx)),
    },
    Descriptor {
        name: "namespace",
        service_account: "namespace-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(namespace::run(ctx)),
    },
    Descriptor {
        name: "nodeipam",
        service_account: "node-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(nodeipam::run(ctx)),
    },
    Descriptor {
        name: "nodelifecycle",
        service_account: "node-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(nodelifecycle::run(ctx)),
    },
    Descriptor {
        name: "persistentvolume-binder",
        service_account: "persistent-volume-binder",
        enabled_by_default: true,
        run: |ctx| Box::pin(persistentvolume::run(ctx)),
    },
    Descriptor {
        name: "podgc",
        service_account: "pod-garbage-collector",
        enabled_by_default: true,
        run: |ctx| Box::pin(podgc::run(ctx)),
    },
    Descriptor {
        name: "pv-protection",
        service_account: "pv-protection-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(pvprotection::run(ctx)),
    },
    Descriptor {
        name: "pvc-protection",
        service_account: "pvc-protection-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(pvcprotection::run(ctx)),
    },
    Descriptor {
        name: "replicaset",
        service_account: "replicaset-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(replicaset::run(ctx)),
    },
    Descriptor {
        name: "resourcequota",
        service_account: "resourcequota-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(resourcequota::run(ctx)),
    },
    Descriptor {
        name: "root-ca-cert-publisher",
        service_account: "root-ca-cert-publisher",
        enabled_by_default: true,
        run: |ctx| Box::pin(rootcacertpublisher::run(ctx)),
    },
    Descriptor {
        name: "serviceaccount",
        service_account: "service-account-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(serviceaccount::run(ctx)),
    },
    Descriptor {
        name: "servicelb",
        service_account: "service-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(servicelb::run(ctx)),
    },
    Descriptor {
        name: "statefulset",
        service_account: "statefulset-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(statefulset::run(ctx)),
    },
    Descriptor {
        name: "taint-eviction-controller",
        service_account: "node-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(tainteviction::run(ctx)),
    },
    Descriptor {
        name: "ttl-after-finished",
        service_account: "ttl-after-finished-controller",
        enabled_by_default: true,
        run: |ctx| Box::pin(ttl_after_finished::run(ctx)),
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

/// Runs the selected controllers together; returns when one of them fails. With `credentials`
/// each gets its own ServiceAccount's client first (informers stay on `ctx`'s).
pub async fn run(
    ctx: Arc<Context>,
    controllers: &[&'static Descriptor],
    credentials: Option<&credentials::ClientBuilder>,
) -> Result<(), Error> {
    let mut running = tokio::task::JoinSet::new();
    for d in controllers {
        let ctx = match credentials {
            Some(builder) => {
                let client = builder.client(d.service_account).await?;
                Arc::new(ctx.as_ref().clone().with_client(client))
            }
            None => ctx.clone(),
        };
        let name = d.name;
        let run = d.run;
        running.spawn(async move { (name, run(ctx).await) });
    }
    match running.join_next().await {
        None => std::future::pending().await,
        Some(Ok((name, Ok(())))) => Err(Error::Stopped(name)),
        Some(Ok((name, Err(e)))) => Err(Error::Failed {
            name,
            source: Box::new(e),
        }),
        Some(Err(e)) => Err(Error::Panicked(e.to_string())),
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
        let defaults = names(&["*"]).unwrap();
        for storage in [
            "persistentvolume-binder",
            "pvc-protection",
            "pv-protection",
            "local-path-provisioner",
            "ephemeral-volume",
            "servicelb",
        ] {
            assert!(defaults.contains(&storage), "{storage}");
        }
    }

    #[test]
    fn an_unknown_name_is_an_error_naming_it() {
        let err = names(&["*", "-nosuch"]).unwrap_err();
        assert!(err.contains("\"nosuch\""), "{err}");
    }
}
