//! Upstream's `MutatingAdmissionWebhook`: the matching webhooks of every
//! MutatingWebhookConfiguration, called one after another in the mutating phase (after the
//! built-in mutating plugins), each answer's JSONPatch applied to the object the next one sees.
//! A webhook with `reinvocationPolicy: IfNeeded` is called once more when a later webhook changed
//! the object after it ran.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use super::{Configurations, NamespaceLabels, Webhook, invoke, matches};
use crate::admission::{Attributes, Plugin};
use crate::conversion::Converter;
use crate::error::{ApiError, Result};
use crate::webhook_client::Caller;

pub struct MutatingWebhook<C, K, N> {
    pub configurations: C,
    pub caller: K,
    pub namespaces: N,
    /// Reviews carry objects in the request's version; patches apply to that form.
    pub conversion: Arc<Converter>,
}

impl<C: Configurations, K: Caller, N: NamespaceLabels> MutatingWebhook<C, K, N> {
    /// Calls `hook` and applies its patch; `Ok(true)` when the object changed.
    async fn run(
        &self,
        hook: &Webhook,
        attrs: &Attributes<'_>,
        object: &mut Value,
    ) -> Result<bool> {
        let Some(answer) = invoke(
            &self.caller,
            &self.conversion,
            hook,
            attrs,
            Some(object),
            true,
        )
        .await?
        else {
            return Ok(false);
        };
        let Some(patch) = answer.patch else {
            return Ok(false);
        };
        let patch: json_patch::Patch = serde_json::from_value(patch).map_err(|e| {
            ApiError::internal(format!(
                "decoding the patch of webhook {:?}: {e}",
                hook.name
            ))
        })?;
        let rt = attrs.resource;
        let mut external = self.conversion.to_external(rt, object.clone()).await?;
        json_patch::patch(&mut external, &patch).map_err(|e| {
            ApiError::internal(format!(
                "applying the patch of webhook {:?}: {e}",
                hook.name
            ))
        })?;
        let patched = self.conversion.to_internal(rt, external).await?;
        if patched == *object {
            return Ok(false);
        }
        *object = patched;
        attrs.notes.mark_patched();
        Ok(true)
    }
}

#[async_trait]
impl<C: Configurations, K: Caller, N: NamespaceLabels> Plugin for MutatingWebhook<C, K, N> {
    fn name(&self) -> &'static str {
        "MutatingAdmissionWebhook"
    }

    async fn mutate(&self, attrs: &Attributes<'_>, object: Option<&mut Value>) -> Result<()> {
        let Some(object) = object else { return Ok(()) };
        let hooks = self.configurations.webhooks();
        let mut called = Vec::new();
        for hook in hooks.iter() {
            if matches(hook, attrs, Some(object), &self.namespaces).await? {
                called.push(hook);
            }
        }
        // `changed_after[i]`: a webhook after the i-th changed the object.
        let mut last_change = None;
        for (i, hook) in called.iter().enumerate() {
            if self.run(hook, attrs, object).await? {
                last_change = Some(i);
            }
        }
        let Some(last) = last_change else {
            return Ok(());
        };
        for hook in called[..last].iter().filter(|h| h.reinvoke) {
            self.run(hook, attrs, object).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::webhook::tests::{Fixed, NoNamespaces, attrs, config};
    use crate::authn::UserInfo;
    use crate::webhook_client::{ClientConfig, Endpoint};
    use base64::Engine;
    use serde_json::json;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Answers by the webhook's host (`https://first.x.io/`): a patch adding the label
    /// `first=yes`, or a failure for hosts starting `down`; records the hosts called.
    #[derive(Default)]
    struct Fake {
        calls: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Caller for Fake {
        async fn call(
            &self,
            client: &ClientConfig,
            _timeout: Duration,
            review: &Value,
        ) -> std::result::Result<Value, String> {
            let Endpoint::Url(url) = &client.endpoint else {
                return Err("no url".into());
            };
            let host = url.trim_start_matches("https://").trim_end_matches('/');
            self.calls.lock().unwrap().push(host.to_string());
            let uid = review["request"]["uid"].clone();
            if host.starts_with("down") {
                return Err("connection refused".into());
            }
            let label = host.split('.').next().unwrap();
            let patch =
                json!([{"op": "add", "path": format!("/metadata/labels/{label}"), "value": "yes"}]);
            Ok(
                json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": true, "patchType": "JSONPatch",
                    "patch": base64::engine::general_purpose::STANDARD.encode(patch.to_string())}}),
            )
        }
    }

    fn rules() -> Value {
        json!([{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}])
    }

    #[tokio::test]
    async fn patches_apply_in_order_and_if_needed_webhooks_run_again() {
        let hooks = config(json!([
            {"name": "first.x.io", "clientConfig": {"url": "https://first.x.io/"},
             "rules": rules(), "reinvocationPolicy": "IfNeeded"},
            {"name": "second.x.io", "clientConfig": {"url": "https://second.x.io/"},
             "rules": rules()},
            {"name": "down.x.io", "clientConfig": {"url": "https://down.x.io/"}, "rules": rules(),
             "failurePolicy": "Ignore"},
        ]));
        let plugin = MutatingWebhook {
            configurations: Fixed(Arc::new(hooks)),
            caller: Fake::default(),
            namespaces: NoNamespaces,
            conversion: crate::conversion::tests::converter(),
        };
        let user = UserInfo::anonymous();
        let a = attrs(&user, "pods", "");
        let mut pod =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "labels": {}}});
        assert!(!a.notes.patched());
        plugin.mutate(&a, Some(&mut pod)).await.unwrap();
        assert_eq!(
            pod["metadata"]["labels"],
            json!({"first": "yes", "second": "yes"})
        );
        assert!(
            a.notes.patched(),
            "the handler is told to decode the object again"
        );
        assert_eq!(
            *plugin.caller.calls.lock().unwrap(),
            ["first.x.io", "second.x.io", "down.x.io", "first.x.io"]
        );
    }

    #[tokio::test]
    async fn a_failing_webhook_that_fails_closed_refuses() {
        let hooks = config(json!([
            {"name": "down.x.io", "clientConfig": {"url": "https://down.x.io/"},
             "rules": rules()}]));
        let plugin = MutatingWebhook {
            configurations: Fixed(Arc::new(hooks)),
            caller: Fake::default(),
            namespaces: NoNamespaces,
            conversion: crate::conversion::tests::converter(),
        };
        let user = UserInfo::anonymous();
        let mut pod = json!({"metadata": {"name": "web"}});
        let err = plugin
            .mutate(&attrs(&user, "pods", ""), Some(&mut pod))
            .await
            .unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                500,
                "Internal error occurred: failed calling webhook \"down.x.io\": failed to call webhook: connection refused"
            )
        );
    }
}
