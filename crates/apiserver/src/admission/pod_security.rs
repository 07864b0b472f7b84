//! Upstream's `PodSecurity` admission plugin: the Pod Security Standards (privileged, baseline,
//! restricted; see [`checks`]) per namespace, from the labels
//! `pod-security.kubernetes.io/{enforce,warn,audit}` (their `-version` labels are accepted and
//! read as `latest`: Skiff knows only the current policy). With no labels every namespace is
//! privileged and nothing is exempt (upstream's defaults without an admission configuration
//! file).
//!
//! - Pods (creates, updates that change more than images or metadata, ephemeral containers):
//!   `enforce` refuses with 403 `violates PodSecurity "level:latest": …`; `warn` adds a
//!   `Warning: would violate PodSecurity …` header; `audit` adds the
//!   `pod-security.kubernetes.io/audit-violations` audit annotation.
//! - Pod controllers' templates (Deployments, ReplicaSets, …): `warn` and `audit` only.
//! - Namespaces: invalid level labels are refused (422); raising `enforce` warns about the
//!   existing pods that would now be refused.

pub mod checks;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Map, Value};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::{Attributes, Operation, Plugin};
use crate::cache::Cacher;
use crate::error::{ApiError, Result};
use checks::Level;

const PREFIX: &str = "pod-security.kubernetes.io/";
/// Audit annotation with the violations of the `audit` level.
pub const AUDIT_VIOLATIONS: &str = "pod-security.kubernetes.io/audit-violations";
/// Audit annotation naming the `enforce` policy a request was checked against.
pub const ENFORCE_POLICY: &str = "pod-security.kubernetes.io/enforce-policy";

/// Namespaces' labels and pods, for the plugin.
#[async_trait]
pub trait PodSecurityLookup: Send + Sync {
    /// The namespace's labels; `None` when it does not exist.
    async fn namespace_labels(&self, namespace: &str) -> Result<Option<Map<String, Value>>>;
    /// The namespace's pods (for warnings when its `enforce` level changes).
    async fn pods(&self, namespace: &str) -> Result<Vec<Value>>;
}

/// Namespaces and pods from the watch cache; a namespace the cache does not have yet (created a
/// moment ago) is read from the store, so that its `enforce` label is never missed.
pub struct Cached {
    pub cache: Arc<Cacher>,
    pub store: Arc<dyn skiff_store::Store>,
}

#[async_trait]
impl PodSecurityLookup for Cached {
    async fn namespace_labels(&self, namespace: &str) -> Result<Option<Map<String, Value>>> {
        let ns = super::namespace_object(&self.cache, &*self.store, namespace).await?;
        Ok(ns.map(|ns| {
            ns.pointer("/metadata/labels")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        }))
    }

    async fn pods(&self, namespace: &str) -> Result<Vec<Value>> {
        let rt = skiff_apimachinery::catalog::lookup("", "v1", "pods").expect("pods");
        let list = self.cache.resource(rt).list(namespace);
        list.objects.iter().map(|c| c.object()).collect()
    }
}

pub struct PodSecurity<L> {
    pub lookup: L,
}

/// One mode's level (`enforce`, `warn` or `audit`), privileged when unlabelled.
fn level(labels: &Map<String, Value>, mode: &str) -> std::result::Result<Level, String> {
    match labels
        .get(&format!("{PREFIX}{mode}"))
        .and_then(Value::as_str)
    {
        None => Ok(Level::Privileged),
        Some(v) => Level::parse(v).ok_or_else(|| v.to_string()),
    }
}

/// The three modes' levels. An invalid label counts as restricted (upstream's fallback);
/// namespace admission keeps new ones out.
struct Policy {
    enforce: Level,
    warn: Level,
    audit: Level,
}

impl Policy {
    fn of(labels: &Map<String, Value>) -> Policy {
        let get = |mode| level(labels, mode).unwrap_or(Level::Restricted);
        Policy {
            enforce: get("enforce"),
            warn: get("warn"),
            audit: get("audit"),
        }
    }
}

fn policy_name(level: Level) -> String {
    format!("{}:latest", level.as_str())
}

fn message(level: Level, violations: &[checks::Violation]) -> String {
    let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
    format!(
        "PodSecurity \"{}\": {}",
        policy_name(level),
        list.join(", ")
    )
}

/// The pod template of a workload (`spec.template`, a CronJob's
/// `spec.jobTemplate.spec.template`, a PodTemplate's `template`).
fn template<'a>(plural: &str, obj: &'a Value) -> Option<&'a Value> {
    let t = match plural {
        "cronjobs" => obj.pointer("/spec/jobTemplate/spec/template"),
        "podtemplates" => obj.get("template"),
        _ => obj.pointer("/spec/template"),
    };
    t.filter(|t| t.is_object())
}

/// The resources whose pod templates are checked (warn and audit only).
fn is_controller(group: &str, plural: &str) -> bool {
    matches!(
        (group, plural),
        ("", "replicationcontrollers" | "podtemplates")
            | (
                "apps",
                "deployments" | "replicasets" | "statefulsets" | "daemonsets"
            )
            | ("batch", "jobs" | "cronjobs")
    )
}

/// Whether a pod update changes what the policy looks at: upstream ignores updates that
/// change only metadata (other than annotations) or container images.
fn significant_update(new: &Value, old: &Value) -> bool {
    fn without_images(spec: &Value) -> Value {
        let mut spec = spec.clone();
        for field in ["initContainers", "containers", "ephemeralContainers"] {
            if let Some(list) = spec[field].as_array_mut() {
                for c in list.iter_mut().filter_map(Value::as_object_mut) {
                    c.remove("image");
                }
            }
        }
        spec
    }
    new.pointer("/metadata/annotations") != old.pointer("/metadata/annotations")
        || without_images(&new["spec"]) != without_images(&old["spec"])
}

impl<L: PodSecurityLookup> PodSecurity<L> {
    async fn policy(&self, namespace: &str) -> Result<Option<Policy>> {
        Ok(self
            .lookup
            .namespace_labels(namespace)
            .await?
            .map(|labels| Policy::of(&labels)))
    }

    async fn pod(&self, attrs: &Attributes<'_>, pod: &Value) -> Result<()> {
        let Some(policy) = self.policy(attrs.namespace).await? else {
            return Ok(());
        };
        let meta = &pod["metadata"];
        let spec = &pod["spec"];
        let enforced = checks::evaluate(policy.enforce, meta, spec);
        attrs
            .notes
            .audit
            .add(ENFORCE_POLICY, policy_name(policy.enforce));
        if !enforced.is_empty() {
            return Err(
                attrs.forbidden(&format!("violates {}", message(policy.enforce, &enforced)))
            );
        }
        self.warn_and_audit(attrs, &policy, meta, spec, true);
        Ok(())
    }

    /// The `warn` and `audit` modes. For pods, a `warn` level equal to the `enforce` one says
    /// nothing new (upstream skips it too).
    fn warn_and_audit(
        &self,
        attrs: &Attributes<'_>,
        policy: &Policy,
        meta: &Value,
        spec: &Value,
        pod: bool,
    ) {
        if !(pod && policy.warn == policy.enforce) {
            let v = checks::evaluate(policy.warn, meta, spec);
            if !v.is_empty() {
                attrs
                    .notes
                    .warnings
                    .push(format!("would violate {}", message(policy.warn, &v)));
            }
        }
        let v = checks::evaluate(policy.audit, meta, spec);
        if !v.is_empty() {
            attrs.notes.audit.add(
                AUDIT_VIOLATIONS,
                format!("would violate {}", message(policy.audit, &v)),
            );
        }
    }

    async fn namespace(&self, attrs: &Attributes<'_>, ns: &Value) -> Result<()> {
        let labels = ns
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let mut errs = Vec::new();
        for mode in ["enforce", "warn", "audit"] {
            let key = format!("{PREFIX}{mode}");
            let path = FieldPath::new("metadata").child("labels").key(&key);
            if let Err(bad) = level(&labels, mode) {
                errs.push(FieldError::invalid(
                    &path,
                    bad,
                    "must be one of privileged, baseline, restricted",
                ));
            }
            let version_key = format!("{key}-version");
            if let Some(v) = labels.get(&version_key).and_then(Value::as_str)
                && !valid_version(v)
            {
                errs.push(FieldError::invalid(
                    &FieldPath::new("metadata").child("labels").key(&version_key),
                    v.to_string(),
                    "must be \"latest\" or of the form \"v1.x\"",
                ));
            }
        }
        if !errs.is_empty() {
            return Err(ApiError::invalid("Namespace", "", attrs.name, &errs));
        }
        // Raising `enforce`: warn about the pods that would now be refused.
        let new = Policy::of(&labels).enforce;
        let old = attrs
            .old
            .and_then(|o| o.pointer("/metadata/labels").and_then(Value::as_object))
            .map(|l| Policy::of(l).enforce)
            .unwrap_or(Level::Privileged);
        if attrs.operation != Operation::Update || new <= old || new == Level::Privileged {
            return Ok(());
        }
        let mut violating = Vec::new();
        for pod in self.lookup.pods(attrs.name).await? {
            let v = checks::evaluate(new, &pod["metadata"], &pod["spec"]);
            if !v.is_empty() {
                let reasons: Vec<&str> = v.iter().map(|v| v.reason.as_str()).collect();
                let name = pod
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                violating.push(format!("{name}: {}", reasons.join(", ")));
            }
        }
        if !violating.is_empty() {
            attrs.notes.warnings.push(format!(
                "existing pods in namespace {:?} violate the new PodSecurity enforce level {:?}",
                attrs.name,
                policy_name(new)
            ));
            for w in violating {
                attrs.notes.warnings.push(w);
            }
        }
        Ok(())
    }
}

/// `latest` or `v1.<minor>` (upstream's version label syntax).
fn valid_version(v: &str) -> bool {
    v == "latest"
        || v.strip_prefix("v1.")
            .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()))
}

#[async_trait]
impl<L: PodSecurityLookup> Plugin for PodSecurity<L> {
    fn name(&self) -> &'static str {
        "PodSecurity"
    }

    async fn validate(&self, attrs: &Attributes<'_>, object: Option<&Value>) -> Result<()> {
        let Some(obj) = object else { return Ok(()) };
        let (group, plural) = (
            attrs.resource.group.as_str(),
            attrs.resource.plural.as_str(),
        );
        if attrs.operation == Operation::Delete {
            return Ok(());
        }
        if group.is_empty() && plural == "namespaces" && attrs.subresource.is_empty() {
            return self.namespace(attrs, obj).await;
        }
        if group.is_empty() && plural == "pods" {
            let relevant = match attrs.subresource {
                "" => match (attrs.operation, attrs.old) {
                    (Operation::Update, Some(old)) => significant_update(obj, old),
                    _ => true,
                },
                "ephemeralcontainers" => true,
                _ => false,
            };
            return if relevant {
                self.pod(attrs, obj).await
            } else {
                Ok(())
            };
        }
        // Updates that leave the template alone (scaling, status) are not checked again.
        let template_changed = |t: &Value| match attrs.old.and_then(|o| template(plural, o)) {
            Some(old) if attrs.operation == Operation::Update => significant_update(t, old),
            _ => true,
        };
        if is_controller(group, plural)
            && attrs.subresource.is_empty()
            && let Some(t) = template(plural, obj)
            && template_changed(t)
            && let Some(policy) = self.policy(attrs.namespace).await?
        {
            self.warn_and_audit(attrs, &policy, &t["metadata"], &t["spec"], false);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::UserInfo;
    use serde_json::json;
    use skiff_apimachinery::catalog::lookup;

    struct Fixed {
        labels: Value,
        pods: Vec<Value>,
    }

    #[async_trait]
    impl PodSecurityLookup for Fixed {
        async fn namespace_labels(&self, _ns: &str) -> Result<Option<Map<String, Value>>> {
            Ok(self.labels.as_object().cloned())
        }
        async fn pods(&self, _ns: &str) -> Result<Vec<Value>> {
            Ok(self.pods.clone())
        }
    }

    fn plugin(labels: Value) -> PodSecurity<Fixed> {
        PodSecurity {
            lookup: Fixed {
                labels,
                pods: vec![],
            },
        }
    }

    fn attrs<'a>(user: &'a UserInfo, group: &str, version: &str, plural: &str) -> Attributes<'a> {
        Attributes {
            operation: Operation::Create,
            resource: lookup(group, version, plural).unwrap(),
            subresource: "",
            namespace: "team",
            name: "web",
            user,
            old: None,
            dry_run: false,
            notes: Default::default(),
        }
    }

    fn bare_pod() -> Value {
        json!({"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}})
    }

    fn warnings(a: &Attributes<'_>) -> Vec<String> {
        let mut resp = crate::handlers::json(200, &json!({}));
        a.notes.warnings.apply(&mut resp);
        resp.headers()
            .get_all(http::header::WARNING)
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }

    #[tokio::test]
    async fn enforce_restricted_refuses_a_bare_pod_with_upstreams_message() {
        let user = UserInfo::anonymous();
        let p = plugin(json!({"pod-security.kubernetes.io/enforce": "restricted",
                              "pod-security.kubernetes.io/enforce-version": "latest"}));
        let a = attrs(&user, "", "v1", "pods");
        let err = p.validate(&a, Some(&bare_pod())).await.unwrap_err();
        assert_eq!(err.code, 403);
        assert!(
            err.message.starts_with(
                "pods \"web\" is forbidden: violates PodSecurity \"restricted:latest\": \
                 allowPrivilegeEscalation != false (container \"c\" must set \
                 securityContext.allowPrivilegeEscalation=false), unrestricted capabilities"
            ),
            "{}",
            err.message
        );
        assert_eq!(a.notes.audit.all()[ENFORCE_POLICY], "restricted:latest");
    }

    #[tokio::test]
    async fn an_ephemeral_container_added_through_its_subresource_is_checked() {
        let user = UserInfo::anonymous();
        let p = plugin(json!({"pod-security.kubernetes.io/enforce": "baseline"}));
        let old = bare_pod();
        let mut pod = bare_pod();
        pod["spec"]["ephemeralContainers"] = json!([{"name": "debugger", "image": "busybox",
            "targetContainerName": "c", "securityContext": {"privileged": true}}]);
        let update = |subresource| Attributes {
            operation: Operation::Update,
            subresource,
            old: Some(&old),
            ..attrs(&user, "", "v1", "pods")
        };
        let err = p
            .validate(&update("ephemeralcontainers"), Some(&pod))
            .await
            .unwrap_err();
        assert!(
            err.message.ends_with(
                "violates PodSecurity \"baseline:latest\": privileged (container \"debugger\" \
                 must not set securityContext.privileged=true)"
            ),
            "{}",
            err.message
        );
        // a status write is not checked again
        p.validate(&update("status"), Some(&pod)).await.unwrap();
    }

    #[tokio::test]
    async fn warn_and_audit_let_the_pod_through_and_say_why() {
        let user = UserInfo::anonymous();
        let p = plugin(json!({"pod-security.kubernetes.io/enforce": "baseline",
                              "pod-security.kubernetes.io/warn": "restricted",
                              "pod-security.kubernetes.io/audit": "restricted"}));
        let a = attrs(&user, "", "v1", "pods");
        p.validate(&a, Some(&bare_pod())).await.unwrap();
        let w = warnings(&a);
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("299 - \"would violate PodSecurity \\\"restricted:latest\\\": allowPrivilegeEscalation"),
            "{w:?}"
        );
        assert!(
            a.notes.audit.all()[AUDIT_VIOLATIONS]
                .starts_with("would violate PodSecurity \"restricted:latest\"")
        );
        // a privileged pod is refused by baseline enforcement
        let mut pod = bare_pod();
        pod["spec"]["hostNetwork"] = json!(true);
        let err = p.validate(&a, Some(&pod)).await.unwrap_err();
        assert!(
            err.message.ends_with(
                "violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true)"
            ),
            "{}",
            err.message
        );
    }

    #[tokio::test]
    async fn controllers_only_warn_and_unlabelled_namespaces_are_privileged() {
        let user = UserInfo::anonymous();
        let p = plugin(json!({"pod-security.kubernetes.io/enforce": "restricted"}));
        let deploy = json!({"spec": {"template": bare_pod()}});
        let a = attrs(&user, "apps", "v1", "deployments");
        p.validate(&a, Some(&deploy)).await.unwrap();
        // enforce does not apply to templates; warn is privileged here
        assert!(warnings(&a).is_empty());
        let p = plugin(json!({"pod-security.kubernetes.io/warn": "baseline"}));
        let mut deploy = deploy;
        deploy["spec"]["template"]["spec"]["hostPID"] = json!(true);
        p.validate(&a, Some(&deploy)).await.unwrap();
        assert_eq!(warnings(&a).len(), 1);
        // scaling leaves the template alone: no new warning
        let mut scale = attrs(&user, "apps", "v1", "deployments");
        scale.operation = Operation::Update;
        scale.old = Some(&deploy);
        let mut scaled = deploy.clone();
        scaled["spec"]["replicas"] = json!(5);
        p.validate(&scale, Some(&scaled)).await.unwrap();
        assert!(warnings(&scale).is_empty());
        let open = plugin(json!({}));
        let mut pod = bare_pod();
        pod["spec"]["containers"][0]["securityContext"] = json!({"privileged": true});
        open.validate(&attrs(&user, "", "v1", "pods"), Some(&pod))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn namespaces_with_bad_levels_are_invalid_and_raising_enforce_warns_about_pods() {
        let user = UserInfo::anonymous();
        let p = plugin(json!({}));
        let mut a = attrs(&user, "", "v1", "namespaces");
        a.namespace = "";
        let ns = json!({"metadata": {"name": "web", "labels": {"pod-security.kubernetes.io/enforce": "strict"}}});
        let err = p.validate(&a, Some(&ns)).await.unwrap_err();
        assert_eq!(err.code, 422);
        assert!(
            err.message
                .contains("must be one of privileged, baseline, restricted"),
            "{}",
            err.message
        );

        let p = PodSecurity {
            lookup: Fixed {
                labels: json!({}),
                pods: vec![bare_pod()],
            },
        };
        let old = json!({"metadata": {"name": "web"}});
        a.operation = Operation::Update;
        a.old = Some(&old);
        let ns = json!({"metadata": {"name": "web", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}});
        p.validate(&a, Some(&ns)).await.unwrap();
        let w = warnings(&a);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("existing pods in namespace \\\"web\\\" violate the new PodSecurity enforce level \\\"restricted:latest\\\""), "{w:?}");
        assert!(
            w[1].starts_with(
                "299 - \"web: allowPrivilegeEscalation != false, unrestricted capabilities"
            ),
            "{w:?}"
        );
    }
}
