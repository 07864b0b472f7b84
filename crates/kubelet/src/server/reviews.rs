//! The questions the kubelet server asks the API server about its clients, behind the
//! [`Reviews`] trait: who a bearer token is (a `TokenReview`, upstream's
//! `--authentication-token-webhook`) and whether a user may do something to this node (a
//! `SubjectAccessReview`, upstream's `--authorization-mode=Webhook`). The kubelet asks with its
//! own credentials: `system:node:<name>` may create both (upstream's `system:node` rules).

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API server could not be asked, or refused to answer: not cached, the request fails.
    #[error("creating a {kind}: {message}")]
    Create { kind: &'static str, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An authenticated client of the kubelet server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

/// One question for the authorizer: may `user` do `verb` to `nodes/<subresource>` named
/// `node` (upstream's kubelet request attributes: API version `v1`, no namespace).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AccessReview {
    pub user: User,
    pub verb: &'static str,
    pub node: String,
    pub subresource: &'static str,
}

/// The API server's review APIs.
#[async_trait]
pub trait Reviews: Send + Sync {
    /// Who `token` belongs to; `None` when the API server does not authenticate it.
    async fn token(&self, token: &str) -> Result<Option<User>>;
    /// Whether the API server allows `review`.
    async fn access(&self, review: &AccessReview) -> Result<bool>;
}

/// [`Reviews`] through the API server, as the kubelet's own user.
pub struct ApiReviews {
    client: kube::Client,
}

impl ApiReviews {
    pub fn new(client: kube::Client) -> Self {
        ApiReviews { client }
    }
}

#[async_trait]
impl Reviews for ApiReviews {
    async fn token(&self, token: &str) -> Result<Option<User>> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| Error::Create {
                kind: "TokenReview",
                message: e.to_string(),
            })?;
        let Some(status) = answer.status.filter(|s| s.authenticated == Some(true)) else {
            return Ok(None);
        };
        let info = status.user.unwrap_or_default();
        Ok(Some(User {
            name: info.username.unwrap_or_default(),
            uid: info.uid.unwrap_or_default(),
            groups: info.groups.unwrap_or_default(),
            extra: info.extra.unwrap_or_default(),
        }))
    }

    async fn access(&self, review: &AccessReview) -> Result<bool> {
        let user = &review.user;
        let question = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.clone()).filter(|e| !e.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(review.verb.to_string()),
                    group: Some(String::new()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(review.subresource.to_string()),
                    name: Some(review.node.clone()),
                    ..ResourceAttributes::default()
                }),
                non_resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &question)
            .await
            .map_err(|e| Error::Create {
                kind: "SubjectAccessReview",
                message: e.to_string(),
            })?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}
