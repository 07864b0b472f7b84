//! The controller: handlers on the shared informers of Pods (all of them: every pod can be a
//! peer; this node's are enforced), Namespaces and NetworkPolicies that fold each change into
//! the [`Ruleset`] and wake the sync loop; the br_netfilter setting without which bridged
//! pod-to-pod traffic would never reach the `forward` hook; and [`run`], which applies each
//! [`Update`] with one `nft -f`, retries a failed one as a whole table and rewrites the whole
//! table periodically.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use parking_lot::Mutex;
use skiff_runtime::informer::{Change, Informers};
use skiff_runtime::runner::Runner;
use tokio::sync::Notify;

use crate::model::{PodInfo, Policy};
use crate::ruleset::{Ruleset, Update};
use crate::{Error, Result};

/// How long the loop waits before retrying a failed apply (as a whole table).
pub const RETRY: Duration = Duration::from_secs(1);

/// How often the whole table is rewritten even without changes, repairing what someone else
/// changed in it (kube-router's `--iptables-sync-period` default, 5 minutes).
pub const SYNC_PERIOD: Duration = Duration::from_secs(300);

/// br_netfilter's switch that passes bridged IPv4 traffic through the IP hooks (kube-router and
/// flannel need it for the same reason).
const BRIDGE_NF_CALL: &str = "net.bridge.bridge-nf-call-iptables";

/// Feeds `ruleset` from `informers` (which must outlive the controller: dropping the factory
/// ends the watches), waking `notify` after every change. The returned future ends once all
/// three informers have their first list.
pub fn subscribe(
    informers: &Informers,
    ruleset: Arc<Mutex<Ruleset>>,
    notify: Arc<Notify>,
) -> impl Future<Output = ()> + Send + 'static {
    let pods = informers.get::<Pod>();
    let namespaces = informers.get::<Namespace>();
    let policies = informers.get::<NetworkPolicy>();
    {
        let (ruleset, notify) = (ruleset.clone(), notify.clone());
        pods.add_handler(move |change: &Change<Pod>| {
            let pod = change.object();
            let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
            let mut ruleset = ruleset.lock();
            let info = match change {
                Change::Deleted { .. } => None,
                _ => PodInfo::from_pod(pod, ruleset.node()),
            };
            ruleset.pod_changed(&key, info);
            notify.notify_one();
        });
    }
    {
        let (ruleset, notify) = (ruleset.clone(), notify.clone());
        namespaces.add_handler(move |change: &Change<Namespace>| {
            let namespace = change.object();
            let labels = match change {
                Change::Deleted { .. } => None,
                _ => Some(namespace.labels().clone()),
            };
            ruleset
                .lock()
                .namespace_changed(&namespace.name_any(), labels);
            notify.notify_one();
        });
    }
    policies.add_handler(move |change: &Change<NetworkPolicy>| {
        let policy = change.object();
        let key = format!(
            "{}/{}",
            policy.namespace().unwrap_or_default(),
            policy.name_any()
        );
        let compiled = match change {
            Change::Deleted { .. } => None,
            _ => Policy::from_policy(policy),
        };
        ruleset.lock().policy_changed(&key, compiled);
        notify.notify_one();
    });
    let caches = (
        pods.cache().clone(),
        namespaces.cache().clone(),
        policies.cache().clone(),
    );
    async move {
        caches.0.wait_until_ready().await;
        caches.1.wait_until_ready().await;
        caches.2.wait_until_ready().await;
    }
}

/// Makes sure bridged IPv4 traffic passes the IP hooks: sets `bridge-nf-call-iptables` to 1
/// (loading br_netfilter first when the setting does not exist), as kube-router does.
pub fn ensure_bridge_netfilter(runner: &dyn Runner) -> Result<()> {
    let key = format!("{BRIDGE_NF_CALL}=1");
    if runner.run("sysctl", &["-w", &key], None).is_ok() {
        return Ok(());
    }
    runner
        .run("modprobe", &["br_netfilter"], None)
        .and_then(|_| runner.run("sysctl", &["-w", &key], None))
        .map(|_| ())
        .map_err(Error::BridgeNetfilter)
}

/// Applies one update with `nft -f`.
pub fn apply(runner: &dyn Runner, update: &Update) -> Result<()> {
    runner
        .run("nft", &["-f", "-"], Some(update.script()))
        .map(|_| ())
        .map_err(Error::Apply)
}

/// Applies the ruleset's updates as `notify` signals them, starting with the whole table (the
/// caller starts it once the informers have their first lists); `ready` is called after that
/// first apply succeeded. A failed apply is retried after [`RETRY`] as a whole table, and
/// `failed` is told of the first failure after a success (not of every retry); the whole table
/// is rewritten every [`SYNC_PERIOD`] without changes.
pub async fn run(
    ruleset: Arc<Mutex<Ruleset>>,
    runner: Arc<dyn Runner>,
    notify: Arc<Notify>,
    ready: impl FnOnce(),
    failed: impl Fn(&str),
) {
    let mut ready = Some(ready);
    let mut failing = false;
    loop {
        let update = ruleset.lock().take();
        let Some(update) = update else {
            if tokio::time::timeout(SYNC_PERIOD, notify.notified())
                .await
                .is_err()
            {
                ruleset.lock().resync();
            }
            continue;
        };
        let started = Instant::now();
        let runner = runner.clone();
        let applied = tokio::task::spawn_blocking(move || {
            let applied = apply(runner.as_ref(), &update);
            (applied, matches!(update, Update::Full(_)))
        })
        .await;
        let applied = match applied {
            Ok((Ok(()), full)) => Ok(full),
            Ok((Err(error), _)) => Err(error.to_string()),
            Err(join) => Err(format!("the apply task failed: {join}")),
        };
        match applied {
            Ok(full) => {
                tracing::debug!(full, elapsed = ?started.elapsed(), "network policy table applied");
                failing = false;
                if let Some(ready) = ready.take() {
                    ready();
                }
            }
            Err(error) => {
                tracing::warn!(%error, "retrying as a whole table");
                if !std::mem::replace(&mut failing, true) {
                    failed(&error);
                }
                ruleset.lock().resync();
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use skiff_runtime::runner::FakeRunner;

    use super::*;

    fn lines(runner: &FakeRunner) -> Vec<String> {
        runner
            .calls()
            .iter()
            .map(|c| format!("{} {}", c.program, c.args.join(" ")))
            .collect()
    }

    #[test]
    fn bridge_netfilter_is_switched_on_loading_the_module_when_missing() {
        let runner = FakeRunner::default();
        ensure_bridge_netfilter(&runner).unwrap();
        assert_eq!(
            lines(&runner),
            ["sysctl -w net.bridge.bridge-nf-call-iptables=1"]
        );
        let runner = FakeRunner::default();
        runner.fail_next("sysctl");
        ensure_bridge_netfilter(&runner).unwrap();
        assert_eq!(
            lines(&runner),
            [
                "sysctl -w net.bridge.bridge-nf-call-iptables=1",
                "modprobe br_netfilter",
                "sysctl -w net.bridge.bridge-nf-call-iptables=1",
            ]
        );
    }

    #[test]
    fn a_node_without_bridge_netfilter_is_an_error() {
        let runner = FakeRunner::default();
        runner.fail_next("sysctl");
        runner.fail_next("modprobe");
        let error = ensure_bridge_netfilter(&runner).unwrap_err();
        assert!(matches!(error, Error::BridgeNetfilter(_)), "{error}");
    }

    #[tokio::test]
    async fn a_failed_first_apply_is_retried_whole_and_the_table_is_rewritten_periodically() {
        tokio::time::pause();
        let runner = FakeRunner::default();
        let ruleset = Arc::new(Mutex::new(Ruleset::new("n1")));
        let notify = Arc::new(Notify::new());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let failures = Arc::new(Mutex::new(Vec::new()));
        runner.fail_next("nft");
        let reported = failures.clone();
        let task = tokio::spawn(run(
            ruleset.clone(),
            Arc::new(runner.clone()),
            notify.clone(),
            move || {
                let _ = ready_tx.send(());
            },
            move |error| reported.lock().push(error.to_string()),
        ));
        // the first apply fails and is reported; the retry after RETRY succeeds and announces
        // readiness
        ready_rx.await.unwrap();
        let failures = failures.lock().clone();
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].starts_with("applying"), "{failures:?}");
        let scripts: Vec<String> = runner.calls().into_iter().filter_map(|c| c.stdin).collect();
        assert_eq!(scripts.len(), 2);
        assert!(
            scripts
                .iter()
                .all(|s| s.starts_with("add table inet skiff-netpol\n"))
        );

        // nothing changes: the whole table is rewritten after SYNC_PERIOD anyway
        let applies = || runner.calls().iter().filter(|c| c.stdin.is_some()).count();
        let started = tokio::time::Instant::now();
        while applies() < 3 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        assert!(started.elapsed() >= SYNC_PERIOD);
        task.abort();
    }
}
