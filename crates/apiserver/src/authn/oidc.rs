//! OpenID Connect ID tokens (`--oidc-issuer-url`, `--oidc-client-id`, upstream's `oidc`
//! authenticator): a JWT whose `iss` is the issuer, signed by one of the issuer's keys, with the
//! client id among its audiences and not expired. The keys come from the issuer's discovery
//! document over HTTPS (trusting `--oidc-ca-file`), fetched in the background and again when a
//! token names a key not in the set, or from a JWKS file (`--oidc-jwks-file`, a Skiff flag). The username comes from
//! `--oidc-username-claim` (default `sub`) with `--oidc-username-prefix` (default `<issuer>#`
//! for every claim but `email`, `-` for none); an `email` claim needs `email_verified` true
//! when that claim is present. Groups come from `--oidc-groups-claim` (a string or a list)
//! with `--oidc-groups-prefix`.

//!
//! # Layout
//! - [`keys`]: the key set, fixed or refreshed from a [`keys::KeySource`].
//! - [`discovery`]: the HTTPS key source.

pub mod discovery;
pub mod keys;

use std::path::Path;
use std::sync::Arc;

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use super::service_account::unverified_issuer;
use super::{TokenAuthenticator, TokenResponse, UserInfo, implicit_audiences};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the OIDC JWKS file {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing the OIDC JWKS file {path}: {source}")]
    Parse {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("reading --oidc-ca-file {path}: {source}")]
    ReadCa {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("--oidc-ca-file {path}: {message}")]
    Ca { path: String, message: String },
    #[error("--oidc-issuer-url {0:?} must be an https URL")]
    Issuer(String),
    #[error("--oidc-client-id is required with --oidc-issuer-url")]
    ClientId,
}

/// The OIDC flags (upstream's defaults).
#[derive(Debug, Clone)]
pub struct Options {
    pub issuer_url: String,
    pub client_id: String,
    /// Default `sub`.
    pub username_claim: String,
    /// `None`: upstream's default (`<issuer>#` unless the claim is `email`); `-`: none.
    pub username_prefix: Option<String>,
    pub groups_claim: Option<String>,
    pub groups_prefix: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            issuer_url: String::new(),
            client_id: String::new(),
            username_claim: "sub".into(),
            username_prefix: None,
            groups_claim: None,
            groups_prefix: String::new(),
        }
    }
}

/// Verifies ID tokens of one issuer.
pub struct OidcAuthenticator {
    options: Options,
    username_prefix: String,
    keys: keys::KeySet,
    api_audiences: Vec<String>,
}

impl std::fmt::Debug for OidcAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcAuthenticator")
            .field("options", &self.options)
            .field("keys", &self.keys.current().map(|k| k.keys.len()))
            .finish()
    }
}

/// The issuer is an https URL and a client id is set.
fn validate(options: &Options) -> Result<(), Error> {
    if !options.issuer_url.starts_with("https://") {
        return Err(Error::Issuer(options.issuer_url.clone()));
    }
    if options.client_id.is_empty() {
        return Err(Error::ClientId);
    }
    Ok(())
}

impl OidcAuthenticator {
    pub fn new(
        options: Options,
        keys: keys::KeySet,
        api_audiences: Vec<String>,
    ) -> Result<Self, Error> {
        validate(&options)?;
        let username_prefix = match options.username_prefix.as_deref() {
            Some("-") => String::new(),
            Some(p) => p.to_string(),
            None if options.username_claim == "email" => String::new(),
            None => format!("{}#", options.issuer_url),
        };
        Ok(Self {
            options,
            username_prefix,
            keys,
            api_audiences,
        })
    }

    pub fn load(options: Options, jwks: &Path, api_audiences: Vec<String>) -> Result<Self, Error> {
        let path = jwks.display().to_string();
        let text = std::fs::read_to_string(jwks).map_err(|source| Error::Read {
            path: path.clone(),
            source,
        })?;
        let keys = serde_json::from_str(&text).map_err(|source| Error::Parse { path, source })?;
        Self::new(options, keys::KeySet::fixed(keys), api_audiences)
    }

    /// Keys from the issuer's discovery document, fetched by a task spawned on the current Tokio
    /// runtime; `ca_file` holds the certificates trusted for the issuer (else the host's roots).
    /// The issuer being down is no error: tokens are refused until its keys arrive.
    pub fn discover(
        options: Options,
        ca_file: Option<&Path>,
        api_audiences: Vec<String>,
    ) -> Result<Self, Error> {
        validate(&options)?;
        let ca = match ca_file {
            Some(file) => Some(std::fs::read(file).map_err(|source| Error::ReadCa {
                path: file.display().to_string(),
                source,
            })?),
            None => None,
        };
        let source =
            discovery::Discovery::new(&options.issuer_url, ca.as_deref()).map_err(|message| {
                Error::Ca {
                    path: ca_file.map(|f| f.display().to_string()).unwrap_or_default(),
                    message,
                }
            })?;
        let keys = keys::KeySet::remote(&options.issuer_url, Arc::new(source));
        Self::new(options, keys, api_audiences)
    }

    /// The verified claims, or upstream's `oidc: verify token: …` error.
    fn verify(&self, token: &str) -> Result<Value, String> {
        let fail = |e: &dyn std::fmt::Display| format!("oidc: verify token: {e}");
        let header = jsonwebtoken::decode_header(token).map_err(|e| fail(&e))?;
        if matches!(
            header.alg,
            Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
        ) {
            return Err(fail(&format!(
                "oidc: id token signed with unsupported algorithm, expected [RS256] got {:?}",
                header.alg
            )));
        }
        let Some(keys) = self.keys.current() else {
            return Err(format!(
                "oidc: authenticator for issuer {:?} is not initialized",
                self.options.issuer_url
            ));
        };
        let candidates: Vec<_> = keys
            .keys
            .iter()
            .filter(|k| header.kid.is_none() || k.common.key_id == header.kid)
            .collect();
        if candidates.is_empty() && header.kid.is_some() {
            // the issuer may have rotated its keys: later requests get the new set
            self.keys.refetch();
        }
        let mut validation = Validation::new(header.alg);
        validation.set_audience(&[&self.options.client_id]);
        validation.set_issuer(&[&self.options.issuer_url]);
        validation.leeway = 0;
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let mut last = "failed to verify signature: no keys".to_string();
        for jwk in candidates {
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            match jsonwebtoken::decode::<Value>(token, &key, &validation) {
                Ok(data) => return Ok(data.claims),
                Err(e) => {
                    use jsonwebtoken::errors::ErrorKind;
                    last = match e.kind() {
                        ErrorKind::InvalidSignature => {
                            "failed to verify signature: failed to verify id token signature"
                                .to_string()
                        }
                        ErrorKind::ExpiredSignature => "oidc: token is expired".to_string(),
                        ErrorKind::InvalidAudience => format!(
                            "oidc: expected audience {:?} not in token's audiences",
                            self.options.client_id
                        ),
                        _ => e.to_string(),
                    };
                    if !matches!(e.kind(), ErrorKind::InvalidSignature) {
                        break;
                    }
                }
            }
        }
        Err(fail(&last))
    }
}

impl OidcAuthenticator {
    /// The API server's audiences, the only ones these audience-agnostic tokens are good for.
    pub fn with_api_audiences(mut self, audiences: Vec<String>) -> Self {
        self.api_audiences = audiences;
        self
    }
}

impl TokenAuthenticator for OidcAuthenticator {
    fn authenticate_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Result<Option<TokenResponse>, String> {
        if unverified_issuer(token).as_deref() != Some(self.options.issuer_url.as_str()) {
            return Ok(None);
        }
        let claims = self.verify(token)?;
        let claim = &self.options.username_claim;
        let name = claims
            .get(claim)
            .ok_or_else(|| format!("oidc: parse username claims {claim:?}: claim not present"))?
            .as_str()
            .ok_or_else(|| format!("oidc: parse username claims {claim:?}: not a string"))?;
        if claim == "email"
            && let Some(verified) = claims.get("email_verified")
            && verified.as_bool() != Some(true)
        {
            return Err("oidc: email not verified".into());
        }
        let mut groups = Vec::new();
        if let Some(gc) = &self.options.groups_claim
            && let Some(value) = claims.get(gc)
        {
            match value {
                Value::String(s) => groups.push(s.clone()),
                Value::Array(list) => {
                    for g in list {
                        let g = g.as_str().ok_or_else(|| {
                            format!("oidc: parse groups claim {gc:?}: not a list of strings")
                        })?;
                        groups.push(g.to_string());
                    }
                }
                _ => return Err(format!("oidc: parse groups claim {gc:?}: not a string")),
            }
        }
        let groups = groups
            .into_iter()
            .map(|g| format!("{}{g}", self.options.groups_prefix))
            .collect();
        let Some(audiences) = implicit_audiences(&self.api_audiences, audiences) else {
            return Ok(None);
        };
        Ok(Some(TokenResponse {
            user: UserInfo {
                name: format!("{}{name}", self.username_prefix),
                groups,
                ..UserInfo::default()
            },
            audiences,
        }))
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use jsonwebtoken::jwk::JwkSet;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;

    use super::*;

    const ISSUER: &str = "https://idp.example";

    /// An ES256 key pair and its JWKS.
    pub(crate) fn key(kid: &str) -> (EncodingKey, JwkSet) {
        let pair = rcgen::KeyPair::generate().unwrap();
        let encoding = EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap();
        let raw = pair.public_key_raw(); // 0x04 || x || y
        let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
        let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
            "alg": "ES256", "x": b64(&raw[1..33]), "y": b64(&raw[33..65])}]});
        (encoding, serde_json::from_value(jwks).unwrap())
    }

    fn sign(key: &EncodingKey, claims: &Value) -> String {
        sign_as("k1", key, claims)
    }

    fn sign_as(kid: &str, key: &EncodingKey, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.into());
        jsonwebtoken::encode(&header, claims, key).unwrap()
    }

    fn claims() -> Value {
        json!({"iss": ISSUER, "aud": "skiff", "sub": "1234", "email": "jane@example.com",
               "email_verified": true, "groups": ["eng", "ops"],
               "exp": jiff::Timestamp::now().as_second() + 600})
    }

    fn authenticator(jwks: JwkSet, options: Options) -> OidcAuthenticator {
        with_keys(keys::KeySet::fixed(jwks), options)
    }

    fn with_keys(keys: keys::KeySet, options: Options) -> OidcAuthenticator {
        OidcAuthenticator::new(
            Options {
                issuer_url: ISSUER.into(),
                client_id: "skiff".into(),
                ..options
            },
            keys,
            vec![],
        )
        .unwrap()
    }

    fn check(options: Options, claims: &Value) -> Result<Option<UserInfo>, String> {
        let (enc, jwks) = key("k1");
        authenticator(jwks, options)
            .authenticate_token(&sign(&enc, claims), &[])
            .map(|r| r.map(|r| r.user))
    }

    #[test]
    fn the_sub_claim_is_prefixed_with_the_issuer_and_groups_with_their_prefix() {
        let user = check(
            Options {
                groups_claim: Some("groups".into()),
                groups_prefix: "oidc:".into(),
                ..Options::default()
            },
            &claims(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(user.name, "https://idp.example#1234");
        assert_eq!(user.groups, vec!["oidc:eng", "oidc:ops"]);
    }

    #[test]
    fn the_email_claim_has_no_prefix_and_must_be_verified() {
        let email = || Options {
            username_claim: "email".into(),
            ..Options::default()
        };
        let user = check(email(), &claims()).unwrap().unwrap();
        assert_eq!(user.name, "jane@example.com");
        let mut unverified = claims();
        unverified["email_verified"] = json!(false);
        assert_eq!(
            check(email(), &unverified).unwrap_err(),
            "oidc: email not verified"
        );
        let dash = Options {
            username_prefix: Some("-".into()),
            ..Options::default()
        };
        assert_eq!(check(dash, &claims()).unwrap().unwrap().name, "1234");
    }

    #[test]
    fn a_token_signed_by_another_key_is_rejected() {
        let (_, jwks) = key("k1");
        let (forger, _) = key("k1");
        let err = authenticator(jwks, Options::default())
            .authenticate_token(&sign(&forger, &claims()), &[])
            .unwrap_err();
        assert!(err.contains("failed to verify signature"), "{err}");
    }

    #[test]
    fn an_expired_token_or_one_for_another_client_is_rejected() {
        let mut expired = claims();
        expired["exp"] = json!(jiff::Timestamp::now().as_second() - 600);
        assert_eq!(
            check(Options::default(), &expired).unwrap_err(),
            "oidc: verify token: oidc: token is expired"
        );
        let mut other = claims();
        other["aud"] = json!("someone-else");
        assert!(
            check(Options::default(), &other)
                .unwrap_err()
                .contains("expected audience \"skiff\"")
        );
    }

    #[test]
    fn a_token_of_another_issuer_is_not_ours() {
        let mut c = claims();
        c["iss"] = json!("https://other.example");
        assert_eq!(check(Options::default(), &c), Ok(None));
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_refused_until_the_issuers_keys_arrive() {
        let source = Arc::new(keys::tests::FakeSource::default());
        let oidc = with_keys(
            keys::KeySet::remote(ISSUER, source.clone()),
            Options::default(),
        );
        let (enc, jwks) = key("k1");
        let token = sign(&enc, &claims());
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert_eq!(
            oidc.authenticate_token(&token, &[]).unwrap_err(),
            "oidc: authenticator for issuer \"https://idp.example\" is not initialized"
        );
        *source.answer.lock() = Some(jwks);
        tokio::time::sleep(keys::RETRY_INTERVAL).await;
        let user = oidc.authenticate_token(&token, &[]).unwrap().unwrap().user;
        assert_eq!(user.name, "https://idp.example#1234");
    }

    #[tokio::test(start_paused = true)]
    async fn a_token_naming_an_unknown_key_is_refused_and_has_the_keys_refetched() {
        let (old, old_jwks) = key("k1");
        let (new, new_jwks) = key("k2");
        let source = Arc::new(keys::tests::FakeSource::default());
        *source.answer.lock() = Some(old_jwks);
        let oidc = with_keys(
            keys::KeySet::remote(ISSUER, source.clone()),
            Options::default(),
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert!(oidc.authenticate_token(&sign(&old, &claims()), &[]).is_ok());
        // the issuer rotates: the first token with the new kid asks for the new keys
        *source.answer.lock() = Some(new_jwks);
        let token = sign_as("k2", &new, &claims());
        let err = oidc.authenticate_token(&token, &[]).unwrap_err();
        assert!(err.contains("failed to verify signature"), "{err}");
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        assert_eq!(source.fetches.load(std::sync::atomic::Ordering::SeqCst), 2);
        let user = oidc.authenticate_token(&token, &[]).unwrap().unwrap().user;
        assert_eq!(user.name, "https://idp.example#1234");
        // the old key is gone with the old set
        assert!(
            oidc.authenticate_token(&sign(&old, &claims()), &[])
                .is_err()
        );
    }
}
