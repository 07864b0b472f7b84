//! Whether tolerations tolerate taints (upstream's `Toleration.ToleratesTaint` and
//! `v1helper.FindMatchingUntoleratedTaint`): shared by the scheduler's TaintToleration and
//! PodTopologySpread (`nodeTaintsPolicy`), the kubelet's admission (NoExecute taints), and the
//! DaemonSet and taint eviction controllers.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Taint effects that keep pods off a node (upstream's `DoNotScheduleTaintsFilterFunc`).
pub fn is_do_not_schedule(taint: &Taint) -> bool {
    taint.effect == "NoSchedule" || taint.effect == "NoExecute"
}

/// Whether one toleration tolerates one taint: an empty effect matches every effect, an empty
/// key (with `Exists`) every key; `Equal` (or no operator) needs the same value, `Exists` any.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        "Exists" => true,
        _ => false,
    }
}

/// Whether any of the tolerations tolerates the taint.
pub fn tolerated_by_any(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates(t, taint))
}

/// The first taint that `include` selects and no toleration tolerates.
pub fn find_untolerated_taint<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    include: impl Fn(&Taint) -> bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .find(|taint| include(taint) && !tolerated_by_any(tolerations, taint))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: (!value.is_empty()).then(|| value.into()),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn toleration(key: &str, operator: &str, value: &str, effect: &str) -> Toleration {
        let opt = |s: &str| (!s.is_empty()).then(|| s.to_string());
        Toleration {
            key: opt(key),
            operator: opt(operator),
            value: opt(value),
            effect: opt(effect),
            toleration_seconds: None,
        }
    }

    #[test]
    fn tolerations_match_taints_by_key_value_operator_and_effect() {
        let t = taint("dedicated", "gpu", "NoSchedule");
        let cases = [
            (
                "equal key and value",
                toleration("dedicated", "Equal", "gpu", "NoSchedule"),
                true,
            ),
            (
                "no operator means equal",
                toleration("dedicated", "", "gpu", ""),
                true,
            ),
            (
                "other value",
                toleration("dedicated", "Equal", "cpu", "NoSchedule"),
                false,
            ),
            (
                "exists on the key",
                toleration("dedicated", "Exists", "", ""),
                true,
            ),
            (
                "exists on every key",
                toleration("", "Exists", "", ""),
                true,
            ),
            (
                "other effect",
                toleration("dedicated", "Exists", "", "NoExecute"),
                false,
            ),
            ("other key", toleration("team", "Exists", "", ""), false),
            (
                "unknown operator",
                toleration("dedicated", "Gt", "1", ""),
                false,
            ),
        ];
        for (name, tol, want) in cases {
            assert_eq!(tolerates(&tol, &t), want, "{name}");
        }
    }

    #[test]
    fn the_first_selected_untolerated_taint_is_found() {
        let taints = [
            taint("soft", "", "PreferNoSchedule"),
            taint("a", "1", "NoSchedule"),
            taint("b", "2", "NoExecute"),
        ];
        let tols = [toleration("a", "Exists", "", "")];
        let found = find_untolerated_taint(&taints, &tols, is_do_not_schedule);
        assert_eq!(found.map(|t| t.key.as_str()), Some("b"));
        let all = [toleration("", "Exists", "", "")];
        assert!(find_untolerated_taint(&taints, &all, is_do_not_schedule).is_none());
    }
}
