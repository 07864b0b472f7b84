//! Admission webhooks (upstream's `MutatingAdmissionWebhook` and `ValidatingAdmissionWebhook`):
//! the webhooks of the `admissionregistration.k8s.io/v1` configurations, which requests they
//! match (rules, scope, namespace and object selectors), and the `admission.k8s.io/v1`
//! AdmissionReview they are sent and answer with.
//!
//! # Layout
//! - this file: parsed webhooks, the cached configurations (rebuilt from the watch cache only
//!   when a configuration changed, never a store read per request), matching, reviews and
//!   upstream's error messages.
//! - [`crate::webhook_client`] (shared with CRD conversion): the HTTPS call (caBundle, `url` or
//!   `service`, `timeoutSeconds`).
//! - [`mutating`]: the mutating plugin (JSONPatch responses, reinvocation).
//! - [`validating`]: the validating plugin (webhooks called in parallel).

pub mod mutating;
pub mod validating;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use serde_json::{Value, json};
use skiff_apimachinery::catalog::ResourceType;
use skiff_apimachinery::labels::Selector;

use super::{Attributes, Operation, expressions};
use crate::cache::Cacher;
use crate::conversion::Converter;
use crate::error::{ApiError, Result};
use crate::webhook_client::{Caller, ClientConfig};

/// One rule of a webhook (`operations`, `apiGroups`, `apiVersions`, `resources`, `scope`).
#[derive(Debug, Clone, Default)]
pub struct Rule {
    pub operations: Vec<String>,
    pub groups: Vec<String>,
    pub versions: Vec<String>,
    pub resources: Vec<String>,
    pub scope: String,
}

/// One webhook of a configuration, with upstream's defaults filled in.
#[derive(Debug, Clone)]
pub struct Webhook {
    pub name: String,
    pub client: ClientConfig,
    pub rules: Vec<Rule>,
    /// `failurePolicy: Ignore` (the default is Fail).
    pub fail_open: bool,
    pub namespace_selector: Selector,
    pub object_selector: Selector,
    /// `sideEffects` is `None` or `NoneOnDryRun`: it may be called for dry runs.
    pub dry_run_safe: bool,
    /// `timeoutSeconds` (default 10).
    pub timeout: Duration,
    /// `reinvocationPolicy: IfNeeded`.
    pub reinvoke: bool,
    /// `matchConditions`: CEL expressions over `object`, `oldObject` and `request` that must all
    /// be true for the webhook to be called.
    pub match_conditions: Vec<(String, Arc<expressions::Program>)>,
}

fn strings(v: &Value) -> Vec<String> {
    crate::strategy::common::strings(Some(v))
        .into_iter()
        .map(str::to_string)
        .collect()
}

fn selector(v: &Value) -> Selector {
    if v.is_null() {
        return Selector::everything();
    }
    Selector::from_label_selector(v).unwrap_or_else(|_| Selector::nothing())
}

/// The webhooks of one configuration object.
pub fn parse(configuration: &Value) -> Vec<Webhook> {
    let mut out = Vec::new();
    for w in configuration["webhooks"].as_array().into_iter().flatten() {
        let rules = w["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| Rule {
                operations: strings(&r["operations"]),
                groups: strings(&r["apiGroups"]),
                versions: strings(&r["apiVersions"]),
                resources: strings(&r["resources"]),
                scope: r["scope"].as_str().unwrap_or("*").to_string(),
            })
            .collect();
        out.push(Webhook {
            name: w["name"].as_str().unwrap_or("").to_string(),
            client: ClientConfig::parse(&w["clientConfig"]),
            rules,
            fail_open: w["failurePolicy"] == "Ignore",
            namespace_selector: selector(&w["namespaceSelector"]),
            object_selector: selector(&w["objectSelector"]),
            dry_run_safe: matches!(w["sideEffects"].as_str(), Some("None" | "NoneOnDryRun")),
            timeout: Duration::from_secs(w["timeoutSeconds"].as_u64().unwrap_or(10).clamp(1, 30)),
            reinvoke: w["reinvocationPolicy"] == "IfNeeded",
            match_conditions: w["matchConditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| {
                    let program = expressions::compile(c["expression"].as_str()?).ok()?;
                    Some((c["name"].as_str()?.to_string(), Arc::new(program)))
                })
                .collect(),
        });
    }
    out
}

/// The webhooks of every configuration of one kind, in upstream's order (configurations by
/// name, webhooks as listed).
pub trait Configurations: Send + Sync {
    fn webhooks(&self) -> Arc<Vec<Webhook>>;
}

/// Configurations from the watch cache, parsed again only when one changed.
pub struct CachedConfigurations {
    cache: Arc<Cacher>,
    rt: &'static ResourceType,
    /// The cache's last change of this resource and the webhooks parsed at it. A plain mutex:
    /// held only to swap the Arc, never across an await.
    parsed: Mutex<(i64, Arc<Vec<Webhook>>)>,
}

impl CachedConfigurations {
    /// `plural` is `mutatingwebhookconfigurations` or `validatingwebhookconfigurations`.
    pub fn new(cache: Arc<Cacher>, plural: &str) -> CachedConfigurations {
        let rt = skiff_apimachinery::catalog::lookup("admissionregistration.k8s.io", "v1", plural)
            .expect("webhook configurations are in the catalog");
        CachedConfigurations {
            cache,
            rt,
            parsed: Mutex::new((-1, Arc::default())),
        }
    }
}

impl Configurations for CachedConfigurations {
    fn webhooks(&self) -> Arc<Vec<Webhook>> {
        let resource = self.cache.resource(self.rt);
        let changed = resource.last_change();
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        if parsed.0 != changed {
            let hooks: Vec<Webhook> = resource
                .list("")
                .objects
                .iter()
                .filter_map(|c| c.object().ok())
                .flat_map(|c| parse(&c))
                .collect();
            *parsed = (changed, Arc::new(hooks));
        }
        parsed.1.clone()
    }
}

/// Namespace labels, for namespace selectors.
#[async_trait]
pub trait NamespaceLabels: Send + Sync {
    async fn labels(&self, namespace: &str) -> Result<Value>;
}

/// Namespace labels from the watch cache (the store for a namespace it does not have yet).
pub struct CachedNamespaces {
    pub cache: Arc<Cacher>,
    pub store: Arc<dyn skiff_store::Store>,
}

#[async_trait]
impl NamespaceLabels for CachedNamespaces {
    async fn labels(&self, namespace: &str) -> Result<Value> {
        let ns = super::namespace_object(&self.cache, &*self.store, namespace).await?;
        Ok(ns.map_or(Value::Null, |ns| ns["metadata"]["labels"].clone()))
    }
}

pub(crate) fn operation(op: Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
    }
}

fn any(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

/// Whether `rule` covers the request (upstream's `rules.Matcher`).
pub(crate) fn rule_matches(rule: &Rule, attrs: &Attributes<'_>) -> bool {
    let rt = attrs.resource;
    let scope_ok = match rule.scope.as_str() {
        "Cluster" => !rt.namespaced,
        "Namespaced" => rt.namespaced,
        _ => true,
    };
    let resource_ok = rule.resources.iter().any(|r| {
        let (res, sub) = r.split_once('/').unwrap_or((r, ""));
        (res == "*" || res == rt.plural) && (sub == "*" || sub == attrs.subresource)
    });
    scope_ok
        && any(&rule.operations, operation(attrs.operation))
        && any(&rule.groups, &rt.group)
        && any(&rule.versions, &rt.version)
        && resource_ok
}

/// Kinds never sent to webhooks, so that a broken webhook cannot lock its own configuration
/// (upstream's exclusion).
fn exempt(rt: &ResourceType) -> bool {
    rt.group == "admissionregistration.k8s.io"
}

/// Whether `hook` is called for this request: a rule matches, and the namespace and object
/// selectors select it.
pub async fn matches(
    hook: &Webhook,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    namespaces: &dyn NamespaceLabels,
) -> Result<bool> {
    if exempt(attrs.resource) || !hook.rules.iter().any(|r| rule_matches(r, attrs)) {
        return Ok(false);
    }
    if !object_selected(&hook.object_selector, attrs, object) {
        return Ok(false);
    }
    namespace_selected(&hook.namespace_selector, attrs, object, namespaces).await
}

fn labels(o: Option<&Value>) -> Value {
    o.map(|o| o["metadata"]["labels"].clone())
        .unwrap_or(Value::Null)
}

/// Whether an object selector selects the new or the old object (upstream's
/// `MatchObjectSelector`).
pub fn object_selected(
    selector: &Selector,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
) -> bool {
    selector.matches(&labels(object)) || selector.matches(&labels(attrs.old))
}

/// Whether a namespace selector selects the request's namespace (a Namespace by its own
/// labels; cluster-scoped objects are never selected out).
pub async fn namespace_selected(
    selector: &Selector,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    namespaces: &dyn NamespaceLabels,
) -> Result<bool> {
    if selector.is_empty() {
        return Ok(true);
    }
    let rt = attrs.resource;
    let ns_labels = if rt.group.is_empty() && rt.plural == "namespaces" {
        labels(object.or(attrs.old))
    } else if rt.namespaced {
        namespaces.labels(attrs.namespace).await?
    } else {
        return Ok(true);
    };
    Ok(selector.matches(&ns_labels))
}

/// The AdmissionReview `hook` is sent, with request uid `uid`: the objects in the request's
/// version (an object converted to it fails the request as the conversion does).
pub async fn review(
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    uid: &str,
    conversion: &Converter,
) -> Result<Value> {
    let rt = attrs.resource;
    let mut request = request(attrs, uid);
    for (field, o) in [("object", object), ("oldObject", attrs.old)] {
        request[field] = match o {
            Some(o) => conversion.to_external(rt, o.clone()).await?,
            None => Value::Null,
        };
    }
    Ok(json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}))
}

/// An AdmissionRequest without its objects: what webhooks are sent around them and what CEL
/// expressions see as `request`.
pub fn request(attrs: &Attributes<'_>, uid: &str) -> Value {
    let rt = attrs.resource;
    let kind = match rt.subresource(attrs.subresource) {
        Some(s) => json!({"group": s.group, "version": s.version, "kind": s.kind}),
        None => json!({"group": rt.group, "version": rt.version, "kind": rt.kind}),
    };
    let resource = json!({"group": rt.group, "version": rt.version, "resource": rt.plural});
    let options = match attrs.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
    };
    let mut request = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": attrs.name,
        "operation": operation(attrs.operation),
        "userInfo": {"username": attrs.user.name, "uid": attrs.user.uid,
                     "groups": attrs.user.groups},
        "dryRun": attrs.dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options},
    });
    if !attrs.subresource.is_empty() {
        request["subResource"] = json!(attrs.subresource);
        request["requestSubResource"] = json!(attrs.subresource);
    }
    if !attrs.namespace.is_empty() {
        request["namespace"] = json!(attrs.namespace);
    }
    request
}

/// What a webhook answered.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub allowed: bool,
    pub status: Value,
    /// The decoded JSONPatch, if any.
    pub patch: Option<Value>,
    pub warnings: Vec<String>,
    pub audit_annotations: std::collections::BTreeMap<String, String>,
}

/// Reads an AdmissionReview response to the request `uid` (upstream's
/// `VerifyAdmissionResponse`); `Err` is the reason the call failed.
pub fn answer(review: &Value, uid: &str, mutating: bool) -> std::result::Result<Answer, String> {
    if review["apiVersion"] != "admission.k8s.io/v1" || review["kind"] != "AdmissionReview" {
        return Err(format!(
            "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}, Kind={}",
            review["apiVersion"].as_str().unwrap_or(""),
            review["kind"].as_str().unwrap_or("")
        ));
    }
    let resp = &review["response"];
    if !resp.is_object() {
        return Err("webhook response was absent".into());
    }
    let got = resp["uid"].as_str().unwrap_or("");
    if got != uid {
        return Err(format!("expected response.uid={uid:?}, got {got:?}"));
    }
    let patch = match (resp["patch"].as_str(), resp["patchType"].as_str()) {
        (None, _) => None,
        (Some(_), _) if !mutating => {
            return Err("validating webhook may not return response.patch".into());
        }
        (Some(p), Some("JSONPatch")) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(p)
                .map_err(|e| format!("decoding response.patch: {e}"))?;
            Some(
                serde_json::from_slice(&bytes)
                    .map_err(|e| format!("decoding response.patch: {e}"))?,
            )
        }
        (Some(_), other) => {
            return Err(format!(
                "expected response.patchType to be set to \"JSONPatch\", got {:?}",
                other.unwrap_or("")
            ));
        }
    };
    Ok(Answer {
        allowed: resp["allowed"] == true,
        status: resp["status"].clone(),
        patch,
        warnings: strings(&resp["warnings"]),
        audit_annotations: resp["auditAnnotations"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect(),
    })
}

/// The `Status` reasons a webhook may answer with that Skiff's errors can carry.
fn reason(r: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "Forbidden",
        "Unauthorized",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Invalid",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
        "Timeout",
        "TooManyRequests",
        "Gone",
    ];
    KNOWN.iter().find(|k| **k == r).copied().unwrap_or("")
}

/// Upstream's `ToStatusErr`: a refusal as `admission webhook "x" denied the request: why`,
/// with the webhook's code (403 when it gave none below 400).
pub fn denied(hook: &str, status: &Value) -> ApiError {
    let code = status["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| *c >= 400)
        .unwrap_or(403);
    let by = format!("admission webhook {hook:?} denied the request");
    let message = match (status["message"].as_str(), status["reason"].as_str()) {
        (Some(m), _) if !m.is_empty() => format!("{by}: {m}"),
        (_, Some(r)) if !r.is_empty() => format!("{by}: {r}"),
        _ => format!("{by} without explanation"),
    };
    let mut err = ApiError::with_code(
        code,
        reason(status["reason"].as_str().unwrap_or("")),
        message,
    );
    if status["details"].is_object() {
        err.details = Some(status["details"].clone());
    }
    err
}

/// A webhook that could not be called and fails closed: 500 `failed calling webhook`.
pub fn call_failed(hook: &str, why: &str) -> ApiError {
    ApiError::internal(format!("failed calling webhook {hook:?}: {why}"))
}

/// A webhook with side effects asked to admit a dry run: 400, as upstream.
pub fn dry_run_unsupported(hook: &str) -> ApiError {
    ApiError::bad_request(format!(
        "admission webhook {hook:?} does not support dry run"
    ))
}

/// Upstream's match conditions over the AdmissionReview `request`: any false skips the webhook;
/// otherwise an error is reported for the failure policy to decide.
pub fn conditions(hook: &Webhook, request: &Value) -> std::result::Result<bool, String> {
    if hook.match_conditions.is_empty() {
        return Ok(true);
    }
    let context = expressions::context([
        ("object", expressions::value(&request["object"])),
        ("oldObject", expressions::value(&request["oldObject"])),
        ("request", expressions::value(request)),
    ]);
    expressions::conditions(&hook.match_conditions, &context)
}

/// One call, with the answer checked; `Ok(None)` when the call failed and the webhook fails
/// open.
pub async fn invoke(
    caller: &dyn Caller,
    conversion: &Converter,
    hook: &Webhook,
    attrs: &Attributes<'_>,
    object: Option<&Value>,
    mutating: bool,
) -> Result<Option<Answer>> {
    let uid = uuid::Uuid::new_v4().to_string();
    let review = review(attrs, object, &uid, conversion).await?;
    match conditions(hook, &review["request"]) {
        Ok(true) => {}
        Ok(false) => return Ok(None),
        Err(_) if hook.fail_open => return Ok(None),
        Err(why) => return Err(attrs.forbidden(&why)),
    }
    if attrs.dry_run && !hook.dry_run_safe {
        return Err(dry_run_unsupported(&hook.name));
    }
    let called = std::time::Instant::now();
    let result = caller.call(&hook.client, hook.timeout, &review).await;
    crate::timing::exclude(called.elapsed());
    let result = result
        .map_err(|e| format!("failed to call webhook: {e}"))
        .and_then(|r| answer(&r, &uid, mutating));
    match result {
        Ok(a) if !a.allowed => Err(denied(&hook.name, &a.status)),
        Ok(a) => {
            for w in &a.warnings {
                attrs.notes.warnings.push(w.clone());
            }
            for (k, v) in &a.audit_annotations {
                attrs
                    .notes
                    .audit
                    .add(&format!("{}/{k}", hook.name), v.clone());
            }
            Ok(Some(a))
        }
        Err(why) if hook.fail_open => {
            tracing::warn!(webhook = %hook.name, %why, "failed calling webhook, failing open");
            attrs.notes.audit.add(
                &format!(
                    "failed-open.{}.webhook.admission.k8s.io",
                    if mutating { "mutating" } else { "validating" }
                ),
                hook.name.clone(),
            );
            Ok(None)
        }
        Err(why) => Err(call_failed(&hook.name, &why)),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::authn::UserInfo;
    use skiff_apimachinery::catalog::lookup;

    pub fn config(hooks: Value) -> Vec<Webhook> {
        parse(&json!({"metadata": {"name": "c"}, "webhooks": hooks}))
    }

    /// Configurations that never change.
    pub struct Fixed(pub Arc<Vec<Webhook>>);

    impl Configurations for Fixed {
        fn webhooks(&self) -> Arc<Vec<Webhook>> {
            self.0.clone()
        }
    }

    pub struct NoNamespaces;

    #[async_trait]
    impl NamespaceLabels for NoNamespaces {
        async fn labels(&self, ns: &str) -> Result<Value> {
            Ok(json!({"kubernetes.io/metadata.name": ns}))
        }
    }

    pub fn attrs<'a>(user: &'a UserInfo, plural: &str, subresource: &'a str) -> Attributes<'a> {
        Attributes {
            operation: Operation::Create,
            resource: lookup("", "v1", plural).unwrap(),
            subresource,
            namespace: "team",
            name: "web",
            user,
            old: None,
            dry_run: false,
            notes: Default::default(),
        }
    }

    #[tokio::test]
    async fn rules_match_resources_subresources_scopes_and_selectors() {
        let user = UserInfo::anonymous();
        let hooks = config(json!([
            {"name": "pods.x.io", "clientConfig": {"url": "https://h/"},
             "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                        "resources": ["pods"]}]},
            {"name": "status.x.io", "clientConfig": {"url": "https://h/"},
             "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
                        "resources": ["*/status"], "scope": "Namespaced"}]},
            {"name": "labelled.x.io", "clientConfig": {"url": "https://h/"},
             "objectSelector": {"matchLabels": {"hook": "yes"}},
             "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team"}},
             "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"],
                        "resources": ["*"]}]},
        ]));
        let pod = json!({"metadata": {"labels": {"hook": "yes"}}});
        let create = attrs(&user, "pods", "");
        let status = attrs(&user, "pods", "status");
        let ns = NoNamespaces;
        let m = |h: usize, a: &Attributes<'_>| {
            futures::executor::block_on(matches(&hooks[h], a, Some(&pod), &ns)).unwrap()
        };
        assert!(m(0, &create));
        assert!(!m(0, &status));
        assert!(!m(1, &create));
        assert!(m(1, &status));
        assert!(m(2, &create));
        let bare = json!({"metadata": {}});
        assert!(!matches(&hooks[2], &create, Some(&bare), &ns).await.unwrap());
        let mut elsewhere = attrs(&user, "pods", "");
        elsewhere.namespace = "other";
        assert!(
            !matches(&hooks[2], &elsewhere, Some(&pod), &ns)
                .await
                .unwrap()
        );
        assert_eq!(hooks[0].timeout, Duration::from_secs(10));
        assert!(!hooks[0].fail_open);
    }

    #[test]
    fn match_conditions_skip_the_webhook_when_one_is_false() {
        let hooks = config(
            json!([{"name": "c.x.io", "clientConfig": {"url": "https://h/"},
            "matchConditions": [
                {"name": "not-kube-system", "expression": "request.namespace != 'kube-system'"},
                {"name": "labelled", "expression": "has(object.metadata.labels) && object.metadata.labels.hook == 'yes'"}]}]),
        );
        let hook = &hooks[0];
        let request = |ns: &str, labels: Value| json!({"namespace": ns, "object": {"metadata": {"labels": labels}}, "oldObject": null});
        assert_eq!(
            conditions(hook, &request("team", json!({"hook": "yes"}))),
            Ok(true)
        );
        assert_eq!(
            conditions(hook, &request("kube-system", json!({"hook": "yes"}))),
            Ok(false)
        );
        assert_eq!(
            conditions(hook, &request("team", json!({"hook": "no"}))),
            Ok(false)
        );
        let odd = &config(
            json!([{"name": "c.x.io", "clientConfig": {"url": "https://h/"},
            "matchConditions": [{"name": "n", "expression": "object.metadata.name"}]}]),
        )[0];
        assert!(conditions(odd, &json!({"object": {"metadata": {"name": "x"}}})).is_err());
    }

    #[test]
    fn refusals_and_failures_read_as_upstreams() {
        let err = denied(
            "deny.x.io",
            &json!({"message": "no pods today", "code": 400}),
        );
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                400,
                "admission webhook \"deny.x.io\" denied the request: no pods today"
            )
        );
        let err = denied("deny.x.io", &Value::Null);
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                403,
                "admission webhook \"deny.x.io\" denied the request without explanation"
            )
        );
        let err = call_failed("down.x.io", "failed to call webhook: connection refused");
        assert_eq!(err.code, 500);
        assert_eq!(
            err.message,
            "Internal error occurred: failed calling webhook \"down.x.io\": failed to call webhook: connection refused"
        );
    }

    #[test]
    fn answers_must_name_the_request_and_patch_only_when_mutating() {
        let ok = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": "u1", "allowed": true, "patchType": "JSONPatch",
                "patch": base64::engine::general_purpose::STANDARD.encode(r#"[{"op":"add","path":"/x","value":1}]"#),
                "warnings": ["careful"]}});
        let a = answer(&ok, "u1", true).unwrap();
        assert!(a.allowed);
        assert_eq!(a.patch.unwrap()[0]["op"], "add");
        assert_eq!(a.warnings, ["careful"]);
        assert_eq!(
            answer(&ok, "u2", true).unwrap_err(),
            "expected response.uid=\"u2\", got \"u1\""
        );
        assert!(answer(&ok, "u1", false).is_err());
    }
}
