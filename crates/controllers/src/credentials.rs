//! `--use-service-account-credentials`: each controller's own API identity, as upstream's
//! dynamic client builder gives it. The controller manager (under its own identity) makes sure
//! the ServiceAccount `kube-system/<account>` exists and asks its TokenRequest for an hour's
//! token; the controller's client sends that token instead of the controller manager's
//! certificate, and a background task asks for the next one once 80% of its lifetime has
//! passed. Controllers sharing an account (upstream's `node-controller`) share one client.

use skiff_apimachinery::version::user_agent;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use http::HeaderValue;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, ObjectMeta, PostParams};

/// Where the controllers' ServiceAccounts live (upstream's `metav1.NamespaceSystem`).
pub const NAMESPACE: &str = "kube-system";
/// How long each token is asked for (upstream's `defaultExpirationSeconds`).
pub const EXPIRATION_SECONDS: i64 = 3600;
/// The share of a token's lifetime left when the next one is asked for (upstream's
/// `defaultLeewayPercent`).
const LEEWAY_PERCENT: u32 = 20;
/// The shortest lifetime trusted: a shorter one is taken for clock skew (upstream's pin).
const MIN_LIFETIME: Duration = Duration::from_secs(600);
/// The first retry of a failed token request, doubling up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(30);
/// Tries for a controller's first token before the controller manager gives up (upstream's
/// backoff of 4 steps, after which `ClientOrDie` exits); renewals retry without end.
const FIRST_TOKEN_ATTEMPTS: usize = 4;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("getting the service account {NAMESPACE}/{account}: {source}")]
    GetAccount {
        account: String,
        #[source]
        source: kube::Error,
    },
    #[error("creating the service account {NAMESPACE}/{account}: {source}")]
    CreateAccount {
        account: String,
        #[source]
        source: kube::Error,
    },
    #[error("requesting a token for {NAMESPACE}/{account}: {source}")]
    RequestToken {
        account: String,
        #[source]
        source: kube::Error,
    },
    #[error("the token request for {NAMESPACE}/{account} returned no token")]
    NoToken { account: String },
    #[error("the token of {NAMESPACE}/{account} is not a valid header value")]
    BadToken { account: String },
    #[error("building the client of {NAMESPACE}/{account}: {source}")]
    Client {
        account: String,
        #[source]
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A token TokenRequest issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    pub token: String,
    /// How long it is valid from now (its `expirationTimestamp` less the current time).
    pub lifetime: Duration,
}

/// The API calls behind the client builder (a recording fake in the tests).
#[async_trait]
pub trait TokenIssuer: Send + Sync + 'static {
    /// Makes sure `kube-system/<account>` exists (created if missing).
    async fn ensure_account(&self, account: &str) -> Result<()>;
    /// Asks the account's TokenRequest for a token of [`EXPIRATION_SECONDS`].
    async fn request_token(&self, account: &str) -> Result<IssuedToken>;
}

/// [`TokenIssuer`] through the API, as the controller manager's own identity.
pub struct KubeTokenIssuer(pub kube::Client);

#[async_trait]
impl TokenIssuer for KubeTokenIssuer {
    async fn ensure_account(&self, account: &str) -> Result<()> {
        let api: Api<ServiceAccount> = Api::namespaced(self.0.clone(), NAMESPACE);
        let found = api
            .get_opt(account)
            .await
            .map_err(|source| Error::GetAccount {
                account: account.into(),
                source,
            })?;
        if found.is_some() {
            return Ok(());
        }
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(account.into()),
                namespace: Some(NAMESPACE.into()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        match api.create(&PostParams::default(), &sa).await {
            Ok(_) => Ok(()),
            // another replica (or a restart) was first
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(source) => Err(Error::CreateAccount {
                account: account.into(),
                source,
            }),
        }
    }

    async fn request_token(&self, account: &str) -> Result<IssuedToken> {
        let api: Api<ServiceAccount> = Api::namespaced(self.0.clone(), NAMESPACE);
        let request = TokenRequest {
            spec: TokenRequestSpec {
                expiration_seconds: Some(EXPIRATION_SECONDS),
                ..TokenRequestSpec::default()
            },
            ..TokenRequest::default()
        };
        let issued = api
            .create_token_request(account, &PostParams::default(), &request)
            .await
            .map_err(|source| Error::RequestToken {
                account: account.into(),
                source,
            })?;
        let status = issued.status.ok_or_else(|| Error::NoToken {
            account: account.into(),
        })?;
        let left = status
            .expiration_timestamp
            .0
            .duration_since(jiff::Timestamp::now());
        Ok(IssuedToken {
            token: status.token,
            lifetime: Duration::try_from(left).unwrap_or_default(),
        })
    }
}

/// When to ask for the next token: once [`LEEWAY_PERCENT`] of the lifetime is left, a
/// lifetime under [`MIN_LIFETIME`] counting as that minimum (upstream's clock-skew pin).
pub fn renew_after(lifetime: Duration) -> Duration {
    let lifetime = lifetime.max(MIN_LIFETIME);
    lifetime - lifetime * LEEWAY_PERCENT / 100
}

/// The current `Authorization` header of one account, swapped in place by its renewal task.
type Slot = Arc<RwLock<HeaderValue>>;

/// Builds each controller's client: one per account, its token renewed in the background.
pub struct ClientBuilder {
    /// The controller manager's client configuration (its server and CA are kept, its
    /// credentials dropped).
    base: kube::Config,
    issuer: Arc<dyn TokenIssuer>,
    /// Clients already built, by account. Held across the first token request so that two
    /// controllers of one account do not both start a renewal task.
    clients: tokio::sync::Mutex<HashMap<String, kube::Client>>,
}

impl ClientBuilder {
    pub fn new(base: kube::Config, issuer: Arc<dyn TokenIssuer>) -> ClientBuilder {
        ClientBuilder {
            base,
            issuer,
            clients: tokio::sync::Mutex::new(HashMap::new()),
        }
    }

    /// The client of `kube-system/<account>`: made on first use, once its account exists and
    /// its first token is issued (an error after [`FIRST_TOKEN_ATTEMPTS`] failed tries).
    pub async fn client(&self, account: &str) -> Result<kube::Client> {
        let mut clients = self.clients.lock().await;
        if let Some(client) = clients.get(account) {
            return Ok(client.clone());
        }
        let first = issue(self.issuer.as_ref(), account, FIRST_TOKEN_ATTEMPTS).await?;
        let slot: Slot = Arc::new(RwLock::new(bearer(account, &first.token)?));
        let client = self.build(account, slot.clone())?;
        tokio::spawn(keep_fresh(
            self.issuer.clone(),
            account.to_string(),
            slot,
            first.lifetime,
        ));
        clients.insert(account.to_string(), client.clone());
        Ok(client)
    }

    fn build(&self, account: &str, slot: Slot) -> Result<kube::Client> {
        let mut config = self.base.clone();
        // as upstream, the certificate and any token of the base configuration are dropped:
        // the API server would otherwise authenticate the certificate first
        config.auth_info = kube::config::AuthInfo::default();
        // upstream's `AddUserAgent`: the program's agent, then the controller's name
        let agent = format!("{}/{account}", user_agent(crate::PROGRAM));
        let builder = skiff_runtime::http2::client_builder(config, &agent).map_err(|source| {
            Error::Client {
                account: account.into(),
                source,
            }
        })?;
        let authorize =
            tower::util::MapRequestLayer::new(move |mut req: http::Request<kube::client::Body>| {
                let header = slot.read().unwrap_or_else(|e| e.into_inner()).clone();
                req.headers_mut()
                    .insert(http::header::AUTHORIZATION, header);
                req
            });
        Ok(builder
            .with_layer(&authorize)
            .with_layer(&crate::in_flight_limit())
            .build())
    }
}

fn bearer(account: &str, token: &str) -> Result<HeaderValue> {
    let mut value =
        HeaderValue::try_from(format!("Bearer {token}")).map_err(|_| Error::BadToken {
            account: account.into(),
        })?;
    value.set_sensitive(true);
    Ok(value)
}

/// Ensures the account and gets a token, retrying with doubling backoff; the last error after
/// `attempts` failed tries.
async fn issue(issuer: &dyn TokenIssuer, account: &str, attempts: usize) -> Result<IssuedToken> {
    let mut wait = FIRST_RETRY;
    let mut tried = 0;
    loop {
        let attempt = async {
            issuer.ensure_account(account).await?;
            issuer.request_token(account).await
        };
        match attempt.await {
            Ok(issued) => return Ok(issued),
            Err(error) => {
                tried += 1;
                if tried >= attempts {
                    return Err(error);
                }
                tracing::warn!(%error, retry_in = ?wait, "controller credentials");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_RETRY);
            }
        }
    }
}

/// Renews the account's token into `slot` before each one expires, forever.
async fn keep_fresh(issuer: Arc<dyn TokenIssuer>, account: String, slot: Slot, lifetime: Duration) {
    let mut lifetime = lifetime;
    loop {
        tokio::time::sleep(renew_after(lifetime)).await;
        let Ok(next) = issue(issuer.as_ref(), &account, usize::MAX).await else {
            continue;
        };
        match bearer(&account, &next.token) {
            Ok(header) => *slot.write().unwrap_or_else(|e| e.into_inner()) = header,
            Err(error) => tracing::warn!(%error, "controller credentials"),
        }
        lifetime = next.lifetime;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    /// Issues `token-1`, `token-2`, … of one hour each, failing the first `failures` requests.
    #[derive(Default)]
    struct FakeIssuer {
        calls: Mutex<Vec<String>>,
        failures: Mutex<usize>,
    }

    #[async_trait]
    impl TokenIssuer for FakeIssuer {
        async fn ensure_account(&self, account: &str) -> Result<()> {
            self.calls.lock().push(format!("ensure {account}"));
            Ok(())
        }
        async fn request_token(&self, account: &str) -> Result<IssuedToken> {
            let mut calls = self.calls.lock();
            calls.push(format!("token {account}"));
            let mut failures = self.failures.lock();
            if *failures > 0 {
                *failures -= 1;
                return Err(Error::NoToken {
                    account: account.into(),
                });
            }
            let n = calls.iter().filter(|c| c.starts_with("token")).count();
            Ok(IssuedToken {
                token: format!("token-{n}"),
                lifetime: Duration::from_secs(3600),
            })
        }
    }

    fn current(slot: &Slot) -> String {
        slot.read().unwrap().to_str().unwrap().to_string()
    }

    #[test]
    fn the_next_token_is_asked_for_with_a_fifth_of_the_lifetime_left() {
        assert_eq!(
            renew_after(Duration::from_secs(3600)),
            Duration::from_secs(2880)
        );
        // shorter lifetimes are taken for clock skew and pinned to ten minutes
        assert_eq!(
            renew_after(Duration::from_secs(5)),
            Duration::from_secs(480)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_request_is_retried_until_a_token_is_issued() {
        let issuer = FakeIssuer::default();
        *issuer.failures.lock() = 2;
        let issued = issue(&issuer, "job-controller", 4).await.unwrap();
        assert_eq!(issued.token, "token-3");
        assert_eq!(
            *issuer.calls.lock(),
            [
                "ensure job-controller",
                "token job-controller",
                "ensure job-controller",
                "token job-controller",
                "ensure job-controller",
                "token job-controller",
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_token_is_given_up_on_after_four_failed_tries() {
        let issuer = Arc::new(FakeIssuer::default());
        *issuer.failures.lock() = 4;
        let base = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let builder = ClientBuilder::new(base, issuer.clone());
        let Err(error) = builder.client("job-controller").await else {
            panic!("a client without a token")
        };
        assert_eq!(
            error.to_string(),
            "the token request for kube-system/job-controller returned no token"
        );
        assert_eq!(issuer.calls.lock().len(), 8);
    }

    #[tokio::test(start_paused = true)]
    async fn the_token_is_replaced_before_it_expires() {
        let issuer = Arc::new(FakeIssuer::default());
        let slot: Slot = Arc::new(RwLock::new(bearer("a", "token-0").unwrap()));
        tokio::spawn(keep_fresh(
            issuer.clone(),
            "a".into(),
            slot.clone(),
            Duration::from_secs(3600),
        ));
        tokio::time::sleep(Duration::from_secs(2879)).await;
        assert_eq!(current(&slot), "Bearer token-0");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(current(&slot), "Bearer token-1");
        tokio::time::sleep(Duration::from_secs(2880)).await;
        assert_eq!(current(&slot), "Bearer token-2");
    }

    #[tokio::test]
    async fn controllers_of_one_account_share_its_client() {
        let issuer = Arc::new(FakeIssuer::default());
        let base = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let builder = ClientBuilder::new(base, issuer.clone());
        builder.client("node-controller").await.unwrap();
        builder.client("node-controller").await.unwrap();
        builder.client("job-controller").await.unwrap();
        assert_eq!(
            *issuer.calls.lock(),
            [
                "ensure node-controller",
                "token node-controller",
                "ensure job-controller",
                "token job-controller",
            ]
        );
    }
}
