//! Service account tokens (TokenRequest): JWTs signed ES256 with an ECDSA P-256 key the API
//! server creates on first start and keeps with its PKI files (`tls/service-account.key`, and
//! its public half in `tls/service-account.pub` for verifiers). The claims are upstream's
//! (`pkg/serviceaccount/claims.go`): `iss`, `sub` = `system:serviceaccount:NS:NAME`, `aud`,
//! `exp`/`iat`/`nbf`, `jti`, and the private `kubernetes.io` claim naming the namespace, the
//! service account and, for tokens bound to a pod, the pod and its node. The header's `kid` is
//! upstream's: the unpadded base64url SHA-256 of the public key's DER.
//!
//! Requests that carry these tokens are authenticated by
//! [`crate::authn::service_account`], which verifies them with [`TokenIssuer::decoding_key`].

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use base64::Engine;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header};
use serde::{Deserialize, Serialize};

/// Upstream's conventional `--service-account-issuer`, also the default audience.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
const KEY_FILE: &str = "service-account.key";
const PUBLIC_KEY_FILE: &str = "service-account.pub";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("generating the service account signing key: {0}")]
    Generate(#[source] rcgen::Error),
    #[error("loading the service account key {}: {source}", path.display())]
    Key {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("signing a service account token: {0}")]
    Sign(#[source] jsonwebtoken::errors::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A name and uid in the `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ref {
    pub name: String,
    pub uid: String,
}

/// The private `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubernetesClaim {
    pub namespace: String,
    pub serviceaccount: Ref,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<Ref>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<Ref>,
}

/// A token's claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub aud: Vec<String>,
    pub exp: i64,
    pub iat: i64,
    pub iss: String,
    pub jti: String,
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaim,
    pub nbf: i64,
    pub sub: String,
}

/// Signs service account tokens.
pub struct TokenIssuer {
    issuer: String,
    encoding: EncodingKey,
    public_key_pem: String,
    kid: String,
}

impl std::fmt::Debug for TokenIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIssuer")
            .field("issuer", &self.issuer)
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

fn read(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(Error::Read {
            path: path.into(),
            source,
        }),
    }
}

fn write(path: &Path, contents: &str, mode: u32) -> Result<()> {
    let err = |source| Error::Write {
        path: path.into(),
        source,
    };
    std::fs::write(path, contents).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(err)
}

impl TokenIssuer {
    /// Loads the signing key from `dir`, creating it (and `dir`) on first start.
    pub fn ensure(dir: &Path, issuer: &str) -> Result<TokenIssuer> {
        std::fs::create_dir_all(dir).map_err(|source| Error::Write {
            path: dir.into(),
            source,
        })?;
        let key_path = dir.join(KEY_FILE);
        let key_pem = match read(&key_path)? {
            Some(pem) => pem,
            None => {
                let key = rcgen::KeyPair::generate().map_err(Error::Generate)?;
                let pem = key.serialize_pem();
                write(&key_path, &pem, 0o600)?;
                pem
            }
        };
        let key_err = |source: Box<dyn std::error::Error + Send + Sync>| Error::Key {
            path: key_path.clone(),
            source,
        };
        let key = rcgen::KeyPair::from_pem(&key_pem).map_err(|e| key_err(Box::new(e)))?;
        let encoding =
            EncodingKey::from_ec_pem(key_pem.as_bytes()).map_err(|e| key_err(Box::new(e)))?;
        let public_key_pem = key.public_key_pem();
        write(&dir.join(PUBLIC_KEY_FILE), &public_key_pem, 0o644)?;
        let digest = ring::digest::digest(
            &ring::digest::SHA256,
            &rcgen::PublicKeyData::subject_public_key_info(&key),
        );
        let kid = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest.as_ref());
        Ok(TokenIssuer {
            issuer: issuer.into(),
            encoding,
            public_key_pem,
            kid,
        })
    }

    /// The `iss` of every token, also the default audience.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The key that verifies this issuer's tokens.
    pub fn decoding_key(&self) -> Result<DecodingKey> {
        DecodingKey::from_ec_pem(self.public_key_pem.as_bytes()).map_err(Error::Sign)
    }

    /// Signs the claims (ES256, with upstream's `kid`).
    pub fn sign(&self, claims: &Claims) -> Result<String> {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.encoding).map_err(Error::Sign)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use jsonwebtoken::Validation;

    use super::*;

    fn claims() -> Claims {
        sample_claims(3_999_996_400, 4_000_000_000)
    }

    /// A pod-bound token's claims (`prod/robot`, pod `web` on node `n1`), issued (and valid
    /// from) `issued`, expiring at `expires`.
    pub(crate) fn sample_claims(issued: i64, expires: i64) -> Claims {
        Claims {
            aud: vec![DEFAULT_ISSUER.into()],
            exp: expires,
            iat: issued,
            iss: DEFAULT_ISSUER.into(),
            jti: "j1".into(),
            kubernetes: KubernetesClaim {
                namespace: "prod".into(),
                serviceaccount: Ref {
                    name: "robot".into(),
                    uid: "sa-uid".into(),
                },
                pod: Some(Ref {
                    name: "web".into(),
                    uid: "pod-uid".into(),
                }),
                secret: None,
                node: Some(Ref {
                    name: "n1".into(),
                    uid: "node-uid".into(),
                }),
            },
            nbf: issued,
            sub: "system:serviceaccount:prod:robot".into(),
        }
    }

    #[test]
    fn a_signed_token_verifies_with_the_public_key_and_keeps_its_claims() {
        let dir = tempfile::tempdir().unwrap();
        let issuer = TokenIssuer::ensure(dir.path(), DEFAULT_ISSUER).unwrap();
        let token = issuer.sign(&claims()).unwrap();
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_audience(&[DEFAULT_ISSUER]);
        validation.set_issuer(&[DEFAULT_ISSUER]);
        let decoded =
            jsonwebtoken::decode::<Claims>(&token, &issuer.decoding_key().unwrap(), &validation)
                .unwrap();
        assert_eq!(decoded.claims, claims());
        assert_eq!(decoded.header.kid.as_deref(), Some(issuer.kid.as_str()));
        // the private claim's JSON is upstream's
        let json = serde_json::to_value(&decoded.claims).unwrap();
        assert_eq!(json["kubernetes.io"]["pod"]["name"], "web");
        assert!(json["kubernetes.io"].get("secret").is_none());
    }

    #[test]
    fn the_key_is_created_once_and_kept_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let first = TokenIssuer::ensure(dir.path(), DEFAULT_ISSUER).unwrap();
        let token = first.sign(&claims()).unwrap();
        let second = TokenIssuer::ensure(dir.path(), DEFAULT_ISSUER).unwrap();
        assert_eq!(first.kid, second.kid);
        let mode = std::fs::metadata(dir.path().join(KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_audience(&[DEFAULT_ISSUER]);
        jsonwebtoken::decode::<Claims>(&token, &second.decoding_key().unwrap(), &validation)
            .unwrap();
    }

    #[test]
    fn a_token_from_another_key_does_not_verify() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let token = TokenIssuer::ensure(a.path(), DEFAULT_ISSUER)
            .unwrap()
            .sign(&claims())
            .unwrap();
        let other = TokenIssuer::ensure(b.path(), DEFAULT_ISSUER).unwrap();
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_audience(&[DEFAULT_ISSUER]);
        assert!(
            jsonwebtoken::decode::<Claims>(&token, &other.decoding_key().unwrap(), &validation)
                .is_err()
        );
    }
}
