//! Encryption at rest (upstream's `--encryption-provider-config`): the
//! `apiserver.config.k8s.io/v1` EncryptionConfiguration file, which resources it covers and
//! with which providers, and the prefixed envelope every encrypted value carries
//! (`k8s:enc:<provider>:v1:<key name>:` then the provider's bytes). The first provider of a
//! resource encrypts every write; all of them are tried, by prefix, on reads, so a new key can
//! be put first and the old one kept until every object has been rewritten.
//!
//! # Layout
//! - this file: the configuration file and the per-resource transformers.
//! - [`providers`]: aesgcm, aescbc, secretbox and identity.
//! - [`store`]: a [`skiff_store::Store`] that encrypts on the way in and decrypts on the way
//!   out (range, txn, watch), so every path between the API server and the store is covered.

pub mod providers;
pub mod store;

use std::path::Path;

use base64::Engine;
use serde::Deserialize;

pub use providers::Provider;
pub use store::EncryptedStore;

/// Why an EncryptionConfiguration cannot be used, or a value cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading encryption provider configuration {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("error while parsing encryption provider configuration {path}: {reason}")]
    Parse { path: String, reason: String },
    #[error("invalid encryption provider configuration: {0}")]
    Invalid(String),
    /// A stored value no configured provider can read (its key is gone, or it was tampered
    /// with); the object is unreadable until the key is configured again.
    #[error("{0}")]
    Transform(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The file's shape (only the fields Skiff reads; unknown fields are refused as upstream's
/// strict decoding does).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct File {
    api_version: String,
    kind: String,
    #[serde(default)]
    resources: Vec<ResourceConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ResourceConfig {
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    providers: Vec<ProviderConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProviderConfig {
    aesgcm: Option<KeysConfig>,
    aescbc: Option<KeysConfig>,
    secretbox: Option<KeysConfig>,
    identity: Option<serde_json::Value>,
    kms: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeysConfig {
    #[serde(default)]
    keys: Vec<KeyConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeyConfig {
    name: String,
    secret: String,
}

/// Which resources a rule covers: `secrets` (core), `deployments.apps`, `*.apps` (a whole
/// group), `*.` (the whole core group) or `*.*` (everything).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Exact { group: String, resource: String },
    Group(String),
    All,
}

impl Pattern {
    fn parse(s: &str) -> Result<Self> {
        let s = s.trim().to_ascii_lowercase();
        if s == "*.*" {
            return Ok(Pattern::All);
        }
        if s == "*" {
            return Err(Error::Invalid(
                "resources[*]: '*' is not a valid resource; use '*.' for the core group or '*.*' for all resources".into(),
            ));
        }
        let (resource, group) = match s.split_once('.') {
            Some((r, g)) => (r.to_string(), g.to_string()),
            None => (s.clone(), String::new()),
        };
        if resource.is_empty() {
            return Err(Error::Invalid(format!("resource {s:?} names no resource")));
        }
        Ok(if resource == "*" {
            Pattern::Group(group)
        } else {
            Pattern::Exact { group, resource }
        })
    }

    /// `group` is the API group ("" for core), `resource` the plural.
    fn matches(&self, group: &str, resource: &str) -> bool {
        match self {
            Pattern::All => true,
            Pattern::Group(g) => g == group,
            Pattern::Exact {
                group: g,
                resource: r,
            } => g == group && r == resource,
        }
    }
}

/// The providers of one resource rule: the first encrypts, all decrypt (by prefix).
#[derive(Debug)]
pub struct Transformer {
    providers: Vec<Provider>,
}

impl Transformer {
    /// The stored form of `plain` under `key` (the store key, authenticated by aesgcm).
    pub fn encrypt(&self, key: &[u8], plain: &[u8]) -> Result<Vec<u8>> {
        self.providers[0].encrypt(key, plain)
    }

    /// The plaintext of a stored value, with whether it was written by anything other than the
    /// first provider (a later write re-encrypts it: upstream's "stale").
    pub fn decrypt(&self, key: &[u8], stored: &[u8]) -> Result<(Vec<u8>, bool)> {
        for (i, p) in self.providers.iter().enumerate() {
            if let Some(result) = p.try_decrypt(key, stored) {
                return result.map(|(plain, later_key)| (plain, later_key || i != 0));
            }
        }
        Err(Error::Transform(
            if stored.starts_with(providers::ENCRYPTED_PREFIX) {
                "no matching prefix found: the value was encrypted with a key the encryption provider configuration does not hold"
            } else {
                "no matching prefix found: the value is not encrypted and the identity provider is not configured"
            }
            .into(),
        ))
    }
}

/// Every rule of an EncryptionConfiguration, first match wins.
#[derive(Debug, Default)]
pub struct Encryption {
    rules: Vec<(Vec<Pattern>, std::sync::Arc<Transformer>)>,
}

impl Encryption {
    /// Reads and checks an EncryptionConfiguration file.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Self::parse(&text).map_err(|e| match e {
            Error::Parse { reason, .. } => Error::Parse {
                path: path.display().to_string(),
                reason,
            },
            other => other,
        })
    }

    /// Parses an EncryptionConfiguration (YAML or JSON).
    pub fn parse(text: &str) -> Result<Self> {
        let file: File = serde_yaml::from_str(text).map_err(|e| Error::Parse {
            path: String::new(),
            reason: e.to_string(),
        })?;
        if file.kind != "EncryptionConfiguration" {
            return Err(Error::Invalid(format!(
                "kind {:?}: expected EncryptionConfiguration",
                file.kind
            )));
        }
        if file.api_version != "apiserver.config.k8s.io/v1" {
            return Err(Error::Invalid(format!(
                "apiVersion {:?}: expected apiserver.config.k8s.io/v1",
                file.api_version
            )));
        }
        let mut rules = Vec::new();
        for (i, rc) in file.resources.iter().enumerate() {
            if rc.resources.is_empty() {
                return Err(Error::Invalid(format!(
                    "resources[{i}].resources: Required value: resources is a required field"
                )));
            }
            if rc.providers.is_empty() {
                return Err(Error::Invalid(format!(
                    "resources[{i}].providers: Required value: providers is a required field"
                )));
            }
            let patterns = rc
                .resources
                .iter()
                .map(|r| Pattern::parse(r))
                .collect::<Result<Vec<_>>>()?;
            let providers = rc
                .providers
                .iter()
                .enumerate()
                .map(|(j, p)| {
                    provider(p)
                        .map_err(|e| Error::Invalid(format!("resources[{i}].providers[{j}]: {e}")))
                })
                .collect::<Result<Vec<_>>>()?;
            rules.push((patterns, std::sync::Arc::new(Transformer { providers })));
        }
        Ok(Self { rules })
    }

    /// The transformer of a resource (`group` "" for core), if a rule covers it.
    pub fn for_resource(
        &self,
        group: &str,
        resource: &str,
    ) -> Option<&std::sync::Arc<Transformer>> {
        self.rules
            .iter()
            .find(|(patterns, _)| patterns.iter().any(|p| p.matches(group, resource)))
            .map(|(_, t)| t)
    }

    /// The transformer of a store key (`/registry/{group}/{resource}/…`), if any.
    pub fn for_key(&self, key: &[u8]) -> Option<&std::sync::Arc<Transformer>> {
        if self.rules.is_empty() {
            return None;
        }
        let key = std::str::from_utf8(key).ok()?;
        let (group, resource, _, _) = crate::storage::parse_key(key)?;
        let group = if group == "core" { "" } else { group };
        self.for_resource(group, resource)
    }
}

/// One provider entry: exactly one of its fields set.
fn provider(p: &ProviderConfig) -> Result<Provider, String> {
    let set = [
        p.aesgcm.is_some(),
        p.aescbc.is_some(),
        p.secretbox.is_some(),
        p.identity.is_some(),
        p.kms.is_some(),
    ]
    .iter()
    .filter(|s| **s)
    .count();
    if set != 1 {
        return Err("Invalid value: provider does not contain exactly one provider".into());
    }
    if p.kms.is_some() {
        return Err("kms providers are not supported by skiff (see docs/compatibility.md)".into());
    }
    if p.identity.is_some() {
        return Ok(Provider::Identity);
    }
    let (kind, keys, sizes): (&str, &KeysConfig, &[usize]) = if let Some(k) = &p.aesgcm {
        ("aesgcm", k, &[16, 24, 32])
    } else if let Some(k) = &p.aescbc {
        ("aescbc", k, &[16, 24, 32])
    } else if let Some(k) = p.secretbox.as_ref() {
        ("secretbox", k, &[32])
    } else {
        unreachable!("exactly one provider is set")
    };
    if keys.keys.is_empty() {
        return Err(format!(
            "{kind}.keys: Required value: keys is a required field"
        ));
    }
    let mut out = Vec::new();
    for (i, k) in keys.keys.iter().enumerate() {
        if k.name.is_empty() {
            return Err(format!(
                "{kind}.keys[{i}].name: Required value: key name is required"
            ));
        }
        if k.name.contains(':') {
            return Err(format!(
                "{kind}.keys[{i}].name: Invalid value: {:?}: should not contain ':'",
                k.name
            ));
        }
        if out.iter().any(|(n, _): &(String, Vec<u8>)| n == &k.name) {
            return Err(format!(
                "{kind}.keys[{i}].name: Duplicate value: {:?}",
                k.name
            ));
        }
        let secret = base64::engine::general_purpose::STANDARD
            .decode(k.secret.trim())
            .map_err(|e| format!("{kind}.keys[{i}].secret: Invalid value: REDACTED: secrets must be base64 encoded: {e}"))?;
        if !sizes.contains(&secret.len()) {
            return Err(format!(
                "{kind}.keys[{i}].secret: Invalid value: REDACTED: secret is not of the expected length, got {}, expected one of {sizes:?}",
                secret.len()
            ));
        }
        out.push((k.name.clone(), secret));
    }
    Ok(match kind {
        "aesgcm" => Provider::aes_gcm(out),
        "aescbc" => Provider::aes_cbc(out),
        _ => Provider::secretbox(out),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIG: &str = r#"
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets, configmaps.]
  providers:
  - aesgcm:
      keys:
      - {name: key2, secret: "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}
  - aescbc:
      keys:
      - {name: key1, secret: "ZmVkY2JhOTg3NjU0MzIxMA=="}
  - identity: {}
- resources: ["*.apps"]
  providers:
  - secretbox:
      keys:
      - {name: sb, secret: "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}
"#;

    #[test]
    fn rules_cover_named_resources_groups_and_nothing_else() {
        let e = Encryption::parse(CONFIG).unwrap();
        assert!(e.for_resource("", "secrets").is_some());
        assert!(e.for_resource("", "configmaps").is_some());
        assert!(e.for_resource("apps", "deployments").is_some());
        assert!(e.for_resource("", "pods").is_none());
        assert!(e.for_key(b"/registry/core/secrets/ns/a").is_some());
        assert!(e.for_key(b"/registry/apps/deployments/ns/a").is_some());
        assert!(e.for_key(b"/registry/core/pods/ns/a").is_none());
    }

    #[test]
    fn the_first_provider_writes_with_upstreams_prefix_and_every_provider_reads() {
        let e = Encryption::parse(CONFIG).unwrap();
        let t = e.for_resource("", "secrets").unwrap();
        let key = b"/registry/core/secrets/ns/a";
        let stored = t.encrypt(key, b"{\"data\":1}").unwrap();
        assert!(stored.starts_with(b"k8s:enc:aesgcm:v1:key2:"));
        assert!(!stored.windows(8).any(|w| w == b"\"data\":1"));
        assert_eq!(
            t.decrypt(key, &stored).unwrap(),
            (b"{\"data\":1}".to_vec(), false)
        );
        // plaintext written before encryption was turned on reads through identity, as stale
        assert_eq!(t.decrypt(key, b"{}").unwrap(), (b"{}".to_vec(), true));
    }

    #[test]
    fn a_value_no_configured_key_reads_is_an_error_not_a_panic() {
        let old = Encryption::parse(CONFIG).unwrap();
        let stored = old
            .for_resource("apps", "deployments")
            .unwrap()
            .encrypt(b"k", b"{}")
            .unwrap();
        let new = Encryption::parse(&CONFIG.replace("name: sb", "name: other")).unwrap();
        let err = new
            .for_resource("apps", "deployments")
            .unwrap()
            .decrypt(b"k", &stored)
            .unwrap_err();
        assert!(
            err.to_string().contains("no matching prefix found"),
            "{err}"
        );
        let plain = new
            .for_resource("apps", "deployments")
            .unwrap()
            .decrypt(b"k", b"{}");
        assert!(plain.is_err(), "without identity plaintext is refused");
    }

    #[test]
    fn bad_configurations_are_refused_with_the_field_that_is_wrong() {
        let short = CONFIG.replace("MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=", "c2hvcnQ=");
        let err = Encryption::parse(&short).unwrap_err().to_string();
        assert!(
            err.contains("resources[0].providers[0]: aesgcm.keys[0].secret"),
            "{err}"
        );
        let kms = CONFIG.replace("identity: {}", "kms: {name: x}");
        assert!(
            Encryption::parse(&kms)
                .unwrap_err()
                .to_string()
                .contains("kms")
        );
        let two = CONFIG.replace(
            "  - identity: {}",
            "  - identity: {}\n    aesgcm: {keys: []}",
        );
        assert!(
            Encryption::parse(&two)
                .unwrap_err()
                .to_string()
                .contains("exactly one")
        );
        let wrong = CONFIG.replace("kind: EncryptionConfiguration", "kind: Policy");
        assert!(Encryption::parse(&wrong).is_err());
    }
}
