//! The OIDC issuer's signing keys as the authenticator sees them: a fixed set (the
//! `--oidc-jwks-file`), or one a background task fetches from a [`KeySource`] (the issuer's
//! discovery document). Upstream's authenticator starts without keys and retries its first fetch
//! every 10 s, refusing tokens meanwhile; go-oidc's remote key set fetches again when a token
//! names a key it does not know. Here that refetch is asked of the task without waiting for it
//! (the token authenticators are synchronous and must not do I/O), at most once per 10 s.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jsonwebtoken::jwk::JwkSet;
use parking_lot::RwLock;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// How often the first fetch is retried while the issuer does not answer (upstream polls its
/// authenticator's initialisation every 10 s).
pub const RETRY_INTERVAL: Duration = Duration::from_secs(10);

/// The least time between two refetches asked for by tokens naming unknown keys.
pub const MIN_REFETCH_INTERVAL: Duration = Duration::from_secs(10);

/// Where the issuer's current keys come from.
#[async_trait]
pub trait KeySource: Send + Sync + 'static {
    /// The issuer's keys now, or why they could not be had.
    async fn fetch(&self) -> Result<JwkSet, String>;
}

/// The keys tokens are verified with.
#[derive(Debug)]
pub struct KeySet {
    /// `None` until the first fetch succeeds. The refresher replaces the whole set; readers
    /// clone the `Arc` and verify without holding the lock.
    current: Arc<RwLock<Option<Arc<JwkSet>>>>,
    /// Wakes the refresher (capacity one: wakes while one is pending coalesce); `None` for a
    /// fixed set. Dropping it stops the refresher.
    refetch: Option<mpsc::Sender<()>>,
}

impl KeySet {
    /// Keys that never change.
    pub fn fixed(keys: JwkSet) -> Self {
        Self {
            current: Arc::new(RwLock::new(Some(Arc::new(keys)))),
            refetch: None,
        }
    }

    /// Keys fetched from `source` by a task spawned on the current Tokio runtime; `issuer`
    /// names it in the logs. The task ends when the set is dropped.
    pub fn remote(issuer: &str, source: Arc<dyn KeySource>) -> Self {
        let current = Arc::new(RwLock::new(None));
        let (tx, rx) = mpsc::channel(1);
        tokio::spawn(refresh(issuer.to_string(), source, current.clone(), rx));
        Self {
            current,
            refetch: Some(tx),
        }
    }

    /// The keys now; `None` before the first fetch succeeded.
    pub fn current(&self) -> Option<Arc<JwkSet>> {
        self.current.read().clone()
    }

    /// Asks for the keys to be fetched again (a token named a key not in the set). Returns at
    /// once; the new keys serve later requests.
    pub fn refetch(&self) {
        if let Some(tx) = &self.refetch {
            let _ = tx.try_send(());
        }
    }
}

async fn refresh(
    issuer: String,
    source: Arc<dyn KeySource>,
    current: Arc<RwLock<Option<Arc<JwkSet>>>>,
    mut wake: mpsc::Receiver<()>,
) {
    loop {
        match source.fetch().await {
            Ok(keys) => {
                *current.write() = Some(Arc::new(keys));
                break;
            }
            Err(error) => {
                tracing::error!(%issuer, %error, "oidc authenticator: fetching the issuer's keys, retrying in 10s");
            }
        }
        tokio::time::sleep(RETRY_INTERVAL).await;
        if wake.is_closed() {
            return;
        }
    }
    // the first fetch answered the tokens that asked while it was retried
    while wake.try_recv().is_ok() {}
    let mut last: Option<Instant> = None;
    while wake.recv().await.is_some() {
        if let Some(last) = last {
            tokio::time::sleep_until(last + MIN_REFETCH_INTERVAL).await;
        }
        // one fetch answers every token that asked while this one waited
        while wake.try_recv().is_ok() {}
        last = Some(Instant::now());
        match source.fetch().await {
            Ok(keys) => *current.write() = Some(Arc::new(keys)),
            Err(error) => {
                tracing::warn!(%issuer, %error, "oidc authenticator: refetching the issuer's keys, keeping the old ones");
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A source answering what it is told, counting fetches.
    #[derive(Default)]
    pub(crate) struct FakeSource {
        pub answer: parking_lot::Mutex<Option<JwkSet>>,
        pub fetches: AtomicUsize,
    }

    #[async_trait]
    impl KeySource for FakeSource {
        async fn fetch(&self) -> Result<JwkSet, String> {
            self.fetches.fetch_add(1, Ordering::SeqCst);
            self.answer
                .lock()
                .clone()
                .ok_or_else(|| "connection refused".to_string())
        }
    }

    fn set(n: usize) -> JwkSet {
        let jwk = super::super::tests::key("k1").1.keys.remove(0);
        JwkSet {
            keys: std::iter::repeat_n(jwk, n).collect(),
        }
    }

    async fn wait(seconds: u64) {
        tokio::time::sleep(Duration::from_secs(seconds)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_fetch_is_retried_every_ten_seconds_until_the_issuer_answers() {
        let source = Arc::new(FakeSource::default());
        let keys = KeySet::remote("https://idp.example", source.clone());
        wait(15).await;
        assert_eq!(source.fetches.load(Ordering::SeqCst), 2);
        assert!(keys.current().is_none());
        *source.answer.lock() = Some(set(1));
        wait(10).await;
        assert_eq!(source.fetches.load(Ordering::SeqCst), 3);
        assert_eq!(keys.current().unwrap().keys.len(), 1);
        wait(60).await;
        assert_eq!(
            source.fetches.load(Ordering::SeqCst),
            3,
            "no polling once loaded"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn refetches_happen_at_once_then_at_most_every_ten_seconds() {
        let source = Arc::new(FakeSource::default());
        *source.answer.lock() = Some(set(1));
        let keys = KeySet::remote("https://idp.example", source.clone());
        wait(1).await;
        assert_eq!(source.fetches.load(Ordering::SeqCst), 1);
        *source.answer.lock() = Some(set(2));
        keys.refetch();
        wait(1).await;
        assert_eq!(source.fetches.load(Ordering::SeqCst), 2);
        assert_eq!(keys.current().unwrap().keys.len(), 2);
        // three more asks within the interval: one fetch, when the interval is over
        keys.refetch();
        keys.refetch();
        wait(1).await;
        keys.refetch();
        wait(5).await;
        assert_eq!(source.fetches.load(Ordering::SeqCst), 2);
        wait(5).await;
        assert_eq!(source.fetches.load(Ordering::SeqCst), 3);
        wait(30).await;
        assert_eq!(source.fetches.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_refetch_keeps_the_old_keys() {
        let source = Arc::new(FakeSource::default());
        *source.answer.lock() = Some(set(1));
        let keys = KeySet::remote("https://idp.example", source.clone());
        wait(1).await;
        *source.answer.lock() = None;
        keys.refetch();
        wait(1).await;
        assert_eq!(source.fetches.load(Ordering::SeqCst), 2);
        assert_eq!(keys.current().unwrap().keys.len(), 1);
    }

    #[test]
    fn a_fixed_set_is_there_at_once_and_ignores_refetches() {
        let keys = KeySet::fixed(set(1));
        keys.refetch();
        assert_eq!(keys.current().unwrap().keys.len(), 1);
    }
}
