//! `skiff bench api --gates`: what the request pipeline's gates cost. The pod-create workload
//! of `api-create` runs against three API servers started one after the other, each printing
//! one `api-gates` line:
//!
//! - `open`: `--authorization-mode AlwaysAllow`, every admission plugin disabled, the admin's
//!   client certificate — the pipeline without its gates (TLS stays: it is the transport);
//! - `cert`: the defaults (Node,RBAC; the whole admission chain) with 1,000 RoleBindings in the
//!   namespace, one of which lets the user `bench-user` (a client certificate from the cluster
//!   CA, not in `system:masters`, so RBAC decides) create pods through the `edit` ClusterRole;
//! - `token`: the same, `bench-user` authenticated by a bearer token from `--token-auth-file`.
//!
//! Each gated line carries `vs_open`: its throughput as a fraction of the open server's.

use anyhow::{Context, Result};
use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};

use super::{
    CpuMeter, Emitter, NAMESPACE, Plan, ServerChild, create_workload, max_ms, merge, ms, send_ok,
};

/// The admission plugins `open` disables: all of them.
const PLUGINS: &str = "NamespaceLifecycle,LimitRanger,ServiceAccount,PodSecurity,Priority,\
DefaultTolerationSeconds,NodeRestriction,DefaultStorageClass,StorageObjectInUseProtection,\
MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook,ResourceQuota";
const USER: &str = "bench-user";
const TOKEN: &str = "skiff-bench-gates-token-4d1f0c2a9b";
/// RoleBindings in the namespace for the authorizer to look through.
const BINDINGS: usize = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Open,
    Cert,
    Token,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Open => "open",
            Mode::Cert => "cert",
            Mode::Token => "token",
        }
    }
}

pub(super) async fn run(plan: &Plan, out: &Emitter) -> Result<()> {
    let mut open_rate = None;
    for mode in [Mode::Open, Mode::Cert, Mode::Token] {
        let tmp = tempfile::tempdir()?;
        let tokens = tmp.path().join("tokens.csv");
        std::fs::write(
            &tokens,
            format!("{TOKEN},{USER},{USER}-uid,\"bench-users\"\n"),
        )?;
        let tokens = tokens.to_str().context("utf-8 temp path")?.to_string();
        let extra: Vec<&str> = match mode {
            Mode::Open => vec![
                "--authorization-mode",
                "AlwaysAllow",
                "--disable-admission-plugins",
                PLUGINS,
            ],
            Mode::Cert | Mode::Token => vec!["--token-auth-file", &tokens],
        };
        let dir = tmp.path().join("api");
        let mut server = ServerChild::start_with(&dir, None, &extra).await?;
        let result = measure(mode, plan, &server, &dir).await;
        server.stop().await;
        let (rate, fields) = result.with_context(|| format!("gates {}", mode.name()))?;
        let mut fields = merge(json!({"gates": mode.name()}), fields);
        match open_rate {
            None => open_rate = Some(rate),
            Some(open) => fields["vs_open"] = json!(super::round3(rate / open)),
        }
        out.emit("api-gates", fields);
    }
    Ok(())
}

/// Sets the server up for `mode` and runs the create workload as its client; the throughput
/// and the line's fields.
async fn measure(
    mode: Mode,
    plan: &Plan,
    server: &ServerChild,
    dir: &std::path::Path,
) -> Result<(f64, Value)> {
    let admin_config = server.config().await?;
    let admin = kube::Client::try_from(admin_config.clone())?;
    for (path, body) in setup(mode) {
        send_ok(&admin, Method::POST, &path, "application/json", body).await?;
    }
    let client = match mode {
        Mode::Open => admin,
        Mode::Cert => kube::Client::try_from(server.user_config(dir, USER).await?)?,
        Mode::Token => {
            let mut config = admin_config;
            config.auth_info = kube::config::AuthInfo {
                token: Some(TOKEN.to_string().into()),
                ..Default::default()
            };
            kube::Client::try_from(config)?
        }
    };
    let cpu = CpuMeter {
        processes: vec![
            ("server", server.pid.to_string()),
            ("client", "self".into()),
        ],
    };
    let created = create_workload(&client, plan, &cpu).await?;
    let rate = created.ops as f64 / created.elapsed.as_secs_f64();
    let fields = merge(
        created.cpu,
        json!({
            "clients": plan.clients,
            "count": created.ops,
            "role_bindings": if mode == Mode::Open { 0 } else { BINDINGS },
            "ops_per_sec": rate.round(),
            "p50_ms": ms(&created.latency, 0.5),
            "p99_ms": ms(&created.latency, 0.99),
            "max_ms": max_ms(&created.latency),
        }),
    );
    Ok((rate, fields))
}

/// The objects the admin creates first: the namespace and its default ServiceAccount (the
/// ServiceAccount admission plugin refuses pods until it exists), and for the gated modes the
/// RoleBindings, the last of them the one that lets `bench-user` create pods.
fn setup(mode: Mode) -> Vec<(String, Bytes)> {
    let body = |v: Value| Bytes::from(v.to_string());
    let mut requests = vec![
        (
            "/api/v1/namespaces".to_string(),
            body(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})),
        ),
        (
            format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts"),
            body(
                json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}),
            ),
        ),
    ];
    if mode == Mode::Open {
        return requests;
    }
    let path = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{NAMESPACE}/rolebindings");
    for i in 0..BINDINGS {
        let (name, user, role) = if i + 1 == BINDINGS {
            (format!("{USER}-edits"), USER.to_string(), "edit")
        } else {
            (format!("reader-{i:04}"), format!("reader-{i:04}"), "view")
        };
        requests.push((
            path.clone(),
            body(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            })),
        ));
    }
    requests
}
