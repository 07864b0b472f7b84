//! Upstream's `ServiceAccount` admission plugin, for new pods (mirror pods are left alone): a
//! pod naming no service account runs as `default`; the account must exist (403, upstream's
//! `error looking up service account NS/NAME: serviceaccount "NAME" not found`); unless the
//! pod or its account sets `automountServiceAccountToken: false`, every container and init
//! container gets the `kube-api-access-<5 random>` projected volume (a token for 3607 s, the
//! `kube-root-ca.crt` ConfigMap's `ca.crt`, the namespace) at
//! `/var/run/secrets/kubernetes.io/serviceaccount`, unless it already mounts something there;
//! and a pod without `imagePullSecrets` gets its account's.
//!
//! One deliberate difference (docs/compatibility.md): when the defaulted `default` account
//! does not exist yet (an API server running without the controller that creates it), the pod
//! is admitted without a token volume instead of refused.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin};
use crate::cache::Cacher;
use skiff_store::StoreExt;

use crate::error::{ApiError, Result};

pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// Where containers find their token, CA and namespace (upstream's `DefaultAPITokenMountPath`).
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Prefix of the token volume's name (upstream's `ServiceAccountVolumeName`).
pub const VOLUME_PREFIX: &str = "kube-api-access-";
/// The projected token's lifetime (upstream's `WarnOnlyBoundTokenExpirationSeconds`).
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3607;
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Reads service accounts.
#[async_trait]
pub trait ServiceAccountLookup: Send + Sync {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Value>>;
}

/// The watch cache, then the store (an account created a moment ago may not be cached yet).
pub struct StoreServiceAccounts {
    pub store: Arc<dyn skiff_store::Store>,
    pub cache: Arc<Cacher>,
}

#[async_trait]
impl ServiceAccountLookup for StoreServiceAccounts {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Value>> {
        let rt = skiff_apimachinery::catalog::lookup("", "v1", "serviceaccounts")
            .expect("serviceaccounts");
        if let Some(sa) = self.cache.resource(rt).get(&format!("{namespace}/{name}")) {
            return sa.object().map(Some);
        }
        let key = crate::storage::key(rt, namespace, name);
        match self.store.get(key.as_bytes()).await? {
            Some(kv) => crate::storage::decode(&kv).map(Some),
            None => Ok(None),
        }
    }
}

/// The plugin; `suffix` names new token volumes (random, as upstream's `utilrand.String(5)`).
pub struct ServiceAccount<L> {
    pub lookup: L,
    pub suffix: fn() -> String,
}

/// Five characters of upstream's `utilrand` alphabet (no vowels, no confusable digits).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4().as_bytes()[..5]
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// upstream's `TokenVolumeSource`.
pub fn token_volume(name: &str) -> Value {
    json!({"name": name, "projected": {"defaultMode": 0o644, "sources": [
        {"serviceAccountToken": {"path": "token",
                                 "expirationSeconds": TOKEN_EXPIRATION_SECONDS}},
        {"configMap": {"name": "kube-root-ca.crt",
                       "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace",
            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}]}})
}

/// Whether the token is mounted: the pod's setting wins over its account's; default yes.
fn automount(pod: &Value, account: &Value) -> bool {
    pod["spec"]["automountServiceAccountToken"]
        .as_bool()
        .or_else(|| account["automountServiceAccountToken"].as_bool())
        .unwrap_or(true)
}

/// upstream's `mountServiceAccountToken`: every container without a mount at the token path
/// gets one of the (existing or new) `kube-api-access-…` volume.
pub fn mount_token(pod: &mut Value, suffix: &str) {
    let existing = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str())
        .find(|n| n.starts_with(VOLUME_PREFIX))
        .map(str::to_string);
    let name = existing
        .clone()
        .unwrap_or_else(|| format!("{VOLUME_PREFIX}{suffix}"));
    let mount = json!({"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut needed = false;
    for list in ["initContainers", "containers"] {
        let Some(containers) = pod["spec"][list].as_array_mut() else {
            continue;
        };
        for c in containers {
            let mounted = c["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|m| m["mountPath"].as_str() == Some(TOKEN_MOUNT_PATH));
            if mounted {
                continue;
            }
            match c["volumeMounts"].as_array_mut() {
                Some(mounts) => mounts.push(mount.clone()),
                None => c["volumeMounts"] = json!([mount.clone()]),
            }
            needed = true;
        }
    }
    if needed && existing.is_none() {
        match pod["spec"]["volumes"].as_array_mut() {
            Some(v) => v.push(token_volume(&name)),
            None => pod["spec"]["volumes"] = json!([token_volume(&name)]),
        }
    }
}

#[async_trait]
impl<L: ServiceAccountLookup> Plugin for ServiceAccount<L> {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    async fn mutate(&self, attrs: &Attributes<'_>, object: Option<&mut Value>) -> Result<()> {
        let is_pod = attrs.resource.group.is_empty() && attrs.resource.plural == "pods";
        if attrs.operation != Operation::Create || !is_pod || !attrs.subresource.is_empty() {
            return Ok(());
        }
        let Some(pod) = object else {
            return Ok(());
        };
        if pod
            .pointer(&format!(
                "/metadata/annotations/{}",
                MIRROR_ANNOTATION.replace('/', "~1")
            ))
            .is_some()
        {
            return Ok(());
        }
        if !pod["spec"].is_object() {
            return Ok(());
        }
        let mut name = pod["spec"]["serviceAccountName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            // the deprecated alias, as upstream's conversion reads it
            name = pod["spec"]["serviceAccount"]
                .as_str()
                .unwrap_or_default()
                .to_string();
        }
        let defaulted = name.is_empty();
        if defaulted {
            name = DEFAULT_SERVICE_ACCOUNT.into();
        }
        pod["spec"]["serviceAccountName"] = json!(name);
        pod["spec"]["serviceAccount"] = json!(name);
        let Some(account) = self.lookup.get(attrs.namespace, &name).await? else {
            if defaulted {
                return Ok(());
            }
            return Err(ApiError::forbidden(format!(
                "pods \"{}\" is forbidden: error looking up service account {}/{name}: serviceaccount \"{name}\" not found",
                attrs.name, attrs.namespace
            )));
        };
        if automount(pod, &account) {
            mount_token(pod, &(self.suffix)());
        }
        let has_pull_secrets = pod["spec"]["imagePullSecrets"]
            .as_array()
            .is_some_and(|s| !s.is_empty());
        if !has_pull_secrets
            && let Some(secrets) = account["imagePullSecrets"].as_array()
            && !secrets.is_empty()
        {
            pod["spec"]["imagePullSecrets"] = json!(secrets);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::authn::UserInfo;

    struct Accounts(HashMap<String, Value>);

    #[async_trait]
    impl ServiceAccountLookup for Accounts {
        async fn get(&self, namespace: &str, name: &str) -> Result<Option<Value>> {
            Ok(self.0.get(&format!("{namespace}/{name}")).cloned())
        }
    }

    fn plugin(accounts: &[(&str, Value)]) -> ServiceAccount<Accounts> {
        ServiceAccount {
            lookup: Accounts(
                accounts
                    .iter()
                    .map(|(n, v)| (format!("prod/{n}"), v.clone()))
                    .collect(),
            ),
            suffix: || "abcde".into(),
        }
    }

    async fn admit(plugin: &ServiceAccount<Accounts>, pod: &mut Value) -> Result<()> {
        let user = UserInfo::default();
        let attrs = Attributes {
            operation: Operation::Create,
            resource: skiff_apimachinery::catalog::lookup("", "v1", "pods").unwrap(),
            subresource: "",
            namespace: "prod",
            name: "web",
            user: &user,
            old: None,
            dry_run: false,
            notes: Default::default(),
        };
        plugin.mutate(&attrs, Some(pod)).await
    }

    fn new_pod() -> Value {
        json!({"metadata": {"name": "web"}, "spec": {
            "initContainers": [{"name": "init"}],
            "containers": [{"name": "a"}, {"name": "b", "volumeMounts": [
                {"name": "own", "mountPath": TOKEN_MOUNT_PATH}]}]}})
    }

    #[tokio::test]
    async fn a_pod_runs_as_default_and_every_container_mounts_the_token_volume() {
        let p = plugin(&[("default", json!({}))]);
        let mut pod = new_pod();
        admit(&p, &mut pod).await.unwrap();
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        let mount = json!({"name": "kube-api-access-abcde", "readOnly": true,
                           "mountPath": TOKEN_MOUNT_PATH});
        assert_eq!(
            pod["spec"]["initContainers"][0]["volumeMounts"],
            json!([mount])
        );
        assert_eq!(pod["spec"]["containers"][0]["volumeMounts"], json!([mount]));
        // b already mounts something there: left alone
        assert_eq!(
            pod["spec"]["containers"][1]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        let volume = &pod["spec"]["volumes"][0];
        assert_eq!(volume, &token_volume("kube-api-access-abcde"));
        assert_eq!(
            volume["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3607
        );
    }

    #[tokio::test]
    async fn automount_false_on_the_pod_or_its_account_mounts_nothing() {
        let p = plugin(&[
            ("default", json!({})),
            ("quiet", json!({"automountServiceAccountToken": false})),
        ]);
        let mut pod = new_pod();
        pod["spec"]["serviceAccountName"] = json!("quiet");
        admit(&p, &mut pod).await.unwrap();
        assert!(pod["spec"]["volumes"].is_null());
        // the pod's own setting wins over its account's
        let mut pod = new_pod();
        pod["spec"]["serviceAccountName"] = json!("quiet");
        pod["spec"]["automountServiceAccountToken"] = json!(true);
        admit(&p, &mut pod).await.unwrap();
        assert_eq!(pod["spec"]["volumes"].as_array().unwrap().len(), 1);
        let mut pod = new_pod();
        pod["spec"]["automountServiceAccountToken"] = json!(false);
        admit(&p, &mut pod).await.unwrap();
        assert!(pod["spec"]["volumes"].is_null());
    }

    #[tokio::test]
    async fn a_pod_naming_a_missing_account_is_refused_with_upstreams_message() {
        let p = plugin(&[("default", json!({}))]);
        let mut pod = new_pod();
        pod["spec"]["serviceAccountName"] = json!("ghost");
        let err = admit(&p, &mut pod).await.unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "pods \"web\" is forbidden: error looking up service account prod/ghost: serviceaccount \"ghost\" not found"
        );
    }

    #[tokio::test]
    async fn without_a_default_account_yet_the_pod_is_admitted_without_a_token() {
        let p = plugin(&[]);
        let mut pod = new_pod();
        admit(&p, &mut pod).await.unwrap();
        assert_eq!(pod["spec"]["serviceAccountName"], "default");
        assert!(pod["spec"]["volumes"].is_null());
    }

    #[tokio::test]
    async fn an_existing_token_volume_is_reused_and_pull_secrets_come_from_the_account() {
        let p = plugin(&[(
            "default",
            json!({"imagePullSecrets": [{"name": "registry"}]}),
        )]);
        let mut pod = new_pod();
        pod["spec"]["volumes"] = json!([token_volume("kube-api-access-zzzzz")]);
        admit(&p, &mut pod).await.unwrap();
        assert_eq!(pod["spec"]["volumes"].as_array().unwrap().len(), 1);
        assert_eq!(
            pod["spec"]["containers"][0]["volumeMounts"][0]["name"],
            "kube-api-access-zzzzz"
        );
        assert_eq!(
            pod["spec"]["imagePullSecrets"],
            json!([{"name": "registry"}])
        );
    }

    #[test]
    fn random_suffixes_use_upstreams_alphabet() {
        let s = random_suffix();
        assert_eq!(s.len(), 5);
        assert!(
            s.bytes()
                .all(|b| b"bcdfghjklmnpqrstvwxz2456789".contains(&b))
        );
    }
}
