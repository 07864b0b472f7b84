//! Upstream's `ValidatingAdmissionWebhook`: the matching webhooks of every
//! ValidatingWebhookConfiguration, called in parallel last in the validating phase (before
//! ResourceQuota charges); any refusal, or a failure of a webhook that fails closed, refuses the
//! request (the first in configuration order is reported).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{Configurations, NamespaceLabels, invoke, matches};
use crate::admission::{Attributes, Plugin};
use crate::conversion::Converter;
use crate::error::Result;
use crate::webhook_client::Caller;

pub struct ValidatingWebhook<C, K, N> {
    pub configurations: C,
    pub caller: K,
    pub namespaces: N,
    /// Reviews carry objects in the request's version.
    pub conversion: Arc<Converter>,
}

#[async_trait]
impl<C: Configurations, K: Caller, N: NamespaceLabels> Plugin for ValidatingWebhook<C, K, N> {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionWebhook"
    }

    async fn validate(&self, attrs: &Attributes<'_>, object: Option<&Value>) -> Result<()> {
        let hooks = self.configurations.webhooks();
        let mut called = Vec::new();
        for hook in hooks.iter() {
            if matches(hook, attrs, object, &self.namespaces).await? {
                called.push(hook);
            }
        }
        let results = futures::future::join_all(
            called
                .iter()
                .map(|hook| invoke(&self.caller, &self.conversion, hook, attrs, object, false)),
        )
        .await;
        for r in results {
            r?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::webhook::tests::{Fixed, NoNamespaces, attrs, config};
    use crate::authn::UserInfo;
    use crate::webhook_client::ClientConfig;
    use serde_json::json;
    use std::time::Duration;

    /// Refuses pods labelled `deny`, allows everything else, with a warning, after 5 ms.
    struct Fake;

    #[async_trait]
    impl Caller for Fake {
        async fn call(
            &self,
            _client: &ClientConfig,
            _timeout: Duration,
            review: &Value,
        ) -> std::result::Result<Value, String> {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let req = &review["request"];
            let deny = req["object"]["metadata"]["labels"]["deny"] == "yes";
            Ok(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": req["uid"], "allowed": !deny, "warnings": ["looked at it"],
                    "status": {"message": format!("{} may not be created", req["name"].as_str().unwrap())}}}),
            )
        }
    }

    #[tokio::test]
    async fn a_refusal_carries_the_webhooks_message_and_warnings_reach_the_client() {
        let hooks = config(
            json!([{"name": "deny.x.io", "clientConfig": {"url": "https://h/"},
            "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]}]),
        );
        let plugin = ValidatingWebhook {
            configurations: Fixed(Arc::new(hooks)),
            caller: Fake,
            namespaces: NoNamespaces,
            conversion: crate::conversion::tests::converter(),
        };
        let user = UserInfo::anonymous();
        let a = attrs(&user, "pods", "");
        let (allowed, waited) = crate::timing::timed(
            std::time::Instant::now(),
            plugin.validate(&a, Some(&json!({"metadata": {}}))),
        )
        .await;
        allowed.unwrap();
        assert!(
            waited.excluded() >= Duration::from_millis(5),
            "the call counts as waiting on others, outside the SLI latency: {waited:?}"
        );
        let denied = json!({"metadata": {"labels": {"deny": "yes"}}});
        let err = plugin.validate(&a, Some(&denied)).await.unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                403,
                "admission webhook \"deny.x.io\" denied the request: web may not be created"
            )
        );
        let mut resp = crate::handlers::json(200, &json!({}));
        a.notes.warnings.apply(&mut resp);
        assert_eq!(resp.headers()["warning"], "299 - \"looked at it\"");
    }
}
