//! Client-side request rate limiting, as client-go's `QPS` and `Burst` (a token bucket that
//! holds `burst` tokens and refills `qps` per second): a tower layer for kube's
//! `ClientBuilder`, so a component's requests wait for a token before they are sent. Watches
//! take one token when they start, like any other request.
//!
//! Written here rather than taken from `tower::limit::RateLimit`, whose fixed window has no
//! burst and which cannot be shared by the client's clones.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// A token bucket: up to `burst` requests at once, `qps` per second sustained.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A full bucket. `burst` is at least 1.
    pub fn new(qps: f32, burst: u32) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: f64::from(qps),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Takes a token, or says how long until one is there.
    pub fn try_take(&self) -> Result<(), Duration> {
        let mut state = self.state.lock();
        let tokens = self.refill(&mut state);
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / self.qps))
        }
    }

    /// Takes a token even when there is none yet, and says how long until it would have been
    /// there (golang.org/x/time/rate's `Reserve().Delay()`, client-go's bucket rate limiter).
    pub fn reserve(&self) -> Duration {
        let mut state = self.state.lock();
        let tokens = self.refill(&mut state);
        *tokens -= 1.0;
        if *tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-*tokens / self.qps)
        }
    }

    /// Adds the tokens earned since the last take; returns the count.
    fn refill<'a>(&self, state: &'a mut (f64, Instant)) -> &'a mut f64 {
        let now = Instant::now();
        state.0 = (state.0 + now.duration_since(state.1).as_secs_f64() * self.qps).min(self.burst);
        state.1 = now;
        &mut state.0
    }
}

/// The layer: every service it wraps shares one bucket.
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    bucket: Arc<TokenBucket>,
}

impl RateLimitLayer {
    /// `None` when `qps` is not positive: no limit (client-go's negative QPS).
    pub fn new(qps: f32, burst: u32) -> Option<RateLimitLayer> {
        (qps > 0.0).then(|| RateLimitLayer {
            bucket: Arc::new(TokenBucket::new(qps, burst)),
        })
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            sleep: None,
            holds_token: false,
        }
    }
}

/// Waits in `poll_ready` for a token, then for the inner service.
pub struct RateLimit<S> {
    inner: S,
    bucket: Arc<TokenBucket>,
    sleep: Option<Pin<Box<Sleep>>>,
    /// A token was taken for the next `call` (poll_ready may be called again before it).
    holds_token: bool,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.holds_token {
            if let Some(sleep) = self.sleep.as_mut() {
                ready!(sleep.as_mut().poll(cx));
                self.sleep = None;
            }
            match self.bucket.try_take() {
                Ok(()) => self.holds_token = true,
                Err(wait) => self.sleep = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> Self::Future {
        self.holds_token = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_then_requests_come_at_the_rate() {
        let layer = RateLimitLayer::new(10.0, 3).unwrap();
        let mut svc = layer.layer(tower::service_fn(|_: ()| async {
            Ok::<_, std::convert::Infallible>(Instant::now())
        }));
        let start = Instant::now();
        let mut sent = Vec::new();
        for _ in 0..5 {
            sent.push(svc.ready().await.unwrap().call(()).await.unwrap() - start);
        }
        let ms: Vec<u128> = sent.iter().map(|d| d.as_millis()).collect();
        assert_eq!(ms, vec![0, 0, 0, 100, 200]);
        assert!(RateLimitLayer::new(-1.0, 10).is_none());
    }
}
