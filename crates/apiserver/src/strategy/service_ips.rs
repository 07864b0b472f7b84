//! Service ClusterIPs and IP families on a single-stack IPv4 cluster: `clusterIPs` kept in
//! step with `clusterIP`, the `ipFamilies`/`ipFamilyPolicy` the REST layer fills, upstream's
//! `ValidateServiceClusterIPsRelatedFields`, and the update rule that the primary ClusterIP and
//! IP family never change (except to or from ExternalName).

use serde_json::{Value, json};
use skiff_apimachinery::validation::{self, FieldError, FieldPath};

use super::{empty_str, has_selector, headless, kind, needs_cluster_ip};
use crate::strategy::common::{semantic_eq, str_at, strings};

/// `clusterIPs` from `clusterIP` for clients that set only the latter (`normalizeClusterIPs`).
pub fn normalize_cluster_ips(svc: &mut Value, old: Option<&Value>) {
    let ip = str_at(svc, "/spec/clusterIP").to_string();
    let ips = svc
        .pointer("/spec/clusterIPs")
        .cloned()
        .unwrap_or(Value::Null);
    let no_ips = ips.as_array().is_none_or(Vec::is_empty);
    let Some(old) = old else {
        if !ip.is_empty() && no_ips {
            svc["spec"]["clusterIPs"] = json!([ip]);
        }
        return;
    };
    let old_ip = str_at(old, "/spec/clusterIP");
    let old_ips = old
        .pointer("/spec/clusterIPs")
        .cloned()
        .unwrap_or(Value::Null);
    let old_has_ips = old_ips.as_array().is_some_and(|a| !a.is_empty());
    if old_has_ips && no_ips && old_ip == ip {
        svc["spec"]["clusterIPs"] = old_ips.clone();
    }
    let same_ips = semantic_eq(svc.pointer("/spec/clusterIPs"), Some(&old_ips));
    if old_ip != ip {
        if !old_ip.is_empty() && ip.is_empty() && same_ips {
            drop(svc["spec"].as_object_mut().map(|m| m.remove("clusterIPs")));
        }
        if !ip.is_empty() && same_ips {
            svc["spec"]["clusterIPs"] = json!([ip]);
        }
    }
}

/// The single-stack IPv4 families (upstream's `initIPFamilyFields` on a cluster without IPv6),
/// keeping what the stored Service had.
pub fn init_ip_families(svc: &mut Value, old: Option<&Value>) {
    if !needs_cluster_ip(svc) {
        return;
    }
    let old = old.filter(|o| needs_cluster_ip(o));
    let selectorless_headless = headless(svc) && !has_selector(svc);
    let ips: Vec<String> = svc
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|ip| *ip != "None")
        .map(str::to_string)
        .collect();
    let spec = &mut svc["spec"];
    if empty_str(spec.get("ipFamilyPolicy")) {
        let old_policy = old.and_then(|o| o.pointer("/spec/ipFamilyPolicy")).cloned();
        let families = spec
            .get("ipFamilies")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        spec["ipFamilyPolicy"] = match old_policy {
            Some(p) if !p.is_null() => p,
            _ if selectorless_headless || ips.len() == 2 || families == 2 => {
                json!("RequireDualStack")
            }
            _ => json!("SingleStack"),
        };
    }
    if spec
        .get("ipFamilies")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        let old_families = old.and_then(|o| o.pointer("/spec/ipFamilies")).cloned();
        spec["ipFamilies"] = match old_families {
            Some(f) if f.as_array().is_some_and(|a| !a.is_empty()) => f,
            _ if !ips.is_empty() => json!(
                ips.iter()
                    .map(|ip| match validation::parse_ip_sloppy(ip) {
                        Some(std::net::IpAddr::V6(_)) => "IPv6",
                        _ => "IPv4",
                    })
                    .collect::<Vec<_>>()
            ),
            _ => json!(["IPv4"]),
        };
    }
}

/// Upstream's `ValidateServiceClusterIPsRelatedFields`, plus the families this single-stack
/// IPv4 cluster offers.
pub fn validate_cluster_ips(svc: &Value, spec_path: &FieldPath) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ips_path = spec_path.child("clusterIPs");
    let ip = str_at(svc, "/spec/clusterIP");
    let ips_value = svc
        .pointer("/spec/clusterIPs")
        .cloned()
        .unwrap_or(Value::Null);
    let ips = strings(Some(&ips_value));
    if !ip.is_empty() {
        if ips.is_empty() {
            errs.push(FieldError::required(&ips_path, ""));
        } else if ips[0] != ip {
            errs.push(FieldError::invalid(
                &ips_path,
                ips_value.clone(),
                "first value must match `clusterIP`",
            ));
        }
    } else if !ips.is_empty() {
        errs.push(FieldError::invalid(
            &ips_path,
            ips_value.clone(),
            "must be empty when `clusterIP` is not specified",
        ));
    }
    let families_path = spec_path.child("ipFamilies");
    let families = strings(svc.pointer("/spec/ipFamilies"));
    for (i, family) in families.iter().enumerate() {
        match *family {
            "IPv4" => {}
            "IPv6" => errs.push(FieldError::invalid(
                &families_path.index(i),
                *family,
                "not configured on this cluster",
            )),
            other => errs.push(FieldError::not_supported(
                &families_path.index(i),
                other,
                &["IPv4", "IPv6"],
            )),
        }
        if families[..i].contains(family) {
            errs.push(FieldError::duplicate(&families_path.index(i), *family));
        }
    }
    let policy_path = spec_path.child("ipFamilyPolicy");
    match svc.pointer("/spec/ipFamilyPolicy").and_then(Value::as_str) {
        None | Some("SingleStack" | "PreferDualStack") => {}
        Some("RequireDualStack") => {
            if !headless(svc) || has_selector(svc) {
                errs.push(FieldError::invalid(
                    &policy_path,
                    "RequireDualStack",
                    "this cluster is not configured for dual-stack services",
                ));
            }
        }
        Some(other) => errs.push(FieldError::not_supported(
            &policy_path,
            other,
            &["PreferDualStack", "RequireDualStack", "SingleStack"],
        )),
    }
    let mut bad = false;
    for (i, ip) in ips.iter().enumerate() {
        if i == 0 && *ip == "None" {
            if ips.len() > 1 {
                bad = true;
                errs.push(FieldError::invalid(
                    &ips_path,
                    ips_value.clone(),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        for msg in validation::is_valid_ip(ip) {
            bad = true;
            errs.push(FieldError::invalid(&ips_path.index(i), *ip, msg));
        }
    }
    if ips.len() > 2 {
        errs.push(FieldError::invalid(
            &ips_path,
            ips_value.clone(),
            "may only hold up to 2 values",
        ));
    }
    if bad {
        return errs;
    }
    if ips.len() == 2 {
        let v6 = |s: &str| {
            matches!(
                validation::parse_ip_sloppy(s),
                Some(std::net::IpAddr::V6(_))
            )
        };
        if v6(ips[0]) == v6(ips[1]) {
            errs.push(FieldError::invalid(
                &ips_path,
                ips_value.clone(),
                "may specify no more than one IP for each IP family",
            ));
        }
    }
    if !headless(svc) {
        for (i, (ip, family)) in ips.iter().zip(&families).enumerate() {
            let is_v6 = matches!(
                validation::parse_ip_sloppy(ip),
                Some(std::net::IpAddr::V6(_))
            );
            let want = match (*family, is_v6) {
                ("IPv4", true) => "IPv4",
                ("IPv6", false) => "IPv6",
                _ => continue,
            };
            errs.push(FieldError::invalid(
                &ips_path.index(i),
                *ip,
                format!("expected an {want} value as indicated by `ipFamilies[{i}]`"),
            ));
        }
    }
    errs
}

/// Upstream's `validateUpgradeDowngradeClusterIPs` and `…IPFamilies` for the primary entry.
pub fn validate_primary_unchanged(svc: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if kind(svc) == "ExternalName" || kind(old) == "ExternalName" {
        return errs;
    }
    for field in ["clusterIPs", "ipFamilies"] {
        let pointer = format!("/spec/{field}");
        let (new, before) = (
            strings(svc.pointer(&pointer)),
            strings(old.pointer(&pointer)),
        );
        if let (Some(a), Some(b)) = (new.first(), before.first())
            && a != b
        {
            errs.push(FieldError::invalid(
                &FieldPath::new("spec").child(field).index(0),
                json!(new),
                "may not change once set",
            ));
        }
    }
    errs
}
