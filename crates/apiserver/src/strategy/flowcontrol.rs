//! FlowSchemas and PriorityLevelConfigurations (`flowcontrol.apiserver.k8s.io/v1`): upstream's
//! v1 defaults (`matchingPrecedence` 1000; a limited level's `nominalConcurrencyShares` 30 and
//! an exempt one's 0, `lendablePercent` 0; queuing of 64 queues, hands of 8, 50 per queue) and
//! upstream's validation, messages included: precedences in 1..=10000 (1 only for `exempt`),
//! subjects of a known kind with their member, rules that name verbs, groups, resources and
//! namespaces (or `*` alone), non-resource URLs that start with a slash and glob only at their
//! end, the level types' unions, queuing within shuffle sharding's 60 bits of entropy; and the
//! mandatory objects' specs fixed (but for `exempt`'s `spec.exempt`).

use serde_json::{Value, json};
use skiff_apimachinery::validation::names::{is_dns1123_label, is_dns1123_subdomain};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use super::common::{int, object_at, set_default, str_at, strings};

/// Upstream's `FlowSchemaMaxMatchingPrecedence`.
const MAX_MATCHING_PRECEDENCE: i64 = 10_000;
/// Upstream's limit on a level's queues.
const MAX_QUEUES: i64 = 10_000_000;
/// Bits of a flow's hash that shuffle sharding may use (upstream's `MaxHashBits`).
const MAX_HASH_BITS: f64 = 60.0;
const VERBS: [&str; 9] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "proxy",
    "update",
    "watch",
];

#[derive(Debug)]
pub struct FlowSchemaStrategy;

#[derive(Debug)]
pub struct PriorityLevelStrategy;

/// The bootstrap object of `kind` named `name`, if it is a mandatory one, defaulted as stored.
fn mandatory(kind: &str, name: &str, strategy: &dyn Strategy) -> Option<Value> {
    let mut object = crate::bootstrap::apf::configuration()
        .mandatory
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)?
        .clone();
    strategy.prepare_for_create(&mut object);
    Some(object)
}

impl Strategy for FlowSchemaStrategy {
    fn prepare_for_create(&self, fs: &mut Value) {
        default_flow_schema(fs);
    }

    fn prepare_for_update(&self, fs: &mut Value, _old: &Value) {
        default_flow_schema(fs);
    }

    fn validate(&self, fs: &Value) -> Vec<FieldError> {
        let spec_path = FieldPath::new("spec");
        let spec = &fs["spec"];
        let name = str_at(fs, "/metadata/name");
        let mut errs = Vec::new();
        let precedence_path = spec_path.child("matchingPrecedence");
        let precedence = spec.get("matchingPrecedence").and_then(int).unwrap_or(0);
        if precedence <= 0 {
            errs.push(FieldError::invalid(
                &precedence_path,
                precedence,
                "must be a positive value",
            ));
        }
        if precedence > MAX_MATCHING_PRECEDENCE {
            errs.push(FieldError::invalid(
                &precedence_path,
                precedence,
                format!("must not be greater than {MAX_MATCHING_PRECEDENCE}"),
            ));
        }
        if precedence == 1 && name != "exempt" {
            errs.push(FieldError::invalid(
                &precedence_path,
                precedence,
                "only the schema named 'exempt' may have matchingPrecedence 1",
            ));
        }
        if let Some(method) = spec.get("distinguisherMethod").filter(|m| !m.is_null()) {
            let kind = str_at(method, "/type");
            if !matches!(kind, "ByNamespace" | "ByUser") {
                errs.push(FieldError::not_supported(
                    &spec_path.child("distinguisherMethod").child("type"),
                    kind,
                    &["ByNamespace", "ByUser"],
                ));
            }
        }
        let level_path = spec_path.child("priorityLevelConfiguration").child("name");
        let level = str_at(spec, "/priorityLevelConfiguration/name");
        if level.is_empty() {
            errs.push(FieldError::required(
                &level_path,
                "must reference a priority level",
            ));
        } else {
            for msg in is_dns1123_subdomain(level) {
                errs.push(FieldError::invalid(&level_path, level, msg));
            }
        }
        let rules = spec.get("rules").and_then(Value::as_array);
        for (i, rule) in rules.into_iter().flatten().enumerate() {
            errs.extend(validate_rule(rule, &spec_path.child("rules").index(i)));
        }
        if let Some(fixed) = mandatory("FlowSchema", name, self)
            && fixed["spec"] != *spec
        {
            errs.push(FieldError::invalid(
                &spec_path,
                spec.clone(),
                format!("spec of '{name}' must equal the fixed value"),
            ));
        }
        errs
    }
}

fn default_flow_schema(fs: &mut Value) {
    let spec = object_at(fs, "spec");
    if spec.get("matchingPrecedence").and_then(int).unwrap_or(0) == 0 {
        spec["matchingPrecedence"] = json!(1000);
    }
}

fn validate_rule(rule: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let subjects = rule.get("subjects").and_then(Value::as_array);
    match subjects.filter(|s| !s.is_empty()) {
        Some(subjects) => {
            for (i, subject) in subjects.iter().enumerate() {
                errs.extend(validate_subject(subject, &path.child("subjects").index(i)));
            }
        }
        None => errs.push(FieldError::required(
            &path.child("subjects"),
            "subjects must contain at least one value",
        )),
    }
    let list = |key: &str| rule.get(key).and_then(Value::as_array).cloned();
    let (resource_rules, non_resource_rules) = (
        list("resourceRules").unwrap_or_default(),
        list("nonResourceRules").unwrap_or_default(),
    );
    if resource_rules.is_empty() && non_resource_rules.is_empty() {
        errs.push(FieldError::required(
            path,
            "at least one of resourceRules and nonResourceRules has to be non-empty",
        ));
    }
    for (i, r) in resource_rules.iter().enumerate() {
        errs.extend(validate_resource_rule(
            r,
            &path.child("resourceRules").index(i),
        ));
    }
    for (i, r) in non_resource_rules.iter().enumerate() {
        errs.extend(validate_non_resource_rule(
            r,
            &path.child("nonResourceRules").index(i),
        ));
    }
    errs
}

fn validate_subject(subject: &Value, path: &FieldPath) -> Vec<FieldError> {
    let kind = str_at(subject, "/kind");
    let members = [
        (
            "User",
            "user",
            "user is forbidden when subject kind is not 'User'",
        ),
        (
            "Group",
            "group",
            "group is forbidden when subject kind is not 'Group'",
        ),
        (
            "ServiceAccount",
            "serviceAccount",
            "serviceAccount is forbidden when subject kind is not 'ServiceAccount'",
        ),
    ];
    let Some((_, field, _)) = members.iter().find(|(k, _, _)| *k == kind) else {
        return vec![FieldError::not_supported(
            &path.child("kind"),
            kind,
            &["Group", "ServiceAccount", "User"],
        )];
    };
    let member_path = path.child(*field);
    let mut errs = Vec::new();
    match subject.get(*field).filter(|m| !m.is_null()) {
        None => errs.push(FieldError::required(
            &member_path,
            format!("{field} is required when subject kind is '{kind}'"),
        )),
        Some(member) if kind == "ServiceAccount" => {
            let name = str_at(member, "/name");
            if name.is_empty() {
                errs.push(FieldError::required(&member_path.child("name"), ""));
            } else if name != "*" {
                for msg in is_dns1123_subdomain(name) {
                    errs.push(FieldError::invalid(&member_path.child("name"), name, msg));
                }
            }
            let namespace = str_at(member, "/namespace");
            if namespace.is_empty() {
                errs.push(FieldError::required(
                    &member_path.child("namespace"),
                    "must specify namespace for service account",
                ));
            } else {
                for msg in is_dns1123_label(namespace) {
                    errs.push(FieldError::invalid(
                        &member_path.child("namespace"),
                        namespace,
                        msg,
                    ));
                }
            }
        }
        Some(member) => {
            if str_at(member, "/name").is_empty() {
                errs.push(FieldError::required(&member_path.child("name"), ""));
            }
        }
    }
    for (other_kind, other, forbidden) in members {
        if other_kind != kind && subject.get(other).is_some_and(|m| !m.is_null()) {
            errs.push(FieldError::forbidden(&path.child(other), forbidden));
        }
    }
    errs
}

/// `*` alone, or values without it: upstream's rule for each list of a policy rule.
fn wildcard_alone(
    values: &[&str],
    path: &FieldPath,
    others: &str,
    errs: &mut Vec<FieldError>,
) -> bool {
    if values.contains(&"*") {
        if values.len() > 1 {
            errs.push(FieldError::invalid(
                path,
                json!(values),
                format!("if '*' is present, must not specify other {others}"),
            ));
        }
        return true;
    }
    false
}

fn validate_verbs(rule: &Value, path: &FieldPath, errs: &mut Vec<FieldError>) {
    let verbs = strings(rule.get("verbs"));
    let path = path.child("verbs");
    if verbs.is_empty() {
        errs.push(FieldError::required(
            &path,
            "verbs must contain at least one value",
        ));
    } else if !wildcard_alone(&verbs, &path, "verbs", errs)
        && verbs.iter().any(|v| !VERBS.contains(v))
    {
        errs.push(FieldError::not_supported(&path, json!(verbs), &VERBS));
    }
}

fn validate_resource_rule(rule: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_verbs(rule, path, &mut errs);
    for (key, what, others) in [
        (
            "apiGroups",
            "resource rules must supply at least one api group",
            "api groups",
        ),
        (
            "resources",
            "resource rules must supply at least one resource",
            "resources",
        ),
    ] {
        let values = strings(rule.get(key));
        if values.is_empty() {
            errs.push(FieldError::required(&path.child(key), what));
        } else {
            wildcard_alone(&values, &path.child(key), others, &mut errs);
        }
    }
    let namespaces = strings(rule.get("namespaces"));
    let namespaces_path = path.child("namespaces");
    let cluster_scope = rule.get("clusterScope") == Some(&json!(true));
    if namespaces.is_empty() && !cluster_scope {
        errs.push(FieldError::required(
            &namespaces_path,
            "resource rules that are not cluster scoped must supply at least one namespace",
        ));
    } else if !wildcard_alone(&namespaces, &namespaces_path, "namespaces", &mut errs) {
        for (i, namespace) in namespaces.iter().enumerate() {
            for msg in is_dns1123_label(namespace) {
                errs.push(FieldError::invalid(
                    &namespaces_path.index(i),
                    *namespace,
                    format!("each member of this list must be '*' or a DNS-1123 label; {msg}"),
                ));
            }
        }
    }
    errs
}

fn validate_non_resource_rule(rule: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    validate_verbs(rule, path, &mut errs);
    let urls = strings(rule.get("nonResourceURLs"));
    let urls_path = path.child("nonResourceURLs");
    if urls.is_empty() {
        errs.push(FieldError::required(
            &urls_path,
            "nonResourceURLs must contain at least one value",
        ));
    } else if !wildcard_alone(&urls, &urls_path, "non-resource URLs", &mut errs) {
        for (i, url) in urls.iter().enumerate() {
            if let Some(why) = non_resource_url_problem(url) {
                errs.push(FieldError::invalid(&urls_path.index(i), *url, why));
            }
        }
    }
    errs
}

/// What is wrong with a non-resource URL pattern, as upstream's `ValidateNonResourceURLPath`.
fn non_resource_url_problem(url: &str) -> Option<&'static str> {
    if url.is_empty() {
        return Some("must not be empty");
    }
    if url == "/" {
        return None;
    }
    if !url.starts_with('/') {
        return Some("must start with slash");
    }
    if url.contains(' ') {
        return Some("must not contain white-space");
    }
    if url.contains("//") {
        return Some("must not contain double slash");
    }
    let wildcards = url.matches('*').count();
    if wildcards > 1 || (wildcards == 1 && !url.ends_with("/*")) {
        return Some("wildcard can only do suffix matching");
    }
    None
}

impl Strategy for PriorityLevelStrategy {
    fn prepare_for_create(&self, pl: &mut Value) {
        default_priority_level(pl);
    }

    fn prepare_for_update(&self, pl: &mut Value, _old: &Value) {
        default_priority_level(pl);
    }

    fn validate(&self, pl: &Value) -> Vec<FieldError> {
        let spec_path = FieldPath::new("spec");
        let spec = &pl["spec"];
        let name = str_at(pl, "/metadata/name");
        let kind = str_at(spec, "/type");
        let mut errs = Vec::new();
        if (name == "exempt") != (kind == "Exempt") {
            errs.push(FieldError::invalid(
                &spec_path.child("type"),
                kind,
                "type must be 'Exempt' if and only if name is 'exempt'",
            ));
        }
        let present = |key: &str| spec.get(key).is_some_and(|v| !v.is_null());
        match kind {
            "Exempt" => {
                if present("limited") {
                    errs.push(FieldError::forbidden(
                        &spec_path.child("limited"),
                        "must be nil if the type is not Limited",
                    ));
                }
                if present("exempt") {
                    errs.extend(validate_shares(&spec["exempt"], &spec_path.child("exempt")));
                }
            }
            "Limited" => {
                if present("exempt") {
                    errs.push(FieldError::forbidden(
                        &spec_path.child("exempt"),
                        "must be nil if the type is Limited",
                    ));
                }
                if present("limited") {
                    errs.extend(validate_limited(
                        &spec["limited"],
                        &spec_path.child("limited"),
                    ));
                } else {
                    errs.push(FieldError::required(
                        &spec_path.child("limited"),
                        "must not be empty when type is Limited",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                &spec_path.child("type"),
                other,
                &["Exempt", "Limited"],
            )),
        }
        if let Some(mut fixed) = mandatory("PriorityLevelConfiguration", name, self) {
            // `exempt`'s own settings are the one part of a mandatory spec that may change
            let mut spec = spec.clone();
            if name == "exempt" {
                for s in [&mut spec, &mut fixed["spec"]] {
                    if let Some(m) = s.as_object_mut() {
                        m.remove("exempt");
                    }
                }
            }
            if fixed["spec"] != spec {
                let detail = if name == "exempt" {
                    format!(
                        "spec of '{name}' except the 'spec.exempt' field must equal the fixed value"
                    )
                } else {
                    format!("spec of '{name}' must equal the fixed value")
                };
                errs.push(FieldError::invalid(&spec_path, pl["spec"].clone(), detail));
            }
        }
        errs
    }
}

fn default_priority_level(pl: &mut Value) {
    let spec = object_at(pl, "spec");
    match str_at(spec, "/type") {
        "Exempt" => {
            let exempt = object_at(spec, "exempt");
            set_default(exempt, "nominalConcurrencyShares", json!(0));
            set_default(exempt, "lendablePercent", json!(0));
        }
        "Limited" if spec.get("limited").is_some_and(Value::is_object) => {
            let limited = object_at(spec, "limited");
            set_default(limited, "nominalConcurrencyShares", json!(30));
            set_default(limited, "lendablePercent", json!(0));
            let response = object_at(limited, "limitResponse");
            if let Some(queuing) = response.get_mut("queuing").filter(|q| q.is_object()) {
                for (key, default) in [("queues", 64), ("handSize", 8), ("queueLengthLimit", 50)] {
                    if queuing.get(key).and_then(int).unwrap_or(0) == 0 {
                        queuing[key] = json!(default);
                    }
                }
            }
        }
        _ => {}
    }
}

/// `nominalConcurrencyShares` and `lendablePercent`, which both level types have.
fn validate_shares(settings: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(shares) = settings.get("nominalConcurrencyShares").and_then(int)
        && shares < 0
    {
        errs.push(FieldError::invalid(
            &path.child("nominalConcurrencyShares"),
            shares,
            "must be a non-negative integer",
        ));
    }
    if let Some(percent) = settings.get("lendablePercent").and_then(int)
        && !(0..=100).contains(&percent)
    {
        errs.push(FieldError::invalid(
            &path.child("lendablePercent"),
            percent,
            "must be between 0 and 100, inclusive",
        ));
    }
    errs
}

fn validate_limited(limited: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = validate_shares(limited, path);
    if let Some(percent) = limited.get("borrowingLimitPercent").and_then(int)
        && percent < 0
    {
        errs.push(FieldError::invalid(
            &path.child("borrowingLimitPercent"),
            percent,
            "if specified, must be a non-negative integer",
        ));
    }
    let response = &limited["limitResponse"];
    let response_path = path.child("limitResponse");
    let queuing = response.get("queuing").filter(|q| !q.is_null());
    match str_at(response, "/type") {
        "Reject" => {
            if queuing.is_some() {
                errs.push(FieldError::forbidden(
                    &response_path.child("queuing"),
                    "must be nil if limited.limitResponse.type is not Limited",
                ));
            }
        }
        "Queue" => match queuing {
            Some(queuing) => {
                errs.extend(validate_queuing(queuing, &response_path.child("queuing")))
            }
            None => errs.push(FieldError::required(
                &response_path.child("queuing"),
                "must not be empty if limited.limitResponse.type is Limited",
            )),
        },
        other => errs.push(FieldError::not_supported(
            &response_path.child("type"),
            other,
            &["Queue", "Reject"],
        )),
    }
    errs
}

fn validate_queuing(queuing: &Value, path: &FieldPath) -> Vec<FieldError> {
    let get = |key: &str| queuing.get(key).and_then(int).unwrap_or(0);
    let (queues, hand_size, limit) = (get("queues"), get("handSize"), get("queueLengthLimit"));
    let mut errs = Vec::new();
    if limit <= 0 {
        errs.push(FieldError::invalid(
            &path.child("queueLengthLimit"),
            limit,
            "must be positive",
        ));
    }
    if queues <= 0 {
        errs.push(FieldError::invalid(
            &path.child("queues"),
            queues,
            "must be positive",
        ));
    } else if queues > MAX_QUEUES {
        errs.push(FieldError::invalid(
            &path.child("queues"),
            queues,
            format!("must not be greater than {MAX_QUEUES}"),
        ));
    }
    let hand_path = path.child("handSize");
    if hand_size <= 0 {
        errs.push(FieldError::invalid(
            &hand_path,
            hand_size,
            "must be positive",
        ));
    } else if hand_size > queues {
        errs.push(FieldError::invalid(
            &hand_path,
            hand_size,
            format!("should not be greater than queues ({queues})"),
        ));
    } else if entropy_bits(queues, hand_size) > MAX_HASH_BITS {
        errs.push(FieldError::invalid(
            &hand_path,
            hand_size,
            format!(
                "required entropy bits of deckSize {queues} and handSize {hand_size} should not be greater than {MAX_HASH_BITS}"
            ),
        ));
    }
    errs
}

/// The hash bits dealing a hand of `hand_size` from `deck` queues takes (upstream's
/// `RequiredEntropyBits`).
fn entropy_bits(deck: i64, hand_size: i64) -> f64 {
    ((deck as f64).log2() * hand_size as f64).ceil()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(errs: Vec<FieldError>) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn fs(name: &str, spec: Value) -> Value {
        let mut fs = json!({"kind": "FlowSchema", "metadata": {"name": name}, "spec": spec});
        FlowSchemaStrategy.prepare_for_create(&mut fs);
        fs
    }

    fn pl(name: &str, spec: Value) -> Value {
        let mut pl = json!({"kind": "PriorityLevelConfiguration", "metadata": {"name": name},
                            "spec": spec});
        PriorityLevelStrategy.prepare_for_create(&mut pl);
        pl
    }

    #[test]
    fn the_bootstrap_objects_are_valid() {
        let c = crate::bootstrap::apf::configuration();
        for o in c.mandatory.iter().chain(&c.suggested) {
            let mut o = o.clone();
            let strategy: &dyn Strategy = if o["kind"] == "FlowSchema" {
                &FlowSchemaStrategy
            } else {
                &PriorityLevelStrategy
            };
            let written = o.clone();
            strategy.prepare_for_create(&mut o);
            // already defaulted: the stored objects are what the file says
            assert_eq!(o, written);
            assert_eq!(errors(strategy.validate(&o)), Vec::<String>::new(), "{o}");
        }
    }

    #[test]
    fn defaults_are_upstreams() {
        let f = fs("a", json!({"priorityLevelConfiguration": {"name": "x"}}));
        assert_eq!(f["spec"]["matchingPrecedence"], 1000);
        let limited = pl(
            "a",
            json!({"type": "Limited", "limited": {"limitResponse": {"type": "Queue",
                                                                      "queuing": {}}}}),
        );
        assert_eq!(
            limited["spec"]["limited"],
            json!({"nominalConcurrencyShares": 30, "lendablePercent": 0,
                   "limitResponse": {"type": "Queue", "queuing":
                       {"queues": 64, "handSize": 8, "queueLengthLimit": 50}}})
        );
        let exempt = pl("exempt", json!({"type": "Exempt"}));
        assert_eq!(
            exempt["spec"]["exempt"],
            json!({"nominalConcurrencyShares": 0, "lendablePercent": 0})
        );
    }

    #[test]
    fn flow_schemas_are_validated_as_upstream() {
        let bad = fs(
            "bad",
            json!({"matchingPrecedence": 1, "distinguisherMethod": {"type": "ByColour"},
                "priorityLevelConfiguration": {"name": ""},
                "rules": [
                    {"subjects": []},
                    {"subjects": [{"kind": "User", "group": {"name": "g"}},
                                  {"kind": "Robot"},
                                  {"kind": "ServiceAccount", "serviceAccount": {"name": "*"}}],
                     "resourceRules": [{"verbs": ["*", "get"], "apiGroups": [],
                                        "resources": ["pods"]}],
                     "nonResourceRules": [{"verbs": ["fly"],
                                           "nonResourceURLs": ["healthz", "/a/*/b"]}]}]}),
        );
        assert_eq!(
            errors(FlowSchemaStrategy.validate(&bad)),
            [
                "spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1",
                "spec.distinguisherMethod.type: Unsupported value: \"ByColour\": supported values: \"ByNamespace\", \"ByUser\"",
                "spec.priorityLevelConfiguration.name: Required value: must reference a priority level",
                "spec.rules[0].subjects: Required value: subjects must contain at least one value",
                "spec.rules[0]: Required value: at least one of resourceRules and nonResourceRules has to be non-empty",
                "spec.rules[1].subjects[0].user: Required value: user is required when subject kind is 'User'",
                "spec.rules[1].subjects[0].group: Forbidden: group is forbidden when subject kind is not 'Group'",
                "spec.rules[1].subjects[1].kind: Unsupported value: \"Robot\": supported values: \"Group\", \"ServiceAccount\", \"User\"",
                "spec.rules[1].subjects[2].serviceAccount.namespace: Required value: must specify namespace for service account",
                "spec.rules[1].resourceRules[0].verbs: Invalid value: [\"*\",\"get\"]: if '*' is present, must not specify other verbs",
                "spec.rules[1].resourceRules[0].apiGroups: Required value: resource rules must supply at least one api group",
                "spec.rules[1].resourceRules[0].namespaces: Required value: resource rules that are not cluster scoped must supply at least one namespace",
                "spec.rules[1].nonResourceRules[0].verbs: Unsupported value: [\"fly\"]: supported values: \"create\", \"delete\", \"deletecollection\", \"get\", \"list\", \"patch\", \"proxy\", \"update\", \"watch\"",
                "spec.rules[1].nonResourceRules[0].nonResourceURLs[0]: Invalid value: \"healthz\": must start with slash",
                "spec.rules[1].nonResourceRules[0].nonResourceURLs[1]: Invalid value: \"/a/*/b\": wildcard can only do suffix matching",
            ]
        );
        let fine = fs(
            "fine",
            json!({"priorityLevelConfiguration": {"name": "workload-low"},
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [{"kind": "Group", "group": {"name": "devs"}}],
                           "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                              "resources": ["*"], "clusterScope": true}],
                           "nonResourceRules": [{"verbs": ["get"],
                                                 "nonResourceURLs": ["/", "/metrics/*"]}]}]}),
        );
        assert!(FlowSchemaStrategy.validate(&fine).is_empty());
        // a mandatory FlowSchema's spec is fixed
        let mut catch_all = mandatory("FlowSchema", "catch-all", &FlowSchemaStrategy).unwrap();
        assert!(FlowSchemaStrategy.validate(&catch_all).is_empty());
        catch_all["spec"]["matchingPrecedence"] = json!(9000);
        let errs = errors(FlowSchemaStrategy.validate(&catch_all));
        assert!(
            errs[0].ends_with("spec of 'catch-all' must equal the fixed value"),
            "{errs:?}"
        );
    }

    #[test]
    fn priority_levels_are_validated_as_upstream() {
        let bad = pl(
            "bad",
            json!({"type": "Limited", "exempt": {},
                "limited": {"nominalConcurrencyShares": -1, "lendablePercent": 101,
                    "borrowingLimitPercent": -5,
                    "limitResponse": {"type": "Queue",
                        "queuing": {"queues": 128, "handSize": 9, "queueLengthLimit": -1}}}}),
        );
        assert_eq!(
            errors(PriorityLevelStrategy.validate(&bad)),
            [
                "spec.exempt: Forbidden: must be nil if the type is Limited",
                "spec.limited.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer",
                "spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive",
                "spec.limited.borrowingLimitPercent: Invalid value: -5: if specified, must be a non-negative integer",
                "spec.limited.limitResponse.queuing.queueLengthLimit: Invalid value: -1: must be positive",
                "spec.limited.limitResponse.queuing.handSize: Invalid value: 9: required entropy bits of deckSize 128 and handSize 9 should not be greater than 60",
            ]
        );
        let cases = [
            (
                pl("exempt-ish", json!({"type": "Exempt"})),
                "spec.type: Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'",
            ),
            (
                pl("a", json!({"type": "Limited"})),
                "spec.limited: Required value: must not be empty when type is Limited",
            ),
            (
                pl("a", json!({"type": "Sometimes"})),
                "spec.type: Unsupported value: \"Sometimes\": supported values: \"Exempt\", \"Limited\"",
            ),
            (
                pl(
                    "a",
                    json!({"type": "Limited", "limited": {"limitResponse":
                        {"type": "Reject", "queuing": {"queues": 1}}}}),
                ),
                "spec.limited.limitResponse.queuing: Forbidden: must be nil if limited.limitResponse.type is not Limited",
            ),
            (
                pl(
                    "a",
                    json!({"type": "Limited", "limited": {"limitResponse":
                        {"type": "Queue", "queuing": {"queues": 4, "handSize": 5}}}}),
                ),
                "spec.limited.limitResponse.queuing.handSize: Invalid value: 5: should not be greater than queues (4)",
            ),
        ];
        for (object, want) in cases {
            assert_eq!(
                errors(PriorityLevelStrategy.validate(&object)),
                [want],
                "{object}"
            );
        }
        // the exempt level's own settings may change, nothing else of a mandatory level
        let mut exempt = mandatory(
            "PriorityLevelConfiguration",
            "exempt",
            &PriorityLevelStrategy,
        )
        .unwrap();
        exempt["spec"]["exempt"]["nominalConcurrencyShares"] = json!(10);
        assert!(PriorityLevelStrategy.validate(&exempt).is_empty());
        let mut catch_all = mandatory(
            "PriorityLevelConfiguration",
            "catch-all",
            &PriorityLevelStrategy,
        )
        .unwrap();
        catch_all["spec"]["limited"]["nominalConcurrencyShares"] = json!(50);
        let errs = errors(PriorityLevelStrategy.validate(&catch_all));
        assert!(
            errs[0].ends_with("spec of 'catch-all' must equal the fixed value"),
            "{errs:?}"
        );
    }
}
