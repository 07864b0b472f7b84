//! Join tokens (kubeadm's bootstrap tokens in k3s's secure form): `skiff token create`, and
//! [`prepare_joins`], which `skiff server` calls at start. A token is the Secret
//! `kube-system/bootstrap-token-<id>` that authenticates `<id>.<secret>` as
//! `system:bootstrap:<id>` in `system:bootstrappers:skiff:default-node-token`; bindings let that
//! group ask for node client certificates and get them approved (kubeadm's
//! `kubeadm:kubelet-bootstrap` and `kubeadm:node-autoapprove-bootstrap`) and let nodes renew
//! theirs (`kubeadm:node-autoapprove-certificate-rotation`); the ConfigMap
//! `kube-public/cluster-info`, readable anonymously, hands out the cluster CA. A joining node
//! is given `K10<sha256 of the CA certificate PEM, hex>::<id>.<secret>`, so that it can check
//! the CA it fetched over an unverified connection before it trusts it (k3s's secure token).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, bail};
use base64::Engine as _;
use clap::Args;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{
    ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams};

use super::kubelet::go_duration;

/// The group every token this module makes adds (kubeadm's `…:kubeadm:default-node-token`).
pub const NODE_TOKEN_GROUP: &str = "system:bootstrappers:skiff:default-node-token";
/// Where the CA is published for joining nodes (kubeadm's).
pub const CLUSTER_INFO_NAMESPACE: &str = "kube-public";
pub const CLUSTER_INFO: &str = "cluster-info";
/// The ConfigMap key holding a kubeconfig with the cluster's CA.
pub const CLUSTER_INFO_KEY: &str = "kubeconfig";
const FIELD_MANAGER: &str = "skiff-join";

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    /// An admin kubeconfig of the cluster.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// How long the token authenticates, as a Go duration (`24h0m0s`, kubeadm's default);
    /// `0` never expires.
    #[arg(long, value_name = "DURATION", default_value = "24h0m0s", value_parser = ttl)]
    pub ttl: Duration,

    /// Print the whole `skiff agent` command line that joins a node with the token.
    #[arg(long)]
    pub print_join_command: bool,

    /// Keep the token in `DIR/token` and print the one already there while its Secret exists
    /// (the server's join token, which never expires: what `skiff server` prepares at start).
    #[arg(long, value_name = "DIR", conflicts_with = "ttl")]
    pub data_dir: Option<PathBuf>,
}

/// `skiff token <what>`.
#[derive(Debug, clap::Subcommand)]
pub enum TokenCommand {
    /// Create a join token and print it (`K10<ca hash>::<id>.<secret>`).
    Create(TokenCreateArgs),
}

/// A Go duration, or `0` (zero: never expires).
fn ttl(text: &str) -> Result<Duration, String> {
    match text {
        "0" | "0s" => Ok(Duration::ZERO),
        _ => go_duration(text),
    }
}

/// A join token: the hash of the cluster CA it vouches for, and the bootstrap token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinToken {
    /// sha256 of the CA certificate PEM, lowercase hex.
    pub ca_hash: String,
    pub id: String,
    pub secret: String,
}

impl std::fmt::Display for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "K10{}::{}.{}", self.ca_hash, self.id, self.secret)
    }
}

impl std::str::FromStr for JoinToken {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || {
            "the token must be K10<sha256 of the cluster CA>::<id>.<secret> (as `skiff token create` prints it)".to_string()
        };
        let rest = text.trim().strip_prefix("K10").ok_or_else(bad)?;
        let (hash, bootstrap) = rest.split_once("::").ok_or_else(bad)?;
        let (id, secret) = bootstrap.split_once('.').ok_or_else(bad)?;
        let token_part = |s: &str, n: usize| {
            s.len() == n
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        let hex = hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit());
        if !hex || !token_part(id, 6) || !token_part(secret, 16) {
            return Err(bad());
        }
        Ok(JoinToken {
            ca_hash: hash.to_ascii_lowercase(),
            id: id.into(),
            secret: secret.into(),
        })
    }
}

impl JoinToken {
    /// The bootstrap token the API server authenticates (`<id>.<secret>`).
    pub fn bootstrap_token(&self) -> String {
        format!("{}.{}", self.id, self.secret)
    }
}

/// sha256 of the CA certificate PEM exactly as published, lowercase hex.
pub fn ca_hash(ca_pem: &[u8]) -> String {
    ring::digest::digest(&ring::digest::SHA256, ca_pem)
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `n` random characters of `[a-z0-9]` from the system's secure generator.
fn random_token_part(n: usize) -> anyhow::Result<String> {
    use ring::rand::SecureRandom;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let rng = ring::rand::SystemRandom::new();
    let mut out = String::with_capacity(n);
    while out.len() < n {
        let mut byte = [0u8; 1];
        rng.fill(&mut byte)
            .map_err(|_| anyhow::anyhow!("the system's random generator failed"))?;
        // 252 = 7 × 36: reject the rest so that every character is equally likely
        if byte[0] < 252 {
            out.push(ALPHABET[usize::from(byte[0]) % ALPHABET.len()] as char);
        }
    }
    Ok(out)
}

/// The bootstrap-token Secret for `id`/`secret`, expiring at `expiration` if given.
fn token_secret(id: &str, secret: &str, expiration: Option<jiff::Timestamp>) -> Secret {
    let mut data = BTreeMap::from([
        ("token-id".to_string(), id.to_string()),
        ("token-secret".to_string(), secret.to_string()),
        (
            "usage-bootstrap-authentication".to_string(),
            "true".to_string(),
        ),
        (
            "auth-extra-groups".to_string(),
            NODE_TOKEN_GROUP.to_string(),
        ),
        (
            "description".to_string(),
            "Skiff join token: nodes use it once to obtain their certificates".to_string(),
        ),
    ]);
    if let Some(at) = expiration {
        data.insert(
            "expiration".into(),
            at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        );
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(format!("bootstrap-token-{id}")),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        string_data: Some(data),
        ..Default::default()
    }
}

/// Creates a new bootstrap token valid for `ttl` (forever without).
pub async fn create_token(
    admin: &kube::Client,
    ttl: Option<Duration>,
) -> anyhow::Result<(String, String)> {
    let (id, secret) = (random_token_part(6)?, random_token_part(16)?);
    let expiration = match ttl {
        Some(ttl) => Some(
            jiff::Timestamp::now()
                .checked_add(jiff::SignedDuration::try_from(ttl)?)
                .context("the token's expiration")?,
        ),
        None => None,
    };
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    secrets
        .create(&Default::default(), &token_secret(&id, &secret, expiration))
        .await
        .context("creating the bootstrap token Secret")?;
    Ok((id, secret))
}

fn binding(name: &str, role: &str, group: &str) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: role.into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Group".into(),
            name: group.into(),
            ..Default::default()
        }]),
    }
}

/// A kubeconfig naming only the cluster CA (what `cluster-info` publishes; kubeadm's also
/// names the server, which joining nodes already know).
pub fn cluster_info_kubeconfig(ca_pem: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: {ca}\n    server: \"\"\ncontexts: []\ncurrent-context: \"\"\npreferences: {{}}\nusers: []\n"
    )
}

/// Makes sure the policy for joining nodes is in place (idempotent, server-side apply): the
/// ClusterRoleBindings of the token group and of `system:nodes`, and `kube-public/cluster-info`
/// with the CA, readable by `system:anonymous`.
pub async fn ensure_join_policy(admin: &kube::Client, ca_pem: &str) -> anyhow::Result<()> {
    let apply = PatchParams::apply(FIELD_MANAGER).force();
    let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
    for b in [
        binding(
            "skiff:node-bootstrap",
            "system:node-bootstrapper",
            NODE_TOKEN_GROUP,
        ),
        binding(
            "skiff:node-autoapprove-bootstrap",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            NODE_TOKEN_GROUP,
        ),
        binding(
            "skiff:node-autoapprove-certificate-rotation",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
    ] {
        let name = b.metadata.name.clone().unwrap_or_default();
        bindings
            .patch(
                &name,
                &apply,
                &Patch::Apply(&with_kind(&b, "ClusterRoleBinding")?),
            )
            .await
            .with_context(|| format!("applying the ClusterRoleBinding {name}"))?;
    }
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), CLUSTER_INFO_NAMESPACE);
    let info = ConfigMap {
        metadata: ObjectMeta {
            name: Some(CLUSTER_INFO.into()),
            namespace: Some(CLUSTER_INFO_NAMESPACE.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            CLUSTER_INFO_KEY.to_string(),
            cluster_info_kubeconfig(ca_pem),
        )])),
        ..Default::default()
    };
    configmaps
        .patch(
            CLUSTER_INFO,
            &apply,
            &Patch::Apply(&with_kind(&info, "ConfigMap")?),
        )
        .await
        .context("applying the ConfigMap kube-public/cluster-info")?;
    let role_name = "skiff:bootstrap-signer-clusterinfo";
    let role = Role {
        metadata: ObjectMeta {
            name: Some(role_name.into()),
            namespace: Some(CLUSTER_INFO_NAMESPACE.into()),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            resource_names: Some(vec![CLUSTER_INFO.into()]),
            verbs: vec!["get".into()],
            ..Default::default()
        }]),
    };
    let role_binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(role_name.into()),
            namespace: Some(CLUSTER_INFO_NAMESPACE.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "Role".into(),
            name: role_name.into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "User".into(),
            name: "system:anonymous".into(),
            ..Default::default()
        }]),
    };
    Api::<Role>::namespaced(admin.clone(), CLUSTER_INFO_NAMESPACE)
        .patch(role_name, &apply, &Patch::Apply(&with_kind(&role, "Role")?))
        .await
        .context("applying the Role kube-public/skiff:bootstrap-signer-clusterinfo")?;
    Api::<RoleBinding>::namespaced(admin.clone(), CLUSTER_INFO_NAMESPACE)
        .patch(
            role_name,
            &apply,
            &Patch::Apply(&with_kind(&role_binding, "RoleBinding")?),
        )
        .await
        .context("applying the RoleBinding kube-public/skiff:bootstrap-signer-clusterinfo")?;
    Ok(())
}

/// `object` as JSON with its apiVersion and kind (an apply patch names them).
fn with_kind<K: serde::Serialize + kube::Resource<DynamicType = ()>>(
    object: &K,
    kind: &str,
) -> anyhow::Result<serde_json::Value> {
    let mut value = serde_json::to_value(object)?;
    value["apiVersion"] = K::api_version(&()).into_owned().into();
    value["kind"] = kind.into();
    Ok(value)
}

/// Reads `D/token` if it holds a join token for this CA whose Secret still exists.
async fn existing_token(
    admin: &kube::Client,
    path: &Path,
    ca_hash: &str,
) -> anyhow::Result<Option<JoinToken>> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Ok(None);
    };
    let Ok(token) = text.parse::<JoinToken>() else {
        return Ok(None);
    };
    if token.ca_hash != ca_hash {
        return Ok(None);
    }
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "kube-system");
    let name = format!("bootstrap-token-{}", token.id);
    let kept = secrets
        .get_opt(&name)
        .await
        .with_context(|| format!("reading the Secret kube-system/{name}"))?
        .is_some_and(|s| s.metadata.deletion_timestamp.is_none());
    Ok(kept.then_some(token))
}

/// What `skiff server` calls at start: the join policy ([`ensure_join_policy`]) and a join
/// token that never expires, kept in `data_dir/token` (mode 0600) and reused while its Secret
/// exists. `ca_pem` is the cluster CA certificate exactly as in `D/tls/ca.crt`; the token's
/// hash is of those bytes.
pub async fn prepare_joins(
    admin: kube::Client,
    ca_pem: &str,
    data_dir: &Path,
) -> anyhow::Result<JoinToken> {
    ensure_join_policy(&admin, ca_pem).await?;
    let path = data_dir.join("token");
    let hash = ca_hash(ca_pem.as_bytes());
    if let Some(token) = existing_token(&admin, &path, &hash).await? {
        return Ok(token);
    }
    let (id, secret) = create_token(&admin, None).await?;
    let token = JoinToken {
        ca_hash: hash,
        id,
        secret,
    };
    skiff_apiserver::pki::write_private(&path, &format!("{token}\n"))?;
    Ok(token)
}

/// The current context's cluster of a kubeconfig: its server URL and CA PEM.
fn server_and_ca(path: &Path) -> anyhow::Result<(String, String)> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    let context = kubeconfig
        .current_context
        .as_deref()
        .and_then(|name| kubeconfig.contexts.iter().find(|c| c.name == name))
        .and_then(|c| c.context.as_ref())
        .with_context(|| format!("{}: no current context", path.display()))?;
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .with_context(|| format!("{}: no cluster {}", path.display(), context.cluster))?;
    let server = cluster.server.clone().unwrap_or_default();
    let ca = match (
        &cluster.certificate_authority_data,
        &cluster.certificate_authority,
    ) {
        (Some(data), _) => String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(data.trim())
                .context("decoding certificate-authority-data")?,
        )?,
        (None, Some(file)) => {
            std::fs::read_to_string(file).with_context(|| format!("reading {file}"))?
        }
        (None, None) => bail!("{}: the cluster names no CA", path.display()),
    };
    Ok((server, ca))
}

pub async fn run(command: TokenCommand) -> anyhow::Result<()> {
    let TokenCommand::Create(args) = command;
    let (server, ca_pem) = server_and_ca(&args.kubeconfig)?;
    let admin = kube::Client::try_from(super::kube_config(&args.kubeconfig).await?)?;
    let token = match &args.data_dir {
        Some(dir) => prepare_joins(admin, &ca_pem, dir).await?,
        None => {
            ensure_join_policy(&admin, &ca_pem).await?;
            let ttl = (!args.ttl.is_zero()).then_some(args.ttl);
            let (id, secret) = create_token(&admin, ttl).await?;
            JoinToken {
                ca_hash: ca_hash(ca_pem.as_bytes()),
                id,
                secret,
            }
        }
    };
    if args.print_join_command {
        println!("skiff agent --server {server} --token {token}");
    } else {
        println!("{token}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_token_reads_back_as_written_and_refuses_other_forms() {
        let token = JoinToken {
            ca_hash: ca_hash(b"PEM"),
            id: "abcdef".into(),
            secret: "0123456789abcdef".into(),
        };
        assert_eq!(token.to_string().parse::<JoinToken>(), Ok(token.clone()));
        assert_eq!(token.bootstrap_token(), "abcdef.0123456789abcdef");
        assert!("abcdef.0123456789abcdef".parse::<JoinToken>().is_err());
        assert!(
            "K10abc::abcdef.0123456789abcdef"
                .parse::<JoinToken>()
                .is_err()
        );
    }

    #[test]
    fn random_token_parts_are_lowercase_alphanumerics() {
        let part = random_token_part(16).unwrap();
        assert_eq!(part.len(), 16);
        assert!(
            part.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        );
        assert_ne!(part, random_token_part(16).unwrap());
    }

    #[test]
    fn the_ca_hash_is_the_sha256_of_the_pem() {
        assert_eq!(
            ca_hash(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
