//! Jobs: upstream's defaults (`SetDefaults_Job`: completions and parallelism, backoffLimit 6,
//! NonIndexed, not suspended, the pod replacement policy, labels copied from the template), the
//! generated selector and pod labels of `generateSelector` (unless `manualSelector`),
//! `ValidateJob` with `validateJobSpec` (shared with CronJob templates), the update rules
//! (immutable selector, template, completion mode; elastic Indexed completions; scheduling
//! directives of suspended, never-started Jobs), and the `status.successful` field selector.

use serde_json::{Value, json};
use skiff_apimachinery::validation::{self, FieldError, FieldPath};

use super::Strategy;
use super::common::{
    as_selector, default_template, immutable, int, int_at, nonnegative, object_at, semantic_eq,
    set_default, str_at, template_labels, validate_template,
};
use super::generic::settle_generation;

/// The generated pod labels and selector key (`batch.kubernetes.io/…`) and their legacy forms.
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
pub const LEGACY_CONTROLLER_UID: &str = "controller-uid";
pub const LEGACY_JOB_NAME: &str = "job-name";

/// Upstream's limit on parallelism of Indexed Jobs.
const MAX_INDEXED_PARALLELISM: i64 = 100_000;

#[derive(Debug)]
pub struct JobStrategy;

/// A Job without labels takes its template's, as `SetDefaults_Job` does on every decode.
fn copy_template_labels(job: &mut Value) {
    let labels = template_labels(job.get("spec").and_then(|s| s.get("template")));
    let unlabeled = job
        .pointer("/metadata/labels")
        .is_none_or(|l| l.as_object().is_none_or(|m| m.is_empty()));
    if labels.is_object() && unlabeled {
        object_at(job, "metadata")["labels"] = labels;
    }
}

fn defaults(job: &mut Value) {
    let spec = object_at(job, "spec");
    let unset = |s: &Value, k: &str| s.get(k).is_none_or(Value::is_null);
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec["completions"] = json!(1);
    }
    set_default(spec, "parallelism", json!(1));
    let backoff = if unset(spec, "backoffLimitPerIndex") {
        6
    } else {
        i64::from(i32::MAX)
    };
    set_default(spec, "backoffLimit", json!(backoff));
    set_default(spec, "completionMode", json!("NonIndexed"));
    set_default(spec, "suspend", json!(false));
    let has_failure_policy = !unset(spec, "podFailurePolicy");
    let replacement = if has_failure_policy {
        "Failed"
    } else {
        "TerminatingOrFailed"
    };
    set_default(spec, "podReplacementPolicy", json!(replacement));
    let rules = spec
        .pointer_mut("/podFailurePolicy/rules")
        .and_then(Value::as_array_mut);
    for rule in rules.into_iter().flatten() {
        let patterns = rule
            .get_mut("onPodConditions")
            .and_then(Value::as_array_mut);
        for pattern in patterns.into_iter().flatten() {
            set_default(pattern, "status", json!("True"));
        }
    }
    let template = object_at(spec, "template");
    object_at(template, "spec");
    default_template(Some(template));
    copy_template_labels(job);
}

/// Upstream's `generateSelector`: pod labels naming the Job and its uid (kept if the user set
/// them; validation then catches conflicts) and a selector on the uid.
fn generate_selector(job: &mut Value) {
    let name = str_at(job, "/metadata/name").to_string();
    let uid = str_at(job, "/metadata/uid").to_string();
    let spec = object_at(job, "spec");
    let labels = object_at(object_at(object_at(spec, "template"), "metadata"), "labels");
    for (key, value) in [
        (LEGACY_JOB_NAME, &name),
        (JOB_NAME, &name),
        (LEGACY_CONTROLLER_UID, &uid),
        (CONTROLLER_UID, &uid),
    ] {
        set_default(labels, key, json!(value));
    }
    let match_labels = object_at(object_at(spec, "selector"), "matchLabels");
    set_default(match_labels, CONTROLLER_UID, json!(uid));
}

fn manual_selector(job: &Value) -> bool {
    job.pointer("/spec/manualSelector") == Some(&json!(true))
}

/// Upstream's `validateJobSpec`: counts, completion mode, replacement policy and the template,
/// whose pods must restart `OnFailure` or `Never`.
pub fn validate_job_spec(spec: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for field in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ] {
        errs.extend(nonnegative(spec.get(field), &path.child(field)));
    }
    let set = |k: &str| spec.get(k).filter(|v| !v.is_null());
    if set("maxFailedIndexes").is_some() && set("backoffLimitPerIndex").is_none() {
        errs.push(FieldError::required(
            &path.child("backoffLimitPerIndex"),
            "when maxFailedIndexes is specified",
        ));
    }
    let mode = set("completionMode").and_then(Value::as_str);
    match mode {
        None | Some("NonIndexed") => {
            for field in ["backoffLimitPerIndex", "maxFailedIndexes"] {
                if let Some(v) = set(field) {
                    errs.push(FieldError::invalid(
                        &path.child(field),
                        v.clone(),
                        "requires indexed completion mode",
                    ));
                }
            }
        }
        Some("Indexed") => {
            if set("completions").is_none() {
                errs.push(FieldError::required(
                    &path.child("completions"),
                    "when completion mode is Indexed",
                ));
            }
            if let Some(p) = set("parallelism").and_then(int)
                && p > MAX_INDEXED_PARALLELISM
            {
                errs.push(FieldError::invalid(
                    &path.child("parallelism"),
                    p,
                    format!(
                        "must be less than or equal to {MAX_INDEXED_PARALLELISM} when completion \
                         mode is Indexed"
                    ),
                ));
            }
        }
        Some(other) => errs.push(FieldError::not_supported(
            &path.child("completionMode"),
            other,
            &["NonIndexed", "Indexed"],
        )),
    }
    let failure_policy = set("podFailurePolicy").is_some();
    if let Some(policy) = set("podReplacementPolicy").and_then(Value::as_str) {
        let allowed: &[&str] = if failure_policy {
            &["Failed"]
        } else {
            &["Failed", "TerminatingOrFailed"]
        };
        if !allowed.contains(&policy) {
            errs.push(FieldError::not_supported(
                &path.child("podReplacementPolicy"),
                policy,
                allowed,
            ));
        }
    }
    let template_path = path.child("template");
    let template = spec.get("template").unwrap_or(&Value::Null);
    errs.extend(validate_template(template, &template_path));
    let restart_path = template_path.child("spec").child("restartPolicy");
    let restart = str_at(template, "/spec/restartPolicy");
    if !matches!(restart, "OnFailure" | "Never") {
        errs.push(FieldError::not_supported(
            &restart_path,
            restart,
            &["OnFailure", "Never"],
        ));
    } else if restart == "OnFailure" && failure_policy {
        errs.push(FieldError::invalid(
            &restart_path,
            restart,
            "only \"Never\" is supported when podFailurePolicy is specified",
        ));
    }
    errs
}

/// Upstream's `ValidateGeneratedSelector` (`prefixed`: also the `batch.kubernetes.io` labels).
fn validate_generated_selector(job: &Value, prefixed: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let selector = job.pointer("/spec/selector").filter(|s| !s.is_null());
    if manual_selector(job) || selector.is_none() {
        return errs;
    }
    let (name, uid) = (str_at(job, "/metadata/name"), str_at(job, "/metadata/uid"));
    if uid.is_empty() {
        errs.push(FieldError::required(
            &FieldPath::new("metadata").child("uid"),
            "",
        ));
    }
    let meta_path = FieldPath::new("spec").child("template").child("metadata");
    let labels = job
        .pointer("/spec/template/metadata/labels")
        .cloned()
        .unwrap_or(Value::Null);
    let mut expected = vec![(LEGACY_CONTROLLER_UID, uid), (LEGACY_JOB_NAME, name)];
    if prefixed {
        expected.extend([(CONTROLLER_UID, uid), (JOB_NAME, name)]);
    }
    for (key, want) in &expected {
        let path = meta_path.child("labels").key(*key);
        match labels.get(*key).and_then(Value::as_str) {
            None => errs.push(FieldError::required(&path, "")),
            Some(v) if v != *want => errs.push(FieldError::invalid(
                &path,
                labels.clone(),
                format!("must be '{want}'"),
            )),
            Some(_) => {}
        }
    }
    let wanted = json!(
        expected[expected.len() - 2..]
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
    );
    if let Some(sel) = as_selector(selector)
        && !sel.matches(&wanted)
    {
        errs.push(FieldError::invalid(
            &FieldPath::new("spec").child("selector"),
            selector.cloned().unwrap_or(Value::Null),
            "`selector` not auto-generated",
        ));
    }
    errs
}

/// Upstream's `ValidateJob`.
fn validate_job(job: &Value, prefixed: bool) -> Vec<FieldError> {
    let mut errs = validate_generated_selector(job, prefixed);
    let null = Value::Null;
    let spec = job.get("spec").unwrap_or(&null);
    let path = FieldPath::new("spec");
    errs.extend(validate_job_spec(spec, &path));
    let sel_path = path.child("selector");
    let raw = spec.get("selector").filter(|s| !s.is_null());
    match raw {
        None => errs.push(FieldError::required(&sel_path, "")),
        Some(sel) => errs.extend(validation::validate_label_selector(sel, &sel_path)),
    }
    if let Some(selector) = as_selector(raw) {
        if selector.is_empty() {
            errs.push(FieldError::required(&sel_path, ""));
        }
        errs.extend(super::common::selector_mismatch(
            &selector,
            spec.get("template"),
            &path.child("template"),
        ));
    }
    errs
}

/// The old template with what a suspended, never-started Job may change taken from the new
/// one (node affinity, node selector, tolerations, scheduling gates, labels, annotations).
fn with_mutable_directives(old: &Value, new: &Value) -> Value {
    let mut t = old.clone();
    let copy = |t: &mut Value, parent: &str, key: &str| {
        let from = new.get(parent).and_then(|p| p.get(key)).cloned();
        let dst = object_at(t, parent);
        match from {
            Some(v) => dst[key] = v,
            None => drop(dst.as_object_mut().map(|m| m.remove(key))),
        }
    };
    for key in ["nodeSelector", "tolerations", "schedulingGates"] {
        copy(&mut t, "spec", key);
    }
    for key in ["labels", "annotations"] {
        copy(&mut t, "metadata", key);
    }
    let new_affinity = new.pointer("/spec/affinity").filter(|a| !a.is_null());
    let spec = object_at(&mut t, "spec");
    match (
        new_affinity,
        spec.get("affinity").is_some_and(|a| !a.is_null()),
    ) {
        (None, true) => {
            let affinity = object_at(spec, "affinity");
            drop(affinity.as_object_mut().map(|m| m.remove("nodeAffinity")));
            if super::common::is_empty(Some(affinity)) {
                drop(spec.as_object_mut().map(|m| m.remove("affinity")));
            }
        }
        (Some(a), _) => {
            let node = a.get("nodeAffinity").cloned().unwrap_or(Value::Null);
            object_at(spec, "affinity")["nodeAffinity"] = node;
        }
        (None, false) => {}
    }
    t
}

impl Strategy for JobStrategy {
    fn prepare_for_create(&self, job: &mut Value) {
        defaults(job);
        if !manual_selector(job) {
            generate_selector(job);
        }
        copy_template_labels(job);
    }

    fn prepare_for_update(&self, job: &mut Value, old: &Value) {
        defaults(job);
        settle_generation(job, old);
    }

    fn validate(&self, job: &Value) -> Vec<FieldError> {
        validate_job(job, true)
    }

    fn validate_update(&self, job: &Value, old: &Value) -> Vec<FieldError> {
        let prefixed = old
            .pointer("/spec/template/metadata/labels")
            .and_then(|l| l.get(CONTROLLER_UID))
            .is_some();
        let mut errs = validate_job(job, prefixed);
        let path = FieldPath::new("spec");
        let (new_spec, old_spec) = (
            job.get("spec").unwrap_or(&Value::Null),
            old.get("spec").unwrap_or(&Value::Null),
        );
        let at = |s: &'static str| (new_spec.get(s), old_spec.get(s), path.child(s));
        // Indexed Jobs may scale completions together with parallelism (ElasticIndexedJob).
        let (completions, old_completions, completions_path) = at("completions");
        let indexed = str_at(new_spec, "/completionMode") == "Indexed";
        if !indexed {
            errs.extend(immutable(completions, old_completions, &completions_path));
        } else if !semantic_eq(completions, old_completions)
            && let Some(c) = completions.and_then(int)
            && Some(c) != new_spec.get("parallelism").and_then(int)
        {
            errs.push(FieldError::invalid(
                &completions_path,
                c,
                "can only be modified in tandem with spec.parallelism",
            ));
        }
        for field in [
            "selector",
            "completionMode",
            "podFailurePolicy",
            "backoffLimitPerIndex",
            "managedBy",
        ] {
            let (new, old, p) = at(field);
            errs.extend(immutable(new, old, &p));
        }
        let (template, old_template, template_path) = at("template");
        let suspended = old_spec.get("suspend") == Some(&json!(true));
        let not_started = old.pointer("/status/startTime").is_none_or(Value::is_null);
        let relaxed = match (template, old_template) {
            (Some(new), Some(old)) if suspended && not_started => {
                Some(with_mutable_directives(old, new))
            }
            _ => None,
        };
        errs.extend(immutable(
            template,
            relaxed.as_ref().or(old_template),
            &template_path,
        ));
        errs
    }

    fn fields(&self, job: &Value) -> Vec<(&'static str, String)> {
        let succeeded = int_at(job, "/status/succeeded").unwrap_or(0);
        vec![("status.successful", succeeded.to_string())]
    }
}

#[cfg(test)]
#[path = "job_tests.rs"]
mod tests;
