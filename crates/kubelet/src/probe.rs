//! Container probes as upstream's prober runs them: startup, liveness and readiness probes with
//! exec, tcpSocket, httpGet and grpc handlers; initialDelaySeconds, periodSeconds, timeoutSeconds and
//! the success and failure thresholds. [`Probes`] keeps each running container's probe state
//! (owned by its pod worker, so nothing here is shared); [`run`] performs one probe.

use std::collections::HashMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container as ApiContainer, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::cri::ContainerRuntime;

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Until it succeeds, the others do not run; failing it restarts the container.
    Startup,
    /// Failing it restarts the container.
    Liveness,
    /// Its result is the container's `ready`.
    Readiness,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Liveness => "Liveness",
            Kind::Readiness => "Readiness",
        }
    }

    pub fn of(self, container: &ApiContainer) -> Option<&Probe> {
        match self {
            Kind::Startup => container.startup_probe.as_ref(),
            Kind::Liveness => container.liveness_probe.as_ref(),
            Kind::Readiness => container.readiness_probe.as_ref(),
        }
    }

    /// The result before the first probe (upstream: readiness and startup start failed,
    /// liveness succeeded).
    fn initial(self) -> bool {
        self == Kind::Liveness
    }
}

#[derive(Debug, Clone)]
struct State {
    result: bool,
    successes: i32,
    failures: i32,
    last_run: Option<Timestamp>,
}

/// Probe state of one pod's containers, by container id.
#[derive(Debug, Default)]
pub struct Probes {
    states: HashMap<(String, Kind), State>,
}

/// What recording a probe's outcome changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The result stays as it was.
    Same,
    /// The thresholds were crossed: the result is now this.
    Now(bool),
}

fn seconds(v: Option<i32>, default: i32) -> i64 {
    i64::from(v.filter(|s| *s > 0).unwrap_or(default))
}

impl Probes {
    /// The current result for a container's probe (its initial one before any run).
    pub fn result(&self, id: &str, kind: Kind) -> bool {
        self.states
            .get(&(id.to_string(), kind))
            .map(|s| s.result)
            .unwrap_or(kind.initial())
    }

    /// Whether the probe should run now: past its initial delay after the container started,
    /// and a period after its last run.
    pub fn due(
        &self,
        id: &str,
        kind: Kind,
        probe: &Probe,
        started: Timestamp,
        now: Timestamp,
    ) -> bool {
        self.until_due(id, kind, probe, started, now).is_zero()
    }

    /// How long until the probe is [`due`](Probes::due) (zero if it is). Times count in whole
    /// seconds, as upstream's probe periods do.
    pub fn until_due(
        &self,
        id: &str,
        kind: Kind,
        probe: &Probe,
        started: Timestamp,
        now: Timestamp,
    ) -> Duration {
        let delay = i64::from(probe.initial_delay_seconds.unwrap_or(0).max(0));
        let mut at = started.as_second() + delay;
        if let Some(last) = self
            .states
            .get(&(id.to_string(), kind))
            .and_then(|s| s.last_run)
        {
            at = at.max(last.as_second() + seconds(probe.period_seconds, 10));
        }
        // due once `now.as_second() >= at`, that is from the start of second `at`
        let wait = i128::from(at) * 1_000_000_000 - now.as_nanosecond();
        Duration::from_nanos(u64::try_from(wait).unwrap_or(0))
    }

    /// Records one outcome and applies the thresholds.
    pub fn record(
        &mut self,
        id: &str,
        kind: Kind,
        probe: &Probe,
        ok: bool,
        now: Timestamp,
    ) -> Transition {
        let state = self.states.entry((id.to_string(), kind)).or_insert(State {
            result: kind.initial(),
            successes: 0,
            failures: 0,
            last_run: None,
        });
        state.last_run = Some(now);
        if ok {
            state.successes += 1;
            state.failures = 0;
        } else {
            state.failures += 1;
            state.successes = 0;
        }
        let flip = if ok {
            !state.result && i64::from(state.successes) >= seconds(probe.success_threshold, 1)
        } else {
            // a startup probe starts failed: reaching the threshold still restarts the container
            (state.result || kind == Kind::Startup)
                && i64::from(state.failures) >= seconds(probe.failure_threshold, 3)
        };
        if flip {
            state.result = ok;
            Transition::Now(ok)
        } else {
            Transition::Same
        }
    }

    /// Forgets containers that are no longer running.
    pub fn retain(&mut self, running: &[String]) {
        self.states.retain(|(id, _), _| running.contains(id));
    }
}

/// Runs one probe against a container; Err carries why it failed (the `Unhealthy` message).
pub async fn run(
    runtime: &dyn ContainerRuntime,
    probe: &Probe,
    container: &ApiContainer,
    container_id: &str,
    pod_ip: &str,
) -> Result<(), String> {
    let timeout = Duration::from_secs(seconds(probe.timeout_seconds, 1) as u64);
    let port = |p: &IntOrString| -> Result<u16, String> {
        match p {
            IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("invalid port {n}")),
            IntOrString::String(name) => container
                .ports
                .iter()
                .flatten()
                .find(|cp| cp.name.as_deref() == Some(name))
                .and_then(|cp| u16::try_from(cp.container_port).ok())
                .ok_or_else(|| format!("no port named {name}")),
        }
    };
    if let Some(exec) = &probe.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        let r = runtime
            .exec_sync(container_id, cmd, timeout.as_secs() as i64)
            .await
            .map_err(|e| e.to_string())?;
        if r.exit_code == 0 {
            return Ok(());
        }
        let out = String::from_utf8_lossy(&r.stdout).trim().to_string();
        return Err(format!("command exited with {}: {out}", r.exit_code));
    }
    if let Some(tcp) = &probe.tcp_socket {
        let host = tcp.host.clone().unwrap_or_else(|| pod_ip.to_string());
        let addr = format!("{host}:{}", port(&tcp.port)?);
        return match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&addr)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("dial tcp {addr}: {e}")),
            Err(_) => Err(format!("dial tcp {addr}: i/o timeout")),
        };
    }
    if let Some(http) = &probe.http_get {
        let host = http.host.clone().unwrap_or_else(|| pod_ip.to_string());
        let addr = format!("{host}:{}", port(&http.port)?);
        let path = http.path.clone().unwrap_or_else(|| "/".into());
        let get = async {
            let mut conn = tokio::net::TcpStream::connect(&addr).await?;
            let request = format!(
                "GET {path} HTTP/1.0\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\n\r\n"
            );
            conn.write_all(request.as_bytes()).await?;
            let mut head = vec![0u8; 64];
            let n = conn.read(&mut head).await?;
            Ok::<_, std::io::Error>(String::from_utf8_lossy(&head[..n]).into_owned())
        };
        let head = match tokio::time::timeout(timeout, get).await {
            Ok(Ok(head)) => head,
            Ok(Err(e)) => return Err(format!("Get \"http://{addr}{path}\": {e}")),
            Err(_) => {
                return Err(format!(
                    "Get \"http://{addr}{path}\": context deadline exceeded"
                ));
            }
        };
        let code: u16 = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        return if (200..400).contains(&code) {
            Ok(())
        } else {
            Err(format!("HTTP probe failed with statuscode: {code}"))
        };
    }
    if let Some(grpc) = &probe.grpc {
        let port = u16::try_from(grpc.port).map_err(|_| format!("invalid port {}", grpc.port))?;
        let service = grpc.service.clone().unwrap_or_default();
        return grpc_check(&format!("{pod_ip}:{port}"), service, timeout).await;
    }
    // a probe without a handler counts as success, as upstream
    Ok(())
}

/// One `grpc.health.v1.Health/Check` call, with upstream's failure messages.
async fn grpc_check(addr: &str, service: String, timeout: Duration) -> Result<(), String> {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

    let secs = timeout.as_secs();
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| format!("error: invalid address {addr}: {e}"))?
        .connect_timeout(timeout)
        .timeout(timeout);
    let channel = endpoint.connect().await.map_err(|e| {
        format!("timeout: failed to connect service \"{addr}\" within {secs}s: {e}")
    })?;
    let mut client = HealthClient::new(channel);
    let call = client.check(HealthCheckRequest { service });
    let response = match tokio::time::timeout(timeout, call).await {
        Err(_) => {
            return Err(format!(
                "timeout: health rpc did not complete within {secs}s"
            ));
        }
        Ok(Err(status)) if status.code() == tonic::Code::Unimplemented => {
            return Err(format!(
                "this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                status.message()
            ));
        }
        Ok(Err(status)) if status.code() == tonic::Code::DeadlineExceeded => {
            return Err(format!(
                "timeout: health rpc did not complete within {secs}s"
            ));
        }
        Ok(Err(status)) => {
            return Err(format!(
                "error: health rpc probe failed: {}",
                status.message()
            ));
        }
        Ok(Ok(r)) => r.into_inner(),
    };
    match ServingStatus::try_from(response.status) {
        Ok(ServingStatus::Serving) => Ok(()),
        Ok(other) => Err(format!(
            "service unhealthy (responded with \"{}\")",
            other.as_str_name()
        )),
        Err(_) => Err(format!(
            "service unhealthy (responded with \"{}\")",
            response.status
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn probe(v: serde_json::Value) -> Probe {
        serde_json::from_value(v).unwrap()
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn a_probe_waits_its_initial_delay_then_runs_once_a_period() {
        let p = probe(json!({"initialDelaySeconds": 5, "periodSeconds": 3}));
        let mut probes = Probes::default();
        assert!(!probes.due("c", Kind::Liveness, &p, at(100), at(104)));
        assert!(probes.due("c", Kind::Liveness, &p, at(100), at(105)));
        probes.record("c", Kind::Liveness, &p, true, at(105));
        assert!(!probes.due("c", Kind::Liveness, &p, at(100), at(107)));
        assert!(probes.due("c", Kind::Liveness, &p, at(100), at(108)));
    }

    #[test]
    fn the_wait_until_a_probe_is_due_counts_to_the_start_of_its_second() {
        let p = probe(json!({"initialDelaySeconds": 5, "periodSeconds": 3}));
        let mut probes = Probes::default();
        let wait = |probes: &Probes, now| probes.until_due("c", Kind::Liveness, &p, at(100), now);
        assert_eq!(
            wait(&probes, at(101)),
            Duration::from_secs(4),
            "the initial delay"
        );
        probes.record("c", Kind::Liveness, &p, true, at(105));
        assert_eq!(wait(&probes, at(105)), Duration::from_secs(3), "a period");
        let later = Timestamp::from_nanosecond(106_250_000_000).unwrap();
        assert_eq!(wait(&probes, later), Duration::from_millis(1750));
        assert_eq!(wait(&probes, at(109)), Duration::ZERO, "overdue");
    }

    #[test]
    fn liveness_fails_after_the_failure_threshold_and_readiness_needs_a_success() {
        let p = probe(json!({"failureThreshold": 2}));
        let mut probes = Probes::default();
        assert!(probes.result("c", Kind::Liveness));
        assert_eq!(
            probes.record("c", Kind::Liveness, &p, false, at(1)),
            Transition::Same
        );
        assert_eq!(
            probes.record("c", Kind::Liveness, &p, false, at(2)),
            Transition::Now(false)
        );
        assert!(!probes.result("c", Kind::Liveness));

        assert!(!probes.result("c", Kind::Readiness));
        assert_eq!(
            probes.record("c", Kind::Readiness, &p, true, at(1)),
            Transition::Now(true)
        );
        probes.retain(&[]);
        assert!(
            !probes.result("c", Kind::Readiness),
            "forgotten with its container"
        );
    }

    #[tokio::test]
    async fn exec_tcp_and_http_handlers() {
        let runtime = crate::fake::FakeRuntime::new();
        let container: ApiContainer = serde_json::from_value(json!({"name": "c",
            "ports": [{"name": "web", "containerPort": 1}]}))
        .unwrap();
        // exec against a container the runtime does not have fails
        let exec = probe(json!({"exec": {"command": ["true"]}}));
        assert!(
            run(&runtime, &exec, &container, "nope", "127.0.0.1")
                .await
                .is_err()
        );

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 512];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let status = if String::from_utf8_lossy(&buf[..n]).starts_with("GET /healthz ") {
                    "200 OK"
                } else {
                    "500 Internal Server Error"
                };
                let _ = conn
                    .write_all(format!("HTTP/1.0 {status}\r\n\r\n").as_bytes())
                    .await;
            }
        });
        let tcp = probe(json!({"tcpSocket": {"port": port}}));
        assert_eq!(
            run(&runtime, &tcp, &container, "x", "127.0.0.1").await,
            Ok(())
        );
        let ok = probe(json!({"httpGet": {"port": port, "path": "/healthz"}}));
        assert_eq!(
            run(&runtime, &ok, &container, "x", "127.0.0.1").await,
            Ok(())
        );
        let bad = probe(json!({"httpGet": {"port": port, "path": "/other"}}));
        assert_eq!(
            run(&runtime, &bad, &container, "x", "127.0.0.1").await,
            Err("HTTP probe failed with statuscode: 500".into())
        );
        let named = probe(json!({"tcpSocket": {"port": "missing"}}));
        assert!(
            run(&runtime, &named, &container, "x", "127.0.0.1")
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn grpc_handler_asks_the_health_service_and_reports_as_upstream() {
        use tonic_health::ServingStatus;
        let (reporter, service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("ready", ServingStatus::Serving)
            .await;
        reporter
            .set_service_status("sick", ServingStatus::NotServing)
            .await;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming),
        );
        let runtime = crate::fake::FakeRuntime::new();
        let container: ApiContainer = serde_json::from_value(json!({"name": "c"})).unwrap();
        let grpc = |service: &str| probe(json!({"grpc": {"port": port, "service": service}}));
        assert_eq!(
            run(&runtime, &grpc("ready"), &container, "x", "127.0.0.1").await,
            Ok(())
        );
        assert_eq!(
            run(&runtime, &grpc("sick"), &container, "x", "127.0.0.1").await,
            Err("service unhealthy (responded with \"NOT_SERVING\")".into())
        );
        let unknown = run(&runtime, &grpc("other"), &container, "x", "127.0.0.1").await;
        assert!(
            unknown
                .as_ref()
                .is_err_and(|e| e.starts_with("error: health rpc probe failed")),
            "{unknown:?}"
        );
        // nothing listens on the port any more once the listener is gone
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead = closed.local_addr().unwrap().port();
        drop(closed);
        let refused = probe(json!({"grpc": {"port": dead}}));
        let err = run(&runtime, &refused, &container, "x", "127.0.0.1").await;
        assert!(
            err.as_ref()
                .is_err_and(|e| e.starts_with("timeout: failed to connect service \"127.0.0.1:")),
            "{err:?}"
        );
    }
}
