//! Policies and bindings as the plugin uses them: parsed once, expressions compiled, match
//! resources with their selectors, the param kind named (resolved against the served types at
//! each request, as a custom resource's may come and go); and the set of them from the watch
//! cache, parsed again only when a policy or binding changed.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use skiff_apimachinery::catalog::{self, ResourceType};
use skiff_apimachinery::labels::Selector;

use crate::admission::expressions::{self, Program};
use crate::admission::webhook::Rule;
use crate::admission::{Attributes, webhook};
use crate::cache::Cacher;

/// An expression with its source (upstream's messages quote it).
#[derive(Debug, Clone)]
pub struct Expression {
    pub source: String,
    pub program: Arc<Program>,
}

impl Expression {
    fn compile(source: &str) -> Result<Expression, String> {
        Ok(Expression {
            source: source.to_string(),
            program: Arc::new(expressions::compile(source)?),
        })
    }
}

/// A resource rule with the names it is limited to (`resourceNames`, empty for all).
#[derive(Debug, Clone)]
pub struct NamedRule {
    pub rule: Rule,
    pub names: Vec<String>,
}

/// `matchConstraints` of a policy, `matchResources` of a binding.
#[derive(Debug, Clone)]
pub struct MatchResources {
    pub namespace_selector: Selector,
    pub object_selector: Selector,
    /// Empty in a binding: everything its policy matches.
    pub rules: Vec<NamedRule>,
    pub exclude: Vec<NamedRule>,
}

fn named_rules(v: &Value) -> Vec<NamedRule> {
    let strings = |v: &Value| -> Vec<String> {
        crate::strategy::common::strings(Some(v))
            .into_iter()
            .map(str::to_string)
            .collect()
    };
    v.as_array()
        .into_iter()
        .flatten()
        .map(|r| NamedRule {
            rule: Rule {
                operations: strings(&r["operations"]),
                groups: strings(&r["apiGroups"]),
                versions: strings(&r["apiVersions"]),
                resources: strings(&r["resources"]),
                scope: r["scope"].as_str().unwrap_or("*").to_string(),
            },
            names: strings(&r["resourceNames"]),
        })
        .collect()
}

fn selector(v: &Value) -> Selector {
    if v.is_null() {
        return Selector::everything();
    }
    Selector::from_label_selector(v).unwrap_or_else(|_| Selector::nothing())
}

impl MatchResources {
    fn parse(v: &Value) -> MatchResources {
        MatchResources {
            namespace_selector: selector(&v["namespaceSelector"]),
            object_selector: selector(&v["objectSelector"]),
            rules: named_rules(&v["resourceRules"]),
            exclude: named_rules(&v["excludeResourceRules"]),
        }
    }

    /// Whether the request's resource, operation and name are covered: not excluded, and
    /// matched by a rule (any, when there are none). The selectors are checked apart, as they
    /// need the namespace.
    pub fn covers(&self, attrs: &Attributes<'_>) -> bool {
        let hit = |r: &NamedRule| {
            webhook::rule_matches(&r.rule, attrs)
                && (r.names.is_empty() || r.names.iter().any(|n| n == attrs.name))
        };
        !self.exclude.iter().any(hit) && (self.rules.is_empty() || self.rules.iter().any(hit))
    }
}

/// One validation of a policy.
#[derive(Debug, Clone)]
pub struct Validation {
    pub expression: Expression,
    pub message: String,
    pub message_expression: Option<Expression>,
    /// Upstream's `reason`, `Invalid` when unset.
    pub reason: &'static str,
}

/// A policy's `paramKind`, as written: resolved against the types served when a request is
/// admitted ([`super::params::ParamSource::kind`]), since a custom resource's CRD may be
/// established after the policy is written, or removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamKind {
    pub api_version: String,
    pub kind: String,
}

impl ParamKind {
    /// Upstream's configuration error for a kind not served (the Go `GroupVersionKind`
    /// format, `example.com/v1, Kind=Widget`; the core group is empty, `/v1, Kind=ConfigMap`).
    pub fn not_found(&self) -> String {
        let (group, version) = self
            .api_version
            .split_once('/')
            .unwrap_or(("", &self.api_version));
        format!(
            "failed to find resource referenced by paramKind: '{group}/{version}, Kind={}'",
            self.kind
        )
    }
}

/// A parsed ValidatingAdmissionPolicy.
#[derive(Debug, Clone)]
pub struct Policy {
    pub name: String,
    /// `failurePolicy: Ignore`: errors admit (the default, Fail, refuses).
    pub fail_open: bool,
    /// The kind `paramKind` names, if any.
    pub param_kind: Option<ParamKind>,
    pub match_constraints: MatchResources,
    pub match_conditions: Vec<(String, Arc<Program>)>,
    pub variables: Vec<(String, Expression)>,
    pub validations: Vec<Validation>,
    pub audit_annotations: Vec<(String, Expression)>,
    /// Why the policy cannot be evaluated (an expression stored before it compiled): requests
    /// it matches meet the failure policy, as they do while its param kind is not served.
    pub configuration_error: Option<String>,
}

/// What a binding does with a failed validation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Actions {
    pub deny: bool,
    pub warn: bool,
    pub audit: bool,
}

/// A binding's `paramRef`.
#[derive(Debug, Clone)]
pub struct ParamRef {
    /// `name` (`None`: `selector`).
    pub name: Option<String>,
    pub namespace: String,
    pub selector: Selector,
    /// `parameterNotFoundAction: Deny`.
    pub deny_when_missing: bool,
}

/// A parsed ValidatingAdmissionPolicyBinding.
#[derive(Debug, Clone)]
pub struct Binding {
    pub name: String,
    pub param_ref: Option<ParamRef>,
    pub match_resources: Option<MatchResources>,
    pub actions: Actions,
    /// `validationActions` as written, for audit annotations.
    pub action_names: Vec<String>,
}

/// A policy and the bindings that name it, in name order.
#[derive(Debug, Clone)]
pub struct Hook {
    pub policy: Policy,
    pub bindings: Vec<Binding>,
}

fn compile_all<T>(
    v: &Value,
    errors: &mut Vec<String>,
    mut each: impl FnMut(&Value) -> Result<Option<T>, String>,
) -> Vec<T> {
    let mut out = Vec::new();
    for item in v.as_array().into_iter().flatten() {
        match each(item) {
            Ok(Some(t)) => out.push(t),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    out
}

impl Policy {
    pub fn parse(policy: &Value) -> Policy {
        let spec = &policy["spec"];
        let mut errors = Vec::new();
        let param_kind = spec
            .get("paramKind")
            .filter(|p| !p.is_null())
            .map(|pk| ParamKind {
                api_version: pk["apiVersion"].as_str().unwrap_or("").to_string(),
                kind: pk["kind"].as_str().unwrap_or("").to_string(),
            });
        let text = |v: &Value, field: &str| v[field].as_str().unwrap_or("").to_string();
        let match_conditions = compile_all(&spec["matchConditions"], &mut errors, |c| {
            let e = Expression::compile(c["expression"].as_str().unwrap_or(""))?;
            Ok(Some((text(c, "name"), e.program)))
        });
        let variables = compile_all(&spec["variables"], &mut errors, |v| {
            let e = Expression::compile(v["expression"].as_str().unwrap_or(""))?;
            Ok(Some((text(v, "name"), e)))
        });
        let validations = compile_all(&spec["validations"], &mut errors, |v| {
            let message_expression = match v["messageExpression"].as_str() {
                Some(m) if !m.trim().is_empty() => Some(Expression::compile(m)?),
                _ => None,
            };
            let reason = v["reason"].as_str().unwrap_or("Invalid");
            Ok(Some(Validation {
                expression: Expression::compile(v["expression"].as_str().unwrap_or(""))?,
                message: text(v, "message"),
                message_expression,
                reason: crate::strategy::admissionpolicy::REASONS
                    .iter()
                    .find(|r| **r == reason)
                    .copied()
                    .unwrap_or("Invalid"),
            }))
        });
        let audit_annotations = compile_all(&spec["auditAnnotations"], &mut errors, |a| {
            let e = Expression::compile(a["valueExpression"].as_str().unwrap_or(""))?;
            Ok(Some((text(a, "key"), e)))
        });
        Policy {
            name: text(&policy["metadata"], "name"),
            fail_open: spec["failurePolicy"] == "Ignore",
            param_kind,
            match_constraints: MatchResources::parse(&spec["matchConstraints"]),
            match_conditions,
            variables,
            validations,
            audit_annotations,
            configuration_error: errors.into_iter().next(),
        }
    }
}

impl Binding {
    pub fn parse(binding: &Value) -> Binding {
        let spec = &binding["spec"];
        let action_names: Vec<String> =
            crate::strategy::common::strings(Some(&spec["validationActions"]))
                .into_iter()
                .map(str::to_string)
                .collect();
        let has = |a: &str| action_names.iter().any(|n| n == a);
        Binding {
            name: binding["metadata"]["name"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            param_ref: spec
                .get("paramRef")
                .filter(|r| r.is_object())
                .map(|r| ParamRef {
                    name: r["name"]
                        .as_str()
                        .filter(|n| !n.is_empty())
                        .map(str::to_string),
                    namespace: r["namespace"].as_str().unwrap_or("").to_string(),
                    selector: selector(&r["selector"]),
                    deny_when_missing: r["parameterNotFoundAction"] == "Deny",
                }),
            match_resources: spec
                .get("matchResources")
                .filter(|m| m.is_object())
                .map(MatchResources::parse),
            actions: Actions {
                deny: has("Deny"),
                warn: has("Warn"),
                audit: has("Audit"),
            },
            action_names,
        }
    }
}

/// Pairs policies with the bindings naming them; bindings of a missing policy are ignored, as
/// upstream.
pub fn hooks(policies: &[Value], bindings: &[Value]) -> Vec<Hook> {
    let mut hooks: Vec<Hook> = policies
        .iter()
        .map(|p| Hook {
            policy: Policy::parse(p),
            bindings: Vec::new(),
        })
        .collect();
    hooks.sort_by(|a, b| a.policy.name.cmp(&b.policy.name));
    let mut bindings: Vec<&Value> = bindings.iter().collect();
    bindings.sort_by_key(|b| b["metadata"]["name"].as_str().unwrap_or(""));
    for b in bindings {
        let policy = b["spec"]["policyName"].as_str().unwrap_or("");
        if let Some(hook) = hooks.iter_mut().find(|h| h.policy.name == policy) {
            hook.bindings.push(Binding::parse(b));
        }
    }
    hooks.retain(|h| !h.bindings.is_empty());
    hooks
}

/// The policies in force, with their bindings.
pub trait Policies: Send + Sync {
    fn hooks(&self) -> Arc<Vec<Hook>>;
}

/// Policies and bindings from the watch cache, parsed again only when either changed.
pub struct CachedPolicies {
    cache: Arc<Cacher>,
    policies: &'static ResourceType,
    bindings: &'static ResourceType,
    /// A plain mutex: held only to swap the Arc, never across an await.
    parsed: Mutex<Parsed>,
}

/// The hooks parsed at the last changes of policies and of bindings.
struct Parsed {
    changed: (i64, i64),
    hooks: Arc<Vec<Hook>>,
}

impl CachedPolicies {
    pub fn new(cache: Arc<Cacher>) -> CachedPolicies {
        let rt = |plural| {
            catalog::lookup("admissionregistration.k8s.io", "v1", plural)
                .expect("admission policies are in the catalog")
        };
        CachedPolicies {
            cache,
            policies: rt("validatingadmissionpolicies"),
            bindings: rt("validatingadmissionpolicybindings"),
            parsed: Mutex::new(Parsed {
                changed: (-1, -1),
                hooks: Arc::default(),
            }),
        }
    }
}

impl Policies for CachedPolicies {
    fn hooks(&self) -> Arc<Vec<Hook>> {
        let (policies, bindings) = (
            self.cache.resource(self.policies),
            self.cache.resource(self.bindings),
        );
        let changed = (policies.last_change(), bindings.last_change());
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        if parsed.changed != changed {
            let objects = |r: &crate::cache::ResourceCache| -> Vec<Value> {
                r.list("")
                    .objects
                    .iter()
                    .filter_map(|o| o.object().ok())
                    .collect()
            };
            *parsed = Parsed {
                changed,
                hooks: Arc::new(hooks(&objects(&policies), &objects(&bindings))),
            };
        }
        parsed.hooks.clone()
    }
}
