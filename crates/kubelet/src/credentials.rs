//! Registry credentials from a pod's `imagePullSecrets`, as upstream's kubelet keyring reads
//! them (`pkg/credentialprovider`): `kubernetes.io/dockerconfigjson` (`.dockerconfigjson`, an
//! `auths` map) and the legacy `kubernetes.io/dockercfg` (`.dockercfg`). An image is matched
//! against each entry by registry host (with port; `*` globs one host label) and repository
//! path prefix; the most specific entries come first, and each is tried in turn.

use crate::cri::AuthConfig;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Docker Hub, as image references without a registry host mean it.
const DOCKER_HUB: &str = "docker.io";

#[derive(Debug, Deserialize, Default)]
struct Entry {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    auth: String,
}

#[derive(Debug, Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, Entry>,
}

/// The credentials read from pull secrets, keyed by `host[:port][/path]`.
#[derive(Debug, Default)]
pub struct Keyring {
    entries: Vec<(String, AuthConfig)>,
}

impl Keyring {
    /// Adds the entries of one secret's data; data of other types adds nothing.
    pub fn add_secret(&mut self, data: &BTreeMap<String, Vec<u8>>) {
        let auths = if let Some(json) = data.get(".dockerconfigjson") {
            serde_json::from_slice::<DockerConfigJson>(json)
                .map(|c| c.auths)
                .unwrap_or_default()
        } else if let Some(json) = data.get(".dockercfg") {
            serde_json::from_slice::<BTreeMap<String, Entry>>(json).unwrap_or_default()
        } else {
            return;
        };
        for (key, entry) in auths {
            let (mut username, mut password) = (entry.username, entry.password);
            if username.is_empty()
                && let Ok(decoded) = STANDARD.decode(entry.auth.trim())
                && let Some((u, p)) = String::from_utf8_lossy(&decoded).split_once(':')
            {
                (username, password) = (u.to_string(), p.to_string());
            }
            let key = normalize_key(&key);
            // no server address, as upstream's keyring: containerd parses it as a URL and
            // matches it against the image's host itself
            let auth = AuthConfig {
                username,
                password,
                ..Default::default()
            };
            self.entries.push((key, auth));
        }
        // most specific first, as upstream's keyring orders its index
        self.entries.sort_by_key(|e| std::cmp::Reverse(e.0.len()));
    }

    /// The credentials to try for `image`, most specific first; empty means pull anonymously.
    pub fn lookup(&self, image: &str) -> Vec<AuthConfig> {
        let (host, path) = split_image(image);
        self.entries
            .iter()
            .filter(|(key, _)| matches(key, &host, &path))
            .map(|(_, auth)| auth.clone())
            .collect()
    }
}

/// A config key without scheme, trailing slash or the `/v1/`, `/v2/` API suffix; Docker Hub's
/// historical keys become `docker.io`.
fn normalize_key(key: &str) -> String {
    let key = key
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let key = key
        .strip_suffix("/v1")
        .or_else(|| key.strip_suffix("/v2"))
        .unwrap_or(key);
    match key {
        "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB.to_string(),
        _ => key.to_string(),
    }
}

/// An image reference's registry host and repository path (without tag or digest).
fn split_image(image: &str) -> (String, String) {
    let name = image.split('@').next().unwrap_or(image);
    // a tag is the part after the last ':' that follows the last '/'
    let name = match name.rfind(':') {
        Some(i) if !name[i..].contains('/') => &name[..i],
        _ => name,
    };
    match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => {
            let host = match first {
                "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB,
                h => h,
            };
            (host.to_string(), rest.to_string())
        }
        Some(_) => (DOCKER_HUB.to_string(), name.to_string()),
        None => (DOCKER_HUB.to_string(), format!("library/{name}")),
    }
}

/// Whether a failed pull was the registry refusing the credentials (or their absence), as
/// opposed to the registry being unreachable. Only then may Skiff not fall back to an image
/// already present (see docs/compatibility.md): a pod must not run a private image it could
/// not pull itself.
pub fn refused(pull_error: &str) -> bool {
    [
        "401 Unauthorized",
        "403 Forbidden",
        "authorization failed",
        "denied:",
    ]
    .iter()
    .any(|needle| pull_error.contains(needle))
}

fn matches(key: &str, host: &str, path: &str) -> bool {
    let (key_host, key_path) = key.split_once('/').unwrap_or((key, ""));
    let host_matches = {
        let (kh, kp) = key_host.split_once(':').unwrap_or((key_host, ""));
        let (ih, ip) = host.split_once(':').unwrap_or((host, ""));
        let kl: Vec<&str> = kh.split('.').collect();
        let il: Vec<&str> = ih.split('.').collect();
        kp == ip && kl.len() == il.len() && kl.iter().zip(&il).all(|(k, i)| glob(k, i))
    };
    host_matches
        && (key_path.is_empty() || path == key_path || path.starts_with(&format!("{key_path}/")))
}

/// `*` matches any run of characters within one host label.
fn glob(pattern: &str, label: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == label,
        Some((prefix, rest)) => {
            label.starts_with(prefix)
                && (0..=label.len() - prefix.len()).any(|i| glob(rest, &label[prefix.len() + i..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyring(json: &str) -> Keyring {
        let mut k = Keyring::default();
        k.add_secret(&BTreeMap::from([(
            ".dockerconfigjson".into(),
            json.as_bytes().to_vec(),
        )]));
        k
    }

    fn users(k: &Keyring, image: &str) -> Vec<String> {
        k.lookup(image).into_iter().map(|a| a.username).collect()
    }

    #[test]
    fn images_match_by_host_and_port_then_path_prefix_most_specific_first() {
        let k = keyring(
            r#"{"auths": {
                "https://127.0.0.1:5000/v2/": {"username": "any", "password": "p"},
                "127.0.0.1:5000/team": {"username": "team", "password": "p"},
                "127.0.0.1:5001": {"username": "other-port", "password": "p"}}}"#,
        );
        assert_eq!(users(&k, "127.0.0.1:5000/team/app:1"), ["team", "any"]);
        assert_eq!(users(&k, "127.0.0.1:5000/teams/app"), ["any"]);
        assert_eq!(users(&k, "127.0.0.1:5001/x@sha256:abc"), ["other-port"]);
        assert!(users(&k, "quay.io/x").is_empty());
    }

    #[test]
    fn docker_hub_keys_and_short_names_meet_at_docker_io() {
        let k = keyring(r#"{"auths": {"https://index.docker.io/v1/": {"auth": "dXNlcjpwYXNz"}}}"#);
        let auth = &k.lookup("busybox")[0];
        assert_eq!(
            (auth.username.as_str(), auth.password.as_str()),
            ("user", "pass")
        );
        assert_eq!(users(&k, "library/busybox:1.36"), ["user"]);
        assert_eq!(users(&k, "docker.io/me/app"), ["user"]);
    }

    #[test]
    fn host_globs_match_one_label_each() {
        let k = keyring(r#"{"auths": {"*.example.com": {"username": "glob", "password": "p"}}}"#);
        assert_eq!(users(&k, "registry.example.com/app"), ["glob"]);
        assert!(users(&k, "a.registry.example.com/app").is_empty());
        assert!(users(&k, "example.com/app").is_empty());
    }

    #[test]
    fn legacy_dockercfg_is_read_and_other_secrets_add_nothing() {
        let mut k = Keyring::default();
        k.add_secret(&BTreeMap::from([(
            ".dockercfg".into(),
            br#"{"quay.io": {"username": "old", "password": "p"}}"#.to_vec(),
        )]));
        k.add_secret(&BTreeMap::from([("token".into(), b"x".to_vec())]));
        assert_eq!(users(&k, "quay.io/a/b"), ["old"]);
    }

    #[test]
    fn refusals_are_told_from_unreachable_registries() {
        assert!(refused(
            "failed to fetch anonymous token: unexpected status: 401 Unauthorized"
        ));
        assert!(!refused(
            "dial tcp 127.0.0.1:5000: connect: connection refused"
        ));
        assert!(!refused("lookup registry-1.docker.io: no such host"));
    }
}
