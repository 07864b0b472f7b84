//! LimitRanges: upstream's `SetDefaults_LimitRangeItem` (a `Container` item's `default` falls
//! back to `max`, its `defaultRequest` to `default`, then `min`) and `ValidateLimitRange` (no
//! duplicate types, quantities, `min ≤ defaultRequest ≤ default ≤ max`, ratios of at least 1,
//! no defaults on `Pod` items, a storage bound on `PersistentVolumeClaim` items).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};
use skiff_apimachinery::quantity::{Quantity, format_canonical};
use skiff_apimachinery::validation::{FieldError, FieldPath};

use super::Strategy;
use crate::admission::limit_ranger::parse;

#[derive(Debug)]
pub struct LimitRangeStrategy;

fn default_item(item: &mut Value) {
    if item["type"] != "Container" {
        return;
    }
    let get = |item: &Value, k: &str| {
        item.get(k)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let max = get(item, "max");
    let min = get(item, "min");
    let mut default = get(item, "default");
    let mut request = get(item, "defaultRequest");
    let fill = |into: &mut Map<String, Value>, from: &Map<String, Value>| {
        for (k, v) in from {
            into.entry(k.clone()).or_insert_with(|| v.clone());
        }
    };
    fill(&mut default, &max);
    fill(&mut request, &default);
    fill(&mut request, &min);
    if !default.is_empty() {
        item["default"] = Value::Object(default);
    }
    if !request.is_empty() {
        item["defaultRequest"] = Value::Object(request);
    }
}

fn default_all(range: &mut Value) {
    if let Some(items) = range
        .pointer_mut("/spec/limits")
        .and_then(Value::as_array_mut)
    {
        items.iter_mut().for_each(default_item);
    }
}

fn show(q: &Quantity) -> String {
    format_canonical(q.nano_value(), q.format())
}

/// The quantities of `item[field]`, with errors for those that do not parse.
fn list(
    item: &Value,
    field: &str,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) -> BTreeMap<String, Quantity> {
    let mut out = BTreeMap::new();
    for (k, v) in item
        .get(field)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        match parse(v) {
            Some(q) => {
                out.insert(k.clone(), q);
            }
            None => errs.push(FieldError::invalid(
                &path.child(field).key(k),
                v.clone(),
                "must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
            )),
        }
    }
    out
}

fn validate_item(item: &Value, path: &FieldPath, errs: &mut Vec<FieldError>) {
    let kind = item["type"].as_str().unwrap_or("");
    let max = list(item, "max", path, errs);
    let min = list(item, "min", path, errs);
    let default = list(item, "default", path, errs);
    let request = list(item, "defaultRequest", path, errs);
    let ratios = list(item, "maxLimitRequestRatio", path, errs);
    if kind == "Pod" {
        for field in ["default", "defaultRequest"] {
            if item
                .get(field)
                .and_then(Value::as_object)
                .is_some_and(|m| !m.is_empty())
            {
                errs.push(FieldError::forbidden(
                    &path.child(field),
                    "may not be specified when `type` is 'Pod'",
                ));
            }
        }
    }
    if kind == "PersistentVolumeClaim"
        && !min.contains_key("storage")
        && !max.contains_key("storage")
    {
        errs.push(FieldError::required(
            &path.child("limits"),
            "either minimum or maximum storage value is required, but neither was provided",
        ));
    }
    let keys: BTreeSet<&String> = [&max, &min, &default, &request, &ratios]
        .into_iter()
        .flat_map(|m| m.keys())
        .collect();
    let n = |q: &Quantity| q.nano_value();
    for k in keys {
        let at = |field: &str| path.child(field).key(k);
        let bad = |field: &str, q: &Quantity, why: String| {
            FieldError::invalid(&at(field), json!(show(q)), why)
        };
        if let (Some(lo), Some(hi)) = (min.get(k), max.get(k))
            && n(lo) > n(hi)
        {
            errs.push(bad(
                "min",
                lo,
                format!(
                    "min value {} is greater than max value {}",
                    show(lo),
                    show(hi)
                ),
            ));
        }
        if let Some(dr) = request.get(k) {
            if let Some(lo) = min.get(k).filter(|lo| n(lo) > n(dr)) {
                errs.push(bad(
                    "defaultRequest",
                    dr,
                    format!(
                        "min value {} is greater than default request value {}",
                        show(lo),
                        show(dr)
                    ),
                ));
            }
            if let Some(hi) = max.get(k).filter(|hi| n(dr) > n(hi)) {
                errs.push(bad(
                    "defaultRequest",
                    dr,
                    format!(
                        "default request value {} is greater than max value {}",
                        show(dr),
                        show(hi)
                    ),
                ));
            }
            if let Some(d) = default.get(k).filter(|d| n(dr) > n(d)) {
                errs.push(bad(
                    "defaultRequest",
                    dr,
                    format!(
                        "default request value {} is greater than default limit value {}",
                        show(dr),
                        show(d)
                    ),
                ));
            }
        }
        if let Some(d) = default.get(k) {
            if let Some(lo) = min.get(k).filter(|lo| n(lo) > n(d)) {
                errs.push(bad(
                    "default",
                    d,
                    format!(
                        "min value {} is greater than default value {}",
                        show(lo),
                        show(d)
                    ),
                ));
            }
            if let Some(hi) = max.get(k).filter(|hi| n(d) > n(hi)) {
                errs.push(bad(
                    "default",
                    d,
                    format!(
                        "default value {} is greater than max value {}",
                        show(d),
                        show(hi)
                    ),
                ));
            }
        }
        if let Some(r) = ratios.get(k).filter(|r| n(r) < 1_000_000_000) {
            errs.push(bad(
                "maxLimitRequestRatio",
                r,
                format!("ratio {} is less than 1", show(r)),
            ));
        }
    }
}

impl Strategy for LimitRangeStrategy {
    fn prepare_for_create(&self, range: &mut Value) {
        default_all(range);
    }

    fn prepare_for_update(&self, range: &mut Value, _old: &Value) {
        default_all(range);
    }

    fn validate(&self, range: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let path = FieldPath::new("spec").child("limits");
        let mut types = BTreeSet::new();
        for (i, item) in range
            .pointer("/spec/limits")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let at = path.index(i);
            let kind = item["type"].as_str().unwrap_or("");
            if !types.insert(kind.to_string()) {
                errs.push(FieldError::duplicate(&at.child("type"), json!(kind)));
            }
            validate_item(item, &at, &mut errs);
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_defaults_fall_back_to_max_then_min() {
        let mut r = json!({"spec": {"limits": [{"type": "Container",
            "max": {"cpu": "1"}, "min": {"memory": "64Mi"}}]}});
        LimitRangeStrategy.prepare_for_create(&mut r);
        assert_eq!(
            r["spec"]["limits"][0],
            json!({"type": "Container", "max": {"cpu": "1"}, "min": {"memory": "64Mi"},
                   "default": {"cpu": "1"}, "defaultRequest": {"cpu": "1", "memory": "64Mi"}})
        );
        assert!(LimitRangeStrategy.validate(&r).is_empty());
    }

    #[test]
    fn inconsistent_bounds_are_invalid_with_upstreams_details() {
        let r = json!({"spec": {"limits": [
            {"type": "Container", "min": {"cpu": "2"}, "max": {"cpu": "1"},
             "maxLimitRequestRatio": {"memory": "500m"}},
            {"type": "Pod", "default": {"cpu": "1"}},
            {"type": "PersistentVolumeClaim"},
            {"type": "Pod"}]}});
        let errs: Vec<String> = LimitRangeStrategy
            .validate(&r)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            [
                "spec.limits[0].min[cpu]: Invalid value: \"2\": min value 2 is greater than max value 1",
                "spec.limits[0].maxLimitRequestRatio[memory]: Invalid value: \"500m\": ratio 500m is less than 1",
                "spec.limits[1].default: Forbidden: may not be specified when `type` is 'Pod'",
                "spec.limits[2].limits: Required value: either minimum or maximum storage value is required, but neither was provided",
                "spec.limits[3].type: Duplicate value: \"Pod\"",
            ]
        );
    }
}
