//! The strategy of CustomResourceDefinitions themselves (upstream's
//! `customresourcedefinition` registry strategy and `ValidateCustomResourceDefinition`):
//! defaults, the status a create starts with, stored versions, and the checks a definition
//! must pass before anything is served from it.

use std::collections::HashSet;

use serde_json::{Value, json};
use skiff_apimachinery::validation::{FieldError, FieldPath, names};

use super::FINALIZER;
use super::printer::JsonPath;
use super::schema::Schema;
use crate::strategy::Strategy;

#[derive(Debug)]
pub struct CustomResourceDefinitionStrategy;

/// The version a CRD stores its objects as (the one with `storage: true`).
pub fn storage_version(crd: &Value) -> Option<&str> {
    versions(crd)
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name")?.as_str())
}

/// The entries of `spec.versions`.
pub fn versions(crd: &Value) -> impl Iterator<Item = &Value> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Upstream's `SetDefaults_CustomResourceDefinition`: singular and listKind from the kind,
/// conversion `None`, a conversion webhook's service port 443.
fn set_defaults(crd: &mut Value) {
    let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if let Some(names) = spec.get_mut("names").and_then(Value::as_object_mut) {
        let kind = names
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if names
            .get("singular")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            names.insert("singular".into(), json!(kind.to_lowercase()));
        }
        if names
            .get("listKind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
            && !kind.is_empty()
        {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    let conversion = spec.entry("conversion").or_insert_with(|| json!({}));
    if conversion.get("strategy").is_none() {
        conversion["strategy"] = json!("None");
    }
    if let Some(service) = conversion.pointer_mut("/webhook/clientConfig/service")
        && service.is_object()
        && service.get("port").is_none()
    {
        service["port"] = json!(443);
    }
}

/// Adds the storage version to `status.storedVersions` (upstream's strategy does this on
/// every write, so a version objects were once stored as is never forgotten).
fn record_storage_version(crd: &mut Value) {
    let Some(storage) = storage_version(crd).map(str::to_string) else {
        return;
    };
    if !crd.get("status").is_some_and(Value::is_object) {
        crd["status"] = json!({});
    }
    let stored = crd["status"]
        .as_object_mut()
        .expect("made an object above")
        .entry("storedVersions")
        .or_insert_with(|| json!([]));
    if !stored.is_array() {
        *stored = json!([]);
    }
    let list = stored.as_array_mut().expect("made an array above");
    if !list.iter().any(|v| v == storage.as_str()) {
        list.push(json!(storage));
    }
}

impl Strategy for CustomResourceDefinitionStrategy {
    fn prepare_for_create(&self, crd: &mut Value) {
        set_defaults(crd);
        crd["status"] = json!({"conditions": [], "acceptedNames": {"plural": "", "kind": ""},
                               "storedVersions": []});
        record_storage_version(crd);
    }

    fn prepare_for_update(&self, crd: &mut Value, _old: &Value) {
        set_defaults(crd);
        record_storage_version(crd);
    }

    fn validate(&self, crd: &Value) -> Vec<FieldError> {
        validate(crd, true)
    }

    fn validate_update(&self, crd: &Value, old: &Value) -> Vec<FieldError> {
        // As upstream, a CRD stored before its review versions were checked may keep them.
        let mut errs = validate(crd, recognized_review_versions(old));
        let scope = FieldPath::new("spec").child("scope");
        if crd.pointer("/spec/scope") != old.pointer("/spec/scope") {
            errs.push(FieldError::invalid(
                &scope,
                crd.pointer("/spec/scope").cloned().unwrap_or(Value::Null),
                "field is immutable",
            ));
        }
        // A version objects may still be stored as cannot go.
        let stored = crd
            .pointer("/status/storedVersions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str);
        let listed: HashSet<&str> = versions(crd)
            .filter_map(|v| v.get("name")?.as_str())
            .collect();
        for (i, v) in stored.enumerate() {
            if !listed.contains(v) {
                errs.push(FieldError::invalid(
                    &FieldPath::new("status").child("storedVersions").index(i),
                    v,
                    "must appear in spec.versions",
                ));
            }
        }
        errs
    }

    fn delete_finalizers(&self) -> &'static [&'static str] {
        &[FINALIZER]
    }
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// A DNS-1035 label check on a name field, with upstream's wording.
fn dns1035(errs: &mut Vec<FieldError>, path: &FieldPath, value: &str) {
    for msg in names::is_dns1035_label(value) {
        errs.push(FieldError::invalid(path, value, msg));
    }
}

/// `ValidateCustomResourceDefinition`: metadata name, group, names, scope, versions (with
/// their schemas, subresources and printer columns) and conversion (whose review versions must
/// include one the server speaks when `require_review_version`).
fn validate(crd: &Value, require_review_version: bool) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = FieldPath::new("spec");
    let group = text(crd, "/spec/group");
    let plural = text(crd, "/spec/names/plural");
    let name = text(crd, "/metadata/name");
    if name != format!("{plural}.{group}") {
        errs.push(FieldError::invalid(
            &FieldPath::new("metadata").child("name"),
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        errs.push(FieldError::required(&spec.child("group"), ""));
    } else {
        for msg in names::is_dns1123_subdomain(group) {
            errs.push(FieldError::invalid(&spec.child("group"), group, msg));
        }
        if group.split('.').count() < 2 {
            errs.push(FieldError::invalid(
                &spec.child("group"),
                group,
                "should be a domain with at least one dot",
            ));
        }
    }
    validate_names(&mut errs, crd);
    let scope = text(crd, "/spec/scope");
    match scope {
        "Namespaced" | "Cluster" => {}
        "" => errs.push(FieldError::required(&spec.child("scope"), "")),
        other => errs.push(FieldError::not_supported(
            &spec.child("scope"),
            other,
            &["Cluster", "Namespaced"],
        )),
    }
    validate_versions(&mut errs, crd);
    validate_conversion(&mut errs, crd, require_review_version);
    errs
}

/// The ConversionReview versions the server speaks (upstream's `acceptedConversionReviewVersions`).
const REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];

fn review_versions(crd: &Value) -> Vec<&str> {
    crd.pointer("/spec/conversion/webhook/conversionReviewVersions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| v.as_str().unwrap_or(""))
        .collect()
}

/// Whether `crd`'s review versions are empty or include one the server speaks (upstream's
/// `hasValidConversionReviewVersionOrEmpty`).
fn recognized_review_versions(crd: &Value) -> bool {
    let versions = review_versions(crd);
    versions.is_empty() || versions.iter().any(|v| REVIEW_VERSIONS.contains(v))
}

/// Upstream's `validateCustomResourceConversion`, with its field paths (those of the internal
/// type: `spec.conversion.webhookClientConfig`, `spec.conversion.conversionReviewVersions`).
fn validate_conversion(errs: &mut Vec<FieldError>, crd: &Value, require_review_version: bool) {
    let path = FieldPath::new("spec").child("conversion");
    let strategy = text(crd, "/spec/conversion/strategy");
    let client_config = crd.pointer("/spec/conversion/webhook/clientConfig");
    let versions = review_versions(crd);
    match strategy {
        "None" | "Webhook" => {}
        "" => errs.push(FieldError::required(&path.child("strategy"), "")),
        other => errs.push(FieldError::not_supported(
            &path.child("strategy"),
            other,
            &["None", "Webhook"],
        )),
    }
    if strategy != "Webhook" {
        let forbidden = "should not be set when strategy is not set to Webhook";
        if client_config.is_some_and(|c| !c.is_null()) {
            errs.push(FieldError::forbidden(
                &path.child("webhookClientConfig"),
                forbidden,
            ));
        }
        if !versions.is_empty() {
            errs.push(FieldError::forbidden(
                &path.child("conversionReviewVersions"),
                forbidden,
            ));
        }
        return;
    }
    // Pruning needs structural schemas, and only pruned objects can be converted.
    if crd.pointer("/spec/preserveUnknownFields") == Some(&Value::Bool(true)) {
        errs.push(FieldError::invalid(
            &path.child("strategy"),
            strategy,
            "must be None if spec.preserveUnknownFields is true",
        ));
    }
    let cc_path = path.child("webhookClientConfig");
    match client_config.filter(|c| !c.is_null()) {
        None => errs.push(FieldError::required(
            &cc_path,
            "required when strategy is set to Webhook",
        )),
        Some(cc) => {
            crate::strategy::webhookconfiguration::validate_client_config(cc, &cc_path, errs)
        }
    }
    let at = path.child("conversionReviewVersions");
    if versions.is_empty() {
        errs.push(FieldError::required(&at, ""));
        return;
    }
    let mut seen = HashSet::new();
    for (i, v) in versions.iter().enumerate() {
        if !seen.insert(*v) {
            errs.push(FieldError::invalid(&at.index(i), *v, "duplicate version"));
            continue;
        }
        dns1035(errs, &at.index(i), v);
    }
    if require_review_version && !versions.iter().any(|v| REVIEW_VERSIONS.contains(v)) {
        errs.push(FieldError::invalid(
            &at,
            json!(versions),
            "must include at least one of v1, v1beta1",
        ));
    }
}

fn validate_names(errs: &mut Vec<FieldError>, crd: &Value) {
    let path = FieldPath::new("spec").child("names");
    let plural = text(crd, "/spec/names/plural");
    if plural.is_empty() {
        errs.push(FieldError::required(&path.child("plural"), ""));
    } else {
        dns1035(errs, &path.child("plural"), plural);
    }
    let singular = text(crd, "/spec/names/singular");
    if !singular.is_empty() {
        dns1035(errs, &path.child("singular"), singular);
    }
    let kind = text(crd, "/spec/names/kind");
    if kind.is_empty() {
        errs.push(FieldError::required(&path.child("kind"), ""));
    } else {
        for msg in names::is_dns1035_label(&kind.to_lowercase()) {
            errs.push(FieldError::invalid(&path.child("kind"), kind, msg));
        }
    }
    let list_kind = text(crd, "/spec/names/listKind");
    if list_kind.is_empty() {
        errs.push(FieldError::required(&path.child("listKind"), ""));
    } else if list_kind == kind {
        errs.push(FieldError::invalid(
            &path.child("listKind"),
            list_kind,
            "kind and listKind may not be the same",
        ));
    }
    for field in ["shortNames", "categories"] {
        let items = crd
            .pointer(&format!("/spec/names/{field}"))
            .and_then(Value::as_array);
        for (i, item) in items.into_iter().flatten().enumerate() {
            dns1035(
                errs,
                &path.child(field).index(i),
                item.as_str().unwrap_or(""),
            );
        }
    }
}

fn validate_versions(errs: &mut Vec<FieldError>, crd: &Value) {
    let path = FieldPath::new("spec").child("versions");
    let all: Vec<&Value> = versions(crd).collect();
    if all.is_empty() {
        errs.push(FieldError::invalid(
            &path,
            json!([]),
            "must have exactly one version marked as storage version",
        ));
        return;
    }
    let storage = all
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .count();
    if storage != 1 {
        errs.push(FieldError::invalid(
            &path,
            Value::Array(all.iter().map(|v| (*v).clone()).collect()),
            "must have exactly one version marked as storage version",
        ));
    }
    if !all
        .iter()
        .any(|v| v.get("served").and_then(Value::as_bool) == Some(true))
    {
        errs.push(FieldError::invalid(
            &path,
            Value::Array(all.iter().map(|v| (*v).clone()).collect()),
            "must have at least one version marked as served",
        ));
    }
    let mut seen = HashSet::new();
    for (i, v) in all.iter().enumerate() {
        let at = path.index(i);
        let name = text(v, "/name");
        if name.is_empty() {
            errs.push(FieldError::required(&at.child("name"), ""));
        } else {
            dns1035(errs, &at.child("name"), name);
            if !seen.insert(name) {
                errs.push(FieldError::duplicate(&at.child("name"), name));
            }
        }
        match v.pointer("/schema/openAPIV3Schema") {
            None => errs.push(FieldError::required(
                &at.child("schema").child("openAPIV3Schema"),
                "schemas are required",
            )),
            Some(schema) => {
                let schema_path = at.child("schema").child("openAPIV3Schema");
                if let Err(e) = Schema::new(schema, &schema_path) {
                    errs.extend(e);
                }
            }
        }
        validate_subresources(errs, v, &at.child("subresources"));
        validate_columns(errs, v, &at.child("additionalPrinterColumns"));
    }
}

fn validate_subresources(errs: &mut Vec<FieldError>, version: &Value, path: &FieldPath) {
    let Some(scale) = version.pointer("/subresources/scale") else {
        return;
    };
    let path = path.child("scale");
    for (field, under, required) in [
        ("specReplicasPath", ".spec.", true),
        ("statusReplicasPath", ".status.", true),
        ("labelSelectorPath", "", false),
    ] {
        let value = text(scale, &format!("/{field}"));
        if value.is_empty() {
            if required {
                errs.push(FieldError::required(&path.child(field), ""));
            }
            continue;
        }
        let simple = JsonPath::parse(value)
            .ok()
            .and_then(|p| p.pointer())
            .is_some();
        if !simple {
            errs.push(FieldError::invalid(
                &path.child(field),
                value,
                "should be a json path under .spec or .status",
            ));
        } else if !value.starts_with(under)
            || (field == "labelSelectorPath"
                && !value.starts_with(".spec.")
                && !value.starts_with(".status."))
        {
            let detail = match field {
                "specReplicasPath" => "should be a json path under .spec",
                "statusReplicasPath" => "should be a json path under .status",
                _ => "should be a json path under either .spec or .status",
            };
            errs.push(FieldError::invalid(&path.child(field), value, detail));
        }
    }
}

fn validate_columns(errs: &mut Vec<FieldError>, version: &Value, path: &FieldPath) {
    let columns = version
        .get("additionalPrinterColumns")
        .and_then(Value::as_array);
    for (i, c) in columns.into_iter().flatten().enumerate() {
        let at = path.index(i);
        if text(c, "/name").is_empty() {
            errs.push(FieldError::required(&at.child("name"), ""));
        }
        let type_ = text(c, "/type");
        const TYPES: &[&str] = &["boolean", "date", "integer", "number", "string"];
        if !TYPES.contains(&type_) {
            errs.push(FieldError::not_supported(&at.child("type"), type_, TYPES));
        }
        let json_path = text(c, "/jsonPath");
        if json_path.is_empty() {
            errs.push(FieldError::required(&at.child("jsonPath"), ""));
        } else if let Err(e) = JsonPath::parse(json_path) {
            errs.push(FieldError::invalid(&at.child("jsonPath"), json_path, e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "widgets.example.com"},
               "spec": {"group": "example.com", "scope": "Namespaced",
                        "names": {"plural": "widgets", "kind": "Widget"},
                        "versions": [{"name": "v1", "served": true, "storage": true,
                                      "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    }

    #[test]
    fn a_create_is_defaulted_and_records_its_storage_version() {
        let mut c = crd();
        CustomResourceDefinitionStrategy.prepare_for_create(&mut c);
        assert_eq!(c["spec"]["names"]["singular"], "widget");
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        assert_eq!(c["spec"]["conversion"]["strategy"], "None");
        assert_eq!(c["status"]["storedVersions"], json!(["v1"]));
        assert!(validate(&c, true).is_empty(), "{:?}", validate(&c, true));
    }

    #[test]
    fn names_versions_and_scope_are_checked_with_upstreams_words() {
        let mut c = crd();
        CustomResourceDefinitionStrategy.prepare_for_create(&mut c);
        c["metadata"]["name"] = json!("gadgets.example.com");
        c["spec"]["scope"] = json!("Global");
        c["spec"]["versions"][0]["storage"] = json!(false);
        let errs: Vec<String> = validate(&c, true).iter().map(ToString::to_string).collect();
        assert!(errs.contains(&r#"metadata.name: Invalid value: "gadgets.example.com": must be spec.names.plural+"."+spec.group"#.to_string()), "{errs:?}");
        assert!(errs.contains(&r#"spec.scope: Unsupported value: "Global": supported values: "Cluster", "Namespaced""#.to_string()), "{errs:?}");
        assert!(
            errs.iter()
                .any(|e| e.ends_with("must have exactly one version marked as storage version")),
            "{errs:?}"
        );
    }

    #[test]
    fn a_stored_version_cannot_be_dropped_and_scope_is_immutable() {
        let mut old = crd();
        CustomResourceDefinitionStrategy.prepare_for_create(&mut old);
        let mut new = old.clone();
        new["spec"]["scope"] = json!("Cluster");
        new["spec"]["versions"][0]["name"] = json!("v2");
        CustomResourceDefinitionStrategy.prepare_for_update(&mut new, &old);
        assert_eq!(new["status"]["storedVersions"], json!(["v1", "v2"]));
        let errs: Vec<String> = CustomResourceDefinitionStrategy
            .validate_update(&new, &old)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.scope: Invalid value")
                    && e.ends_with("field is immutable")),
            "{errs:?}"
        );
        assert!(
            errs.contains(
                &r#"status.storedVersions[0]: Invalid value: "v1": must appear in spec.versions"#
                    .to_string()
            ),
            "{errs:?}"
        );
    }

    fn errors(c: &Value) -> Vec<String> {
        validate(c, true).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_conversion_webhook_needs_one_client_config_and_a_review_version_the_server_speaks() {
        let mut c = crd();
        c["spec"]["conversion"] = json!({"strategy": "Webhook", "webhook": {
            "clientConfig": {"service": {"namespace": "ns", "name": "conv", "path": "/convert"}},
            "conversionReviewVersions": ["v1", "v1beta1"]}});
        CustomResourceDefinitionStrategy.prepare_for_create(&mut c);
        assert_eq!(
            c["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["port"],
            443
        );
        assert!(errors(&c).is_empty(), "{:?}", errors(&c));

        c["spec"]["conversion"]["webhook"]["clientConfig"]["url"] = json!("https://h/convert");
        c["spec"]["conversion"]["webhook"]["conversionReviewVersions"] = json!(["v2", "v2"]);
        let errs = errors(&c);
        assert!(errs.contains(&"spec.conversion.webhookClientConfig: Required value: exactly one of url or service is required".to_string()), "{errs:?}");
        assert!(
            errs.contains(
                &r#"spec.conversion.conversionReviewVersions[1]: Invalid value: "v2": duplicate version"#
                    .to_string()
            ),
            "{errs:?}"
        );
        assert!(
            errs.iter().any(|e| e
                .starts_with("spec.conversion.conversionReviewVersions: Invalid value")
                && e.ends_with("must include at least one of v1, v1beta1")),
            "{errs:?}"
        );
        // An update keeps review versions the stored CRD already had.
        let mut old = c.clone();
        old["spec"]["conversion"]["webhook"]["clientConfig"] = json!({"url": "https://h/c"});
        let update: Vec<String> = CustomResourceDefinitionStrategy
            .validate_update(&old, &c)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            !update
                .iter()
                .any(|e| e.ends_with("must include at least one of v1, v1beta1")),
            "{update:?}"
        );

        c["spec"]["conversion"] = json!({"strategy": "Webhook"});
        c["spec"]["preserveUnknownFields"] = json!(true);
        let errs = errors(&c);
        assert!(errs.contains(&"spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook".to_string()), "{errs:?}");
        assert!(
            errs.contains(&"spec.conversion.conversionReviewVersions: Required value".to_string()),
            "{errs:?}"
        );
        assert!(errs.contains(&r#"spec.conversion.strategy: Invalid value: "Webhook": must be None if spec.preserveUnknownFields is true"#.to_string()), "{errs:?}");
    }

    #[test]
    fn strategy_none_takes_no_webhook() {
        let mut c = crd();
        c["spec"]["conversion"] = json!({"strategy": "None", "webhook": {
            "clientConfig": {"url": "https://h/"}, "conversionReviewVersions": ["v1"]}});
        let errs = errors(&c);
        assert!(errs.contains(&"spec.conversion.webhookClientConfig: Forbidden: should not be set when strategy is not set to Webhook".to_string()), "{errs:?}");
        assert!(errs.contains(&"spec.conversion.conversionReviewVersions: Forbidden: should not be set when strategy is not set to Webhook".to_string()), "{errs:?}");
        c["spec"]["conversion"] = json!({"strategy": "Magic"});
        assert!(errors(&c).contains(&r#"spec.conversion.strategy: Unsupported value: "Magic": supported values: "None", "Webhook""#.to_string()));
    }
}
