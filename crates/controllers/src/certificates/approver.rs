//! `csrapproving` (upstream's `sarapprove.go`): approves kubelet client certificate requests
//! (signer `kubernetes.io/kube-apiserver-client-kubelet`, `system:node:<name>` in
//! `system:nodes`) when a SubjectAccessReview says their requester may `create`
//! `certificatesigningrequests/selfnodeclient` (a node renewing its own certificate) or
//! `certificatesigningrequests/nodeclient` (a bootstrap token asking for one). Skiff adds one
//! policy of its own: a `kubernetes.io/kube-apiserver-client` request for `system:kube-proxy`
//! or `system:skiff-controller` (no organization, no names, client usages) made by a bootstrap
//! token or a node is approved too, so that a joining node's proxy and its node controllers
//! (network policy, ingress) get their identities (k3s hands those certificates out from its
//! supervisor; its node controllers run as `system:k3s-controller`). Decisions go through the
//! `/approval` subresource as an `Approved`
//! condition with reason `AutoApproved`; requests already decided or issued are left alone.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PostParams;
use kube::{Api, ResourceExt};
use skiff_runtime::controller::{Action, Controller};

use super::{CLIENT_SIGNER, KUBELET_CLIENT_SIGNER, NODES_GROUP};
use crate::{Context, triggers};

/// The user a joining node's proxy runs as (bound to `system:node-proxier`).
pub const KUBE_PROXY_USER: &str = "system:kube-proxy";
/// The user a node's own controllers run as: `skiff network-policy` and `skiff ingress`
/// (bound to the ClusterRoles `system:skiff-network-policy` and `system:skiff-ingress`; k3s's
/// `system:k3s-controller`).
pub const SKIFF_CONTROLLER_USER: &str = "system:skiff-controller";
const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";

const SELF_NODE_CLIENT_MESSAGE: &str =
    "Auto approving self kubelet client certificate after SubjectAccessReview.";
const NODE_CLIENT_MESSAGE: &str =
    "Auto approving kubelet client certificate after SubjectAccessReview.";
const KUBE_PROXY_MESSAGE: &str =
    "Auto approving kube-proxy client certificate requested by a joining node.";
const SKIFF_CONTROLLER_MESSAGE: &str =
    "Auto approving skiff-controller client certificate requested by a joining node.";

/// What to do with one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Not ours to approve (another signer, another subject, already decided or issued).
    Ignore,
    /// Approve if a SubjectAccessReview allows the requester `create` on
    /// `certificatesigningrequests/<subresources[i]>`, trying them in order; the message of
    /// the first allowed one goes into the condition.
    Review(Vec<(&'static str, &'static str)>),
    /// Approve with this message (Skiff's policy for a joining node's proxy and network policy
    /// controller: no review needed).
    Approve(&'static str),
}

/// The decision for `csr`, from its spec and its parsed request.
pub fn decide(csr: &CertificateSigningRequest) -> Decision {
    if super::issued(csr)
        || super::has_condition(csr, "Approved")
        || super::has_condition(csr, "Denied")
    {
        return Decision::Ignore;
    }
    let Ok(request) = super::parse(&csr.spec.request.0) else {
        return Decision::Ignore;
    };
    let usages = super::usages(csr);
    let username = csr.spec.username.as_deref().unwrap_or("");
    match csr.spec.signer_name.as_str() {
        KUBELET_CLIENT_SIGNER if super::validate_kubelet_client(&request, &usages).is_ok() => {
            let mut reviews = Vec::new();
            if username == request.common_name {
                reviews.push(("selfnodeclient", SELF_NODE_CLIENT_MESSAGE));
            }
            reviews.push(("nodeclient", NODE_CLIENT_MESSAGE));
            Decision::Review(reviews)
        }
        CLIENT_SIGNER => {
            let groups = csr.spec.groups.as_deref().unwrap_or_default();
            let joining = groups
                .iter()
                .any(|g| g == BOOTSTRAPPERS_GROUP || g == NODES_GROUP);
            let message = match request.common_name.as_str() {
                KUBE_PROXY_USER => KUBE_PROXY_MESSAGE,
                SKIFF_CONTROLLER_USER => SKIFF_CONTROLLER_MESSAGE,
                _ => return Decision::Ignore,
            };
            let plain_client = request.organizations.is_empty()
                && request.dns_names.is_empty()
                && request.ip_addresses + request.emails + request.uris == 0
                && super::validate_client(&usages).is_ok();
            if joining && plain_client {
                Decision::Approve(message)
            } else {
                Decision::Ignore
            }
        }
        _ => Decision::Ignore,
    }
}

/// The request with an `Approved` condition added (reason `AutoApproved`).
pub fn approved(
    csr: &CertificateSigningRequest,
    message: &str,
    now: Time,
) -> CertificateSigningRequest {
    let mut csr = csr.clone();
    let status = csr.status.get_or_insert_default();
    status
        .conditions
        .get_or_insert_default()
        .push(CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some("AutoApproved".into()),
            message: Some(message.into()),
            last_update_time: Some(now.clone()),
            last_transition_time: Some(now),
        });
    csr
}

/// The API calls of the approver.
#[async_trait]
pub trait ApproverApi: Send + Sync {
    /// Whether the requester of `csr` may `create` `certificatesigningrequests/<subresource>`.
    async fn allowed(
        &self,
        csr: &CertificateSigningRequest,
        subresource: &str,
    ) -> kube::Result<bool>;
    /// Writes the request through `/approval`.
    async fn approve(&self, csr: &CertificateSigningRequest) -> kube::Result<()>;
}

/// Decides on `csr` and approves it when the decision (and its review) says so.
pub async fn reconcile(
    csr: &CertificateSigningRequest,
    api: &dyn ApproverApi,
    now: Time,
) -> kube::Result<()> {
    let message = match decide(csr) {
        Decision::Ignore => return Ok(()),
        Decision::Approve(message) => message,
        Decision::Review(reviews) => {
            let mut allowed = None;
            for (subresource, message) in reviews {
                if api.allowed(csr, subresource).await? {
                    allowed = Some(message);
                    break;
                }
            }
            match allowed {
                Some(message) => message,
                None => {
                    tracing::debug!(csr = %csr.name_any(), "recognized as a node client certificate but the subject access review was not approved");
                    return Ok(());
                }
            }
        }
    };
    api.approve(&approved(csr, message, now)).await
}

struct KubeApprover {
    client: kube::Client,
}

#[async_trait]
impl ApproverApi for KubeApprover {
    async fn allowed(
        &self,
        csr: &CertificateSigningRequest,
        subresource: &str,
    ) -> kube::Result<bool> {
        let spec = &csr.spec;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: spec.username.clone(),
                uid: spec.uid.clone(),
                groups: spec.groups.clone(),
                extra: spec.extra.clone(),
                resource_attributes: Some(ResourceAttributes {
                    group: Some("certificates.k8s.io".into()),
                    resource: Some("certificatesigningrequests".into()),
                    subresource: Some(subresource.into()),
                    verb: Some("create".into()),
                    version: Some("*".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    async fn approve(&self, csr: &CertificateSigningRequest) -> kube::Result<()> {
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        match api
            .replace_subresource("approval", &csr.name_any(), &PostParams::default(), csr)
            .await
        {
            // changed or gone meanwhile: the next event decides again
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// Runs the approver (upstream's 5 workers).
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let api = Arc::new(KubeApprover {
        client: ctx.client.clone(),
    });
    let requests = ctx.informers.get::<CertificateSigningRequest>();
    let controller = Controller::new("csrapproving");
    triggers::run_each(controller, &requests, move |csr| {
        let api = api.clone();
        async move {
            reconcile(&csr, api.as_ref(), Time(jiff::Timestamp::now())).await?;
            Ok::<_, kube::Error>(Action::AwaitChange)
        }
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use super::super::testing::{csr, request_pem};
    use super::*;

    const CLIENT_USAGES: &[&str] = &["digital signature", "key encipherment", "client auth"];
    const BOOTSTRAP: (&str, &[&str]) = (
        "system:bootstrap:abcdef",
        &[
            "system:bootstrappers",
            "system:bootstrappers:skiff:default-node-token",
        ],
    );

    /// Answers reviews from a list of allowed subresources and records approvals.
    #[derive(Default)]
    struct Fake {
        allows: Vec<&'static str>,
        asked: Mutex<Vec<String>>,
        approved: Mutex<Vec<CertificateSigningRequest>>,
    }

    #[async_trait]
    impl ApproverApi for Fake {
        async fn allowed(
            &self,
            csr: &CertificateSigningRequest,
            subresource: &str,
        ) -> kube::Result<bool> {
            self.asked.lock().push(format!(
                "{} {subresource}",
                csr.spec.username.as_deref().unwrap_or("")
            ));
            Ok(self.allows.contains(&subresource))
        }
        async fn approve(&self, csr: &CertificateSigningRequest) -> kube::Result<()> {
            self.approved.lock().push(csr.clone());
            Ok(())
        }
    }

    fn node_request(user: (&str, &[&str])) -> CertificateSigningRequest {
        let pem = request_pem("system:node:n1", &["system:nodes"], &[]);
        csr(
            "node-csr-1",
            &pem,
            KUBELET_CLIENT_SIGNER,
            CLIENT_USAGES,
            user,
        )
    }

    fn now() -> Time {
        Time("2026-12-01T00:00:00Z".parse().unwrap())
    }

    #[tokio::test]
    async fn a_bootstrap_token_allowed_nodeclient_gets_its_node_certificate_approved() {
        let fake = Fake {
            allows: vec!["nodeclient"],
            ..Fake::default()
        };
        reconcile(&node_request(BOOTSTRAP), &fake, now())
            .await
            .unwrap();
        // not the node itself: only the nodeclient review is asked
        assert_eq!(*fake.asked.lock(), ["system:bootstrap:abcdef nodeclient"]);
        let approved = fake.approved.lock();
        let condition = &approved[0]
            .status
            .as_ref()
            .unwrap()
            .conditions
            .as_ref()
            .unwrap()[0];
        assert_eq!(condition.type_, "Approved");
        assert_eq!(condition.status, "True");
        assert_eq!(condition.reason.as_deref(), Some("AutoApproved"));
        assert_eq!(condition.message.as_deref(), Some(NODE_CLIENT_MESSAGE));
    }

    #[tokio::test]
    async fn a_node_renewing_its_own_certificate_is_reviewed_for_selfnodeclient_first() {
        let fake = Fake {
            allows: vec!["selfnodeclient"],
            ..Fake::default()
        };
        let renewal = node_request(("system:node:n1", &["system:nodes"]));
        reconcile(&renewal, &fake, now()).await.unwrap();
        assert_eq!(*fake.asked.lock(), ["system:node:n1 selfnodeclient"]);
        let approved = fake.approved.lock();
        let condition = &approved[0]
            .status
            .as_ref()
            .unwrap()
            .conditions
            .as_ref()
            .unwrap()[0];
        assert_eq!(condition.message.as_deref(), Some(SELF_NODE_CLIENT_MESSAGE));
    }

    #[tokio::test]
    async fn a_requester_the_review_refuses_is_left_pending() {
        let fake = Fake::default();
        reconcile(
            &node_request(("mallory", &["system:authenticated"])),
            &fake,
            now(),
        )
        .await
        .unwrap();
        assert_eq!(fake.asked.lock().len(), 1);
        assert!(fake.approved.lock().is_empty());
    }

    #[test]
    fn requests_for_other_subjects_signers_or_already_decided_are_ignored() {
        let admin = request_pem("system:node:n1", &["system:masters"], &[]);
        assert_eq!(
            decide(&csr(
                "a",
                &admin,
                KUBELET_CLIENT_SIGNER,
                CLIENT_USAGES,
                BOOTSTRAP
            )),
            Decision::Ignore
        );
        let node = request_pem("system:node:n1", &["system:nodes"], &[]);
        assert_eq!(
            decide(&csr(
                "b",
                &node,
                "example.com/other",
                CLIENT_USAGES,
                BOOTSTRAP
            )),
            Decision::Ignore
        );
        let decided = approved(&node_request(BOOTSTRAP), "by hand", now());
        assert_eq!(decide(&decided), Decision::Ignore);
    }

    #[test]
    fn a_kube_proxy_certificate_is_approved_for_joining_nodes_only() {
        let proxy = request_pem(KUBE_PROXY_USER, &[], &[]);
        assert_eq!(
            decide(&csr("p", &proxy, CLIENT_SIGNER, CLIENT_USAGES, BOOTSTRAP)),
            Decision::Approve(KUBE_PROXY_MESSAGE)
        );
        assert_eq!(
            decide(&csr(
                "p",
                &proxy,
                CLIENT_SIGNER,
                CLIENT_USAGES,
                ("system:node:n1", &[NODES_GROUP])
            )),
            Decision::Approve(KUBE_PROXY_MESSAGE)
        );
        assert_eq!(
            decide(&csr(
                "p",
                &proxy,
                CLIENT_SIGNER,
                CLIENT_USAGES,
                ("alice", &["system:authenticated"])
            )),
            Decision::Ignore
        );
        let masters = request_pem(KUBE_PROXY_USER, &["system:masters"], &[]);
        assert_eq!(
            decide(&csr("p", &masters, CLIENT_SIGNER, CLIENT_USAGES, BOOTSTRAP)),
            Decision::Ignore
        );
        let admin = request_pem("admin", &[], &[]);
        assert_eq!(
            decide(&csr("p", &admin, CLIENT_SIGNER, CLIENT_USAGES, BOOTSTRAP)),
            Decision::Ignore
        );
    }

    #[test]
    fn a_node_controller_certificate_is_approved_for_joining_nodes_only() {
        let netpol = request_pem(SKIFF_CONTROLLER_USER, &[], &[]);
        assert_eq!(
            decide(&csr("p", &netpol, CLIENT_SIGNER, CLIENT_USAGES, BOOTSTRAP)),
            Decision::Approve(SKIFF_CONTROLLER_MESSAGE)
        );
        assert_eq!(
            decide(&csr(
                "p",
                &netpol,
                CLIENT_SIGNER,
                CLIENT_USAGES,
                ("alice", &["system:authenticated"])
            )),
            Decision::Ignore
        );
        let grouped = request_pem(SKIFF_CONTROLLER_USER, &["system:nodes"], &[]);
        assert_eq!(
            decide(&csr("p", &grouped, CLIENT_SIGNER, CLIENT_USAGES, BOOTSTRAP)),
            Decision::Ignore
        );
    }
}
