//! The embedded store's background tasks: lease expiry, periodic watch progress, and automatic
//! compaction. Each holds only a weak sender to the writer, so it never keeps the store open.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio::time::{Instant, MissedTickBehavior};

use super::writer::{Request, Submitted};
use super::{EmbeddedConfig, Shared};

/// When the embedded store compacts its history by itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionPolicy {
    /// Only on explicit `compact` calls.
    Disabled,
    /// Every `interval`, compact to the revision that was current one interval ago, so at least
    /// `interval` of history is always kept (kube-apiserver's `--etcd-compaction-interval`,
    /// default 5 minutes).
    Periodic(Duration),
    /// Every `every`, compact so that the last `keep` revisions remain (etcd's
    /// `--auto-compaction-mode=revision`).
    Revisions { keep: i64, every: Duration },
}

impl CompactionPolicy {
    /// The revision to compact to on a tick at which `current` is the committed revision;
    /// `previous` is the policy's memory between ticks.
    pub fn target(&self, previous: &mut Option<i64>, current: i64) -> Option<i64> {
        match *self {
            CompactionPolicy::Disabled => None,
            CompactionPolicy::Periodic(_) => previous.replace(current),
            CompactionPolicy::Revisions { keep, .. } => Some(current - keep).filter(|t| *t > 0),
        }
    }
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy::Periodic(Duration::from_secs(300))
    }
}

pub(crate) fn spawn(
    config: &EmbeddedConfig,
    shared: Arc<Shared>,
    writer: mpsc::WeakSender<Submitted>,
) -> Vec<AbortHandle> {
    let mut tasks = vec![
        tokio::spawn(expire_leases(
            config.lease_check_interval,
            shared.clone(),
            writer.clone(),
        ))
        .abort_handle(),
        tokio::spawn(progress(config.progress_interval, shared.clone())).abort_handle(),
    ];
    if config.compaction != CompactionPolicy::Disabled {
        tasks.push(tokio::spawn(auto_compact(config.compaction, shared, writer)).abort_handle());
    }
    tasks
}

fn interval(period: Duration) -> tokio::time::Interval {
    let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    ticker
}

async fn expire_leases(period: Duration, shared: Arc<Shared>, writer: mpsc::WeakSender<Submitted>) {
    let mut ticker = interval(period);
    loop {
        ticker.tick().await;
        let now = Instant::now();
        let expired: Vec<i64> = {
            let ix = shared.index.read();
            ix.leases
                .iter()
                .filter(|(_, l)| l.expiry <= now)
                .map(|(id, _)| *id)
                .collect()
        };
        for id in expired {
            let Some(tx) = writer.upgrade() else { return };
            let (reply, done) = oneshot::channel();
            if tx
                .send((
                    Request::LeaseRevoke {
                        id,
                        expired_at: Some(now),
                        reply,
                    },
                    None,
                ))
                .await
                .is_err()
            {
                return;
            }
            drop(tx);
            if let Ok(Err(e)) = done.await {
                tracing::warn!(lease = id, error = %e, "revoking an expired lease failed");
            }
        }
    }
}

async fn progress(period: Duration, shared: Arc<Shared>) {
    let mut ticker = interval(period);
    loop {
        ticker.tick().await;
        shared.hub.tick();
    }
}

async fn auto_compact(
    policy: CompactionPolicy,
    shared: Arc<Shared>,
    writer: mpsc::WeakSender<Submitted>,
) {
    let period = match policy {
        CompactionPolicy::Disabled => return,
        CompactionPolicy::Periodic(every) | CompactionPolicy::Revisions { every, .. } => every,
    };
    let mut ticker = interval(period);
    let mut previous: Option<i64> = None;
    loop {
        ticker.tick().await;
        let current = shared.committed.load(Ordering::Acquire);
        let Some(target) = policy.target(&mut previous, current) else {
            continue;
        };
        if target <= shared.index.read().compact_revision {
            continue;
        }
        let Some(tx) = writer.upgrade() else { return };
        let (reply, done) = oneshot::channel();
        if tx
            .send((
                Request::Compact {
                    revision: target,
                    reply,
                },
                None,
            ))
            .await
            .is_err()
        {
            return;
        }
        drop(tx);
        match done.await {
            Ok(Ok(())) => tracing::debug!(revision = target, "compacted"),
            Ok(Err(e)) => {
                tracing::warn!(revision = target, error = %e, "automatic compaction failed")
            }
            Err(_) => return,
        }
    }
}
