//! The proxier: folds the tracker's changes into the model, syncs the dataplane (a full sync
//! first and after any failure, partial syncs of the changed Services otherwise), flushes stale
//! UDP conntrack entries, and records sync latency. [`run`] is the batching loop: at most one
//! sync per minimum sync period, retried after a failure, and a full sync at least every
//! [`FULL_SYNC_PERIOD`] to repair rules someone else changed.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::Result;
use crate::conntrack::{self, Flush};
use crate::dataplane::{Context, Dataplane, ServiceTable};
use crate::healthcheck::ServiceHealth;
use crate::metrics::Metrics;
use crate::model::ServiceKey;
use crate::runner::Runner;
use crate::tracker::{ChangeTracker, Changes};

/// Upstream's `FullSyncPeriod`: how long partial syncs may go on without a full one.
pub const FULL_SYNC_PERIOD: Duration = Duration::from_secs(3600);

pub struct Proxier {
    dataplane: Box<dyn Dataplane>,
    /// Runs `conntrack`.
    runner: Arc<dyn Runner>,
    table: ServiceTable,
    context: Context,
    /// Services changed since the last successful sync.
    pending: BTreeSet<ServiceKey>,
    /// The next sync rewrites everything (at start and after a failed sync).
    needs_full: bool,
    /// conntrack deletions waiting for the rules that make them safe.
    flushes: Vec<Flush>,
    metrics: Arc<Metrics>,
    /// Told of every sync's outcome and table.
    health: Option<Arc<ServiceHealth>>,
}

impl Proxier {
    pub fn new(
        dataplane: Box<dyn Dataplane>,
        runner: Arc<dyn Runner>,
        context: Context,
        metrics: Arc<Metrics>,
    ) -> Self {
        Proxier {
            dataplane,
            runner,
            table: ServiceTable::new(),
            context,
            pending: BTreeSet::new(),
            needs_full: true,
            flushes: Vec::new(),
            metrics,
            health: None,
        }
    }

    /// The same proxier, keeping `health`'s health check ports in step with its syncs.
    pub fn with_health(mut self, health: Arc<ServiceHealth>) -> Self {
        self.health = Some(health);
        self
    }

    /// Folds `changes` into the model; Services whose ports did not change stay clean.
    pub fn apply(&mut self, changes: Changes) {
        if let Some(health) = &self.health {
            if let Some(at) = changes.queued_at {
                health.proxy().queued_update(at);
            }
            if let Some(eligible) = changes.node_eligible {
                health.proxy().set_node_eligible(eligible);
            }
        }
        for (key, ports) in changes.services {
            let old = self.table.get(&key).map_or(&[][..], Vec::as_slice);
            if old == ports.as_slice() {
                continue;
            }
            self.flushes.extend(conntrack::stale(old, &ports));
            if ports.is_empty() {
                self.table.remove(&key);
            } else {
                self.table.insert(key.clone(), ports);
            }
            self.pending.insert(key);
        }
        if let Some(ips) = changes.node_ips
            && ips != self.context.node_ips
        {
            self.context.node_ips = ips;
            self.needs_full = true;
        }
    }

    /// The next sync rewrites everything.
    pub fn force_full_sync(&mut self) {
        self.needs_full = true;
    }

    /// Whether a sync has anything to do.
    pub fn is_dirty(&self) -> bool {
        self.needs_full || !self.pending.is_empty()
    }

    /// Programs the dataplane; on error the next sync is a full one.
    pub fn sync(&mut self) -> Result<()> {
        if !self.is_dirty() {
            // the changes taken changed no rule: they are programmed
            if let Some(health) = &self.health {
                health.proxy().updated();
            }
            return Ok(());
        }
        let start = Instant::now();
        let synced =
            self.dataplane
                .sync(&self.table, &self.pending, &self.context, self.needs_full);
        if let Err(e) = synced {
            self.needs_full = true;
            return Err(e);
        }
        if let Some(health) = &self.health {
            health.synced(&self.table);
        }
        self.pending.clear();
        self.needs_full = false;
        self.flushes.sort();
        self.flushes.dedup();
        for flush in self.flushes.drain(..) {
            flush.run(self.runner.as_ref());
        }
        self.metrics.synced(start.elapsed(), SystemTime::now());
        Ok(())
    }
}

/// Syncs whenever `notify` fires, at most once per `min_sync_period`, starting with a full sync
/// once `tracker` holds the informers' first lists; `ready` is called after that first sync
/// succeeded. A failed sync is retried after `min_sync_period`.
pub async fn run(
    mut proxier: Proxier,
    tracker: Arc<Mutex<ChangeTracker>>,
    notify: Arc<Notify>,
    min_sync_period: Duration,
    ready: impl FnOnce(),
) {
    let mut ready = Some(ready);
    let mut last: Option<tokio::time::Instant> = None;
    loop {
        if !proxier.is_dirty() && !tracker.lock().has_changes() {
            let woken = tokio::time::timeout(FULL_SYNC_PERIOD, notify.notified()).await;
            if woken.is_err() {
                proxier.force_full_sync();
            }
        }
        if let Some(last) = last {
            tokio::time::sleep_until(last + min_sync_period).await;
        }
        last = Some(tokio::time::Instant::now());
        let changes = tracker.lock().take();
        proxier.apply(changes);
        let (returned, synced) = tokio::task::spawn_blocking(move || {
            let synced = proxier.sync();
            (proxier, synced)
        })
        .await
        .expect("the sync task does not panic");
        proxier = returned;
        match synced {
            Ok(()) => {
                if let Some(ready) = ready.take() {
                    ready();
                }
            }
            Err(error) => tracing::warn!(%error, "syncing proxy rules failed; retrying"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::iptables::Iptables;
    use crate::model::fixtures::{service, slice};
    use crate::runner::FakeRunner;

    fn proxier(runner: &FakeRunner) -> Proxier {
        let runner: Arc<dyn Runner> = Arc::new(runner.clone());
        Proxier::new(
            Box::new(Iptables::new(runner.clone())),
            runner,
            Context::default(),
            Arc::new(Metrics::default()),
        )
    }

    fn restores(runner: &FakeRunner) -> usize {
        runner
            .calls()
            .iter()
            .filter(|c| c.program == "iptables-restore")
            .count()
    }

    #[test]
    fn a_failed_apply_is_retried_as_a_full_sync() {
        let runner = FakeRunner::default();
        let mut proxier = proxier(&runner);
        let mut tracker = ChangeTracker::new("n1");
        tracker.service_updated(Arc::new(service(
            "ns",
            "a",
            "10.43.0.1",
            &[("", "TCP", 80)],
        )));
        proxier.apply(tracker.take());
        proxier.sync().unwrap();
        tracker.service_updated(Arc::new(service(
            "ns",
            "b",
            "10.43.0.2",
            &[("", "TCP", 80)],
        )));
        proxier.apply(tracker.take());
        runner.fail_next("iptables-restore");
        assert!(proxier.sync().is_err());
        assert!(proxier.is_dirty());
        runner.clear();
        proxier.sync().unwrap();
        // the retry is full: it looks for stale chains and rewrites both Services' rules
        let calls = runner.calls();
        assert!(calls.iter().any(|c| c.program == "iptables-save"));
        let input = calls
            .iter()
            .find(|c| c.program == "iptables-restore")
            .and_then(|c| c.stdin.clone())
            .unwrap();
        assert!(input.contains("ns/a has no endpoints"));
        assert!(input.contains("ns/b has no endpoints"));
        assert!(!proxier.is_dirty());
    }

    #[test]
    fn an_unchanged_service_update_does_not_sync() {
        let runner = FakeRunner::default();
        let mut proxier = proxier(&runner);
        let mut tracker = ChangeTracker::new("n1");
        let svc = service("ns", "a", "10.43.0.1", &[("", "TCP", 80)]);
        tracker.service_updated(Arc::new(svc.clone()));
        proxier.apply(tracker.take());
        proxier.sync().unwrap();
        tracker.service_updated(Arc::new(svc));
        proxier.apply(tracker.take());
        assert!(!proxier.is_dirty());
        proxier.sync().unwrap();
        assert_eq!(restores(&runner), 1);
    }

    #[test]
    fn removed_udp_endpoints_are_flushed_after_the_rules_are_applied() {
        let runner = FakeRunner::default();
        let mut proxier = proxier(&runner);
        let mut tracker = ChangeTracker::new("n1");
        tracker.service_updated(Arc::new(service(
            "ns",
            "u",
            "10.43.0.3",
            &[("", "UDP", 53)],
        )));
        let s = slice(
            "ns",
            "u",
            "u-1",
            ("", "UDP", 53),
            &[("10.42.0.2", "n1", true)],
        );
        tracker.slice_updated(Arc::new(s.clone()));
        proxier.apply(tracker.take());
        proxier.sync().unwrap();
        runner.clear();
        tracker.slice_deleted(&s);
        proxier.apply(tracker.take());
        proxier.sync().unwrap();
        let programs: Vec<String> = runner.calls().into_iter().map(|c| c.program).collect();
        assert_eq!(programs, ["iptables-restore", "conntrack"]);
        assert_eq!(
            runner.calls()[1].args.join(" "),
            "-D --orig-dst 10.43.0.3 --dst-nat 10.42.0.2 -p udp"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_batches_changes_and_reports_ready_after_the_first_sync() {
        let runner = FakeRunner::default();
        let tracker = Arc::new(Mutex::new(ChangeTracker::new("n1")));
        let notify = Arc::new(Notify::new());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        tracker.lock().service_updated(Arc::new(service(
            "ns",
            "a",
            "10.43.0.1",
            &[("", "TCP", 80)],
        )));
        let task = tokio::spawn(run(
            proxier(&runner),
            tracker.clone(),
            notify.clone(),
            Duration::from_secs(1),
            move || {
                let _ = ready_tx.send(());
            },
        ));
        ready_rx.await.unwrap();
        assert_eq!(restores(&runner), 1);
        for i in 2..5 {
            let ip = format!("10.43.0.{i}");
            tracker.lock().service_updated(Arc::new(service(
                "ns",
                &format!("s{i}"),
                &ip,
                &[("", "TCP", 80)],
            )));
            notify.notify_one();
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        // three changes inside one minimum sync period: one more sync
        assert_eq!(restores(&runner), 2);
        // nothing changes for an hour: a full sync anyway (it reads the table back)
        runner.clear();
        tokio::time::sleep(FULL_SYNC_PERIOD + Duration::from_secs(2)).await;
        let programs: Vec<String> = runner.calls().into_iter().map(|c| c.program).collect();
        assert!(
            programs.contains(&"iptables-save".to_string()),
            "{programs:?}"
        );
        assert_eq!(restores(&runner), 1);
        task.abort();
    }
}
