//! Upstream's `ValidatingAdmissionPolicy` admission plugin: every binding of a policy that
//! matches the request evaluates the policy's CEL validations (with the binding's params), and
//! acts on each failure as its `validationActions` say: Deny refuses with upstream's
//! `ValidatingAdmissionPolicy 'p' with binding 'b' denied request: …` (422 unless the validation
//! gives another reason), Warn adds a `Warning` header, Audit an audit annotation.
//!
//! # Layout
//! - this file: the plugin (matching, dispatch over bindings and params, refusals, warnings and
//!   annotations).
//! - [`policy`]: parsed policies and bindings, cached from the watch cache.
//! - [`params`]: a binding's params of the policy's `paramKind`.
//! - [`evaluate`]: one policy evaluated for one request and param.

pub mod evaluate;
pub mod params;
pub mod policy;

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};

use self::evaluate::Input;
use self::params::ParamSource;
use self::policy::{MatchResources, Policies, Policy};
use super::webhook::{self, NamespaceLabels};
use super::{Attributes, Plugin, expressions};
use crate::conversion::Converter;
use crate::error::{ApiError, Result};

/// The Namespace objects requests are made in (`namespaceObject`, namespace selectors).
#[async_trait]
pub trait Namespaces: Send + Sync {
    async fn namespace(&self, name: &str) -> Result<Option<Value>>;
}

#[async_trait]
impl Namespaces for webhook::CachedNamespaces {
    async fn namespace(&self, name: &str) -> Result<Option<Value>> {
        super::namespace_object(&self.cache, &*self.store, name).await
    }
}

/// The namespace already read, as selectors read its labels.
struct KnownNamespace<'a>(&'a Value);

#[async_trait]
impl NamespaceLabels for KnownNamespace<'_> {
    async fn labels(&self, _namespace: &str) -> Result<Value> {
        Ok(self.0["metadata"]["labels"].clone())
    }
}

pub struct ValidatingAdmissionPolicy<P, S, N> {
    pub policies: P,
    pub params: S,
    pub namespaces: N,
    /// Expressions see objects and params in their requested versions.
    pub conversion: Arc<Converter>,
}

/// A refusal: the policy, the binding when there is one, why, and the Status reason.
struct Denial<'a> {
    /// The policy's place in evaluation order: the first refusal in that order is reported.
    order: usize,
    policy: &'a str,
    binding: Option<&'a str>,
    message: String,
    reason: &'static str,
}

impl<'a> Denial<'a> {
    /// A policy or binding that cannot be used: a refusal unless the policy fails open.
    fn misconfigured(
        order: usize,
        policy: &'a Policy,
        binding: Option<&'a str>,
        why: String,
    ) -> Option<Self> {
        (!policy.fail_open).then(|| Denial {
            order,
            policy: &policy.name,
            binding,
            message: why,
            reason: "Invalid",
        })
    }
}

/// Upstream's code for a validation's reason (`reasonToCode`).
fn code(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// Upstream's refusal: `admission.NewForbidden`'s message and details with the reason's code,
/// and the message again as the one cause.
fn refusal(attrs: &Attributes<'_>, d: &Denial<'_>) -> ApiError {
    let message = match d.binding {
        Some(b) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{b}' denied request: {}",
            d.policy, d.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            d.policy, d.message
        ),
    };
    let mut err = attrs.forbidden(&message);
    err.code = code(d.reason);
    err.reason = d.reason;
    if let Some(details) = err.details.as_mut() {
        details["causes"] = json!([{"message": message}]);
    }
    err
}

/// The first refusal in policy order, if any.
fn first_refusal(attrs: &Attributes<'_>, denials: &[Denial<'_>]) -> Result<()> {
    match denials.iter().min_by_key(|d| d.order) {
        Some(d) => Err(refusal(attrs, d)),
        None => Ok(()),
    }
}

/// Policies never apply to policies and bindings, so a broken one can always be fixed.
fn exempt(attrs: &Attributes<'_>) -> bool {
    attrs.resource.group == "admissionregistration.k8s.io"
        && matches!(
            attrs.resource.plural.as_str(),
            "validatingadmissionpolicies" | "validatingadmissionpolicybindings"
        )
}

impl<P: Policies, S: ParamSource, N: Namespaces> ValidatingAdmissionPolicy<P, S, N> {
    async fn selected(
        m: &MatchResources,
        attrs: &Attributes<'_>,
        object: Option<&Value>,
        namespace: &Value,
    ) -> Result<bool> {
        Ok(m.covers(attrs)
            && webhook::object_selected(&m.object_selector, attrs, object)
            && webhook::namespace_selected(
                &m.namespace_selector,
                attrs,
                object,
                &KnownNamespace(namespace),
            )
            .await?)
    }
}

#[async_trait]
impl<P: Policies, S: ParamSource, N: Namespaces> Plugin for ValidatingAdmissionPolicy<P, S, N> {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionPolicy"
    }

    async fn validate(&self, attrs: &Attributes<'_>, object: Option<&Value>) -> Result<()> {
        let hooks = self.policies.hooks();
        // Most requests match no policy's rules: they need no namespace read.
        if exempt(attrs)
            || !hooks
                .iter()
                .any(|h| h.policy.match_constraints.covers(attrs))
        {
            return Ok(());
        }
        let rt = attrs.resource;
        let namespace = if rt.namespaced && !attrs.namespace.is_empty() {
            self.namespaces
                .namespace(attrs.namespace)
                .await?
                .unwrap_or(Value::Null)
        } else {
            Value::Null
        };
        // Which bindings apply, with their params; a policy or binding that cannot be used
        // refuses unless its policy fails open.
        let mut denials = Vec::new();
        let mut applying = Vec::new();
        for (order, hook) in hooks.iter().enumerate() {
            let policy = &hook.policy;
            if !Self::selected(&policy.match_constraints, attrs, object, &namespace).await? {
                continue;
            }
            // the param kind is looked up at each request: a custom resource's CRD may be
            // established after the policy was written (or removed since)
            let param_kind = match (&policy.configuration_error, &policy.param_kind) {
                (Some(why), _) => Err(why.clone()),
                (None, None) => Ok(None),
                (None, Some(pk)) => self.params.kind(pk).map(Some).ok_or_else(|| pk.not_found()),
            };
            let param_kind = match param_kind {
                Ok(kind) => kind,
                Err(why) => {
                    denials.extend(Denial::misconfigured(
                        order,
                        policy,
                        None,
                        format!("failed to configure policy: {why}"),
                    ));
                    continue;
                }
            };
            for binding in &hook.bindings {
                if let Some(m) = &binding.match_resources
                    && !Self::selected(m, attrs, object, &namespace).await?
                {
                    continue;
                }
                let params = params::collect(
                    param_kind.as_deref(),
                    binding.param_ref.as_ref(),
                    attrs.namespace,
                    &self.params,
                );
                let params = match (params, param_kind.as_deref()) {
                    (Ok(params), Some(kind)) => self
                        .conversion
                        .to_external_all(kind, params)
                        .await
                        .map_err(|e| e.message),
                    (other, _) => other,
                };
                match params {
                    Ok(params) => applying.push((order, policy, binding, params)),
                    Err(why) => denials.extend(Denial::misconfigured(
                        order,
                        policy,
                        Some(&binding.name),
                        format!("failed to configure binding: {why}"),
                    )),
                }
            }
        }
        if applying.is_empty() {
            return first_refusal(attrs, &denials);
        }
        let mut external = [cel::Value::Null, cel::Value::Null];
        for (slot, o) in external.iter_mut().zip([object, attrs.old]) {
            if let Some(o) = o {
                *slot = expressions::value(&self.conversion.to_external(rt, o.clone()).await?);
            }
        }
        let [object_value, old_value] = external;
        let input = Input {
            object: object_value,
            old_object: old_value,
            request: expressions::value(&webhook::request(
                attrs,
                &uuid::Uuid::new_v4().to_string(),
            )),
            namespace_object: expressions::value(&namespace),
        };
        let mut audit_failure = None;
        let mut annotations: Vec<(String, Vec<String>)> = Vec::new();
        for (order, policy, binding, params) in applying {
            for param in &params {
                let outcome = evaluate::evaluate(policy, &input, param);
                for f in outcome.failures {
                    if binding.actions.warn {
                        attrs.notes.warnings.push(format!(
                            "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {}",
                            policy.name, binding.name, f.message
                        ));
                    }
                    if binding.actions.audit {
                        audit_failure.get_or_insert_with(|| {
                            json!([{"message": f.message, "policy": policy.name,
                                "binding": binding.name, "expressionIndex": f.index,
                                "validationActions": binding.action_names}])
                            .to_string()
                        });
                    }
                    if binding.actions.deny {
                        denials.push(Denial {
                            order,
                            policy: &policy.name,
                            binding: Some(&binding.name),
                            message: f.message,
                            reason: f.reason,
                        });
                    }
                }
                for message in outcome.annotation_errors {
                    denials.push(Denial {
                        order,
                        policy: &policy.name,
                        binding: Some(&binding.name),
                        message,
                        reason: "Invalid",
                    });
                }
                for (key, value) in outcome.annotations {
                    let key = format!("{}/{key}", policy.name);
                    match annotations.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, values)) if values.contains(&value) => {}
                        Some((_, values)) => values.push(value),
                        None => annotations.push((key, vec![value])),
                    }
                }
            }
        }
        for (key, values) in annotations {
            attrs.notes.audit.add(&key, values.join(", "));
        }
        if let Some(failure) = audit_failure {
            attrs.notes.audit.add(
                "validation.policy.admission.k8s.io/validation_failure",
                failure,
            );
        }
        first_refusal(attrs, &denials)
    }
}

#[cfg(test)]
#[path = "validating_policy/tests.rs"]
mod tests;
