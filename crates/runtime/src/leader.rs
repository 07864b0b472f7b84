//! Leader election on a Lease (client-go's `leaderelection` with a `LeaseLock`): candidates
//! race to write their identity into `spec.holderIdentity`; the holder renews every
//! `retry_period`; others take over once they have seen the same record unchanged for
//! `lease_duration`. Expiry is judged by when *this* candidate last saw the record change,
//! not by the holder's clock, as upstream does. Writes carry the resourceVersion read, so two
//! candidates cannot both win.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::time::Instant;

/// Timings (upstream's defaults for kube-scheduler and kube-controller-manager).
#[derive(Debug, Clone)]
pub struct Config {
    /// How long a record may stay unchanged before others may take the lease (15 s).
    pub lease_duration: Duration,
    /// How long the holder keeps trying to renew before it gives up leadership (10 s).
    pub renew_deadline: Duration,
    /// How often candidates try to acquire and the holder renews (2 s).
    pub retry_period: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What a candidate should do with the lease record it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Nobody holds it, it expired, or it is ours: write our identity (acquire or renew).
    Write,
    /// Another candidate holds it and it has not expired: wait.
    Wait,
}

/// The decision rule, without I/O: `holder` is the record's holder, `unchanged_for` how long
/// this candidate has seen the same record.
pub fn decide(
    holder: Option<&str>,
    me: &str,
    unchanged_for: Duration,
    lease: Duration,
) -> Decision {
    match holder {
        None | Some("") => Decision::Write,
        Some(h) if h == me => Decision::Write,
        Some(_) if unchanged_for >= lease => Decision::Write,
        Some(_) => Decision::Wait,
    }
}

/// One candidate for one lease.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    config: Config,
    /// The last record seen (its resourceVersion) and when it was first seen.
    observed: Option<(String, Instant)>,
}

impl LeaderElector {
    pub fn new(api: Api<Lease>, name: &str, identity: &str, config: Config) -> LeaderElector {
        LeaderElector {
            api,
            name: name.into(),
            identity: identity.into(),
            config,
            observed: None,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// One attempt: reads the lease and acquires or renews it if [`decide`] says so. `Ok(true)`
    /// while this candidate holds the lease.
    pub async fn try_acquire_or_renew(&mut self) -> kube::Result<bool> {
        let now = jiff::Timestamp::now();
        let spec = |transitions: i32, acquired: Option<MicroTime>| LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.config.lease_duration.as_secs() as i32),
            acquire_time: Some(acquired.unwrap_or(MicroTime(now))),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(transitions),
            ..Default::default()
        };
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(spec(0, None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let rv = current
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let seen_at = match &self.observed {
            Some((seen, at)) if *seen == rv => *at,
            _ => {
                let at = Instant::now();
                self.observed = Some((rv, at));
                at
            }
        };
        let old = current.spec.clone().unwrap_or_default();
        let holder = old.holder_identity.as_deref();
        let decision = decide(
            holder,
            &self.identity,
            seen_at.elapsed(),
            self.config.lease_duration,
        );
        if decision == Decision::Wait {
            return Ok(false);
        }
        let ours = holder == Some(self.identity.as_str());
        let transitions = old.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let acquired = if ours { old.acquire_time.clone() } else { None };
        let mut updated = current;
        updated.spec = Some(spec(transitions, acquired));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &updated)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Campaigns until this candidate leads, then keeps renewing; `leading` turns true on
    /// acquiring and false once a renewal has failed for `renew_deadline` (then this returns:
    /// upstream components exit at that point).
    pub async fn run(mut self, leading: watch::Sender<bool>) {
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => tracing::warn!(lease = %self.name, error = %e, "acquiring the lease"),
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
        tracing::info!(lease = %self.name, identity = %self.identity, "became leader");
        let _ = leading.send(true);
        let mut last_renewal = Instant::now();
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renewal = Instant::now(),
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(lease = %self.name, error = %e, "renewing the lease");
                    if last_renewal.elapsed() >= self.config.renew_deadline {
                        break;
                    }
                }
            }
        }
        tracing::warn!(lease = %self.name, identity = %self.identity, "lost the lease");
        let _ = leading.send(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(15);

    #[test]
    fn candidates_take_free_or_expired_leases_and_renew_their_own() {
        let cases = [
            ("nobody holds it", None, 0, Decision::Write),
            ("an empty holder", Some(""), 0, Decision::Write),
            ("it is ours", Some("me"), 0, Decision::Write),
            ("another holder, fresh", Some("other"), 14, Decision::Wait),
            (
                "another holder, expired",
                Some("other"),
                15,
                Decision::Write,
            ),
        ];
        for (name, holder, secs, want) in cases {
            assert_eq!(
                decide(holder, "me", Duration::from_secs(secs), LEASE),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn defaults_are_upstreams() {
        let c = Config::default();
        assert_eq!(
            (c.lease_duration, c.renew_deadline, c.retry_period),
            (
                Duration::from_secs(15),
                Duration::from_secs(10),
                Duration::from_secs(2)
            )
        );
    }
}
