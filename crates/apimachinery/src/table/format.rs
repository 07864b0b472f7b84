//! Cell formats the printers share, as upstream writes them: label maps (`labels.FormatLabels`),
//! label selectors (`metav1.FormatLabelSelector`), container names and images, `host:port`,
//! `a,b,c + 2 more...` lists, and `True`/`False`/`<unset>`.

use serde_json::{Map, Value};

/// `k1=v1,k2=v2` sorted by key, `<none>` when empty (`labels.FormatLabels`).
pub(super) fn labels(map: Option<&Map<String, Value>>) -> String {
    let mut pairs: Vec<(&str, &str)> = map
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or("")))
        .collect();
    pairs.sort_unstable();
    let joined = pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    or_none(joined)
}

/// A `metav1.LabelSelector` that cannot become a selector (unknown operator, wrong number of
/// values), as `metav1.LabelSelectorAsSelector` rejects it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct InvalidSelector;

/// The selector's string form (`labels.Selector.String()`): requirements sorted by key,
/// `k=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`; empty for a missing or empty selector.
pub(super) fn selector(sel: Option<&Value>) -> Result<String, InvalidSelector> {
    let Some(sel) = sel.and_then(Value::as_object) else {
        return Ok(String::new()); // labels.Nothing()
    };
    let mut reqs: Vec<(&str, String)> = Vec::new();
    if let Some(Value::Object(m)) = sel.get("matchLabels") {
        for (k, v) in m {
            reqs.push((k, format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    if let Some(Value::Array(exprs)) = sel.get("matchExpressions") {
        for e in exprs {
            let key = e.get("key").and_then(Value::as_str).unwrap_or("");
            let mut values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|v| v.as_str().unwrap_or(""))
                .collect();
            values.sort_unstable();
            let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
            let text = match (op, values.is_empty()) {
                ("In", false) => format!("{key} in ({})", values.join(",")),
                ("NotIn", false) => format!("{key} notin ({})", values.join(",")),
                ("Exists", true) => key.to_string(),
                ("DoesNotExist", true) => format!("!{key}"),
                _ => return Err(InvalidSelector),
            };
            reqs.push((key, text));
        }
    }
    reqs.sort_by(|a, b| a.0.cmp(b.0));
    Ok(reqs
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(","))
}

/// `metav1.FormatLabelSelector`: the selector, `<none>` when empty, `<error>` when invalid.
pub(super) fn label_selector(sel: Option<&Value>) -> String {
    selector(sel).map_or_else(|_| "<error>".to_string(), or_none)
}

/// Container names and images, each comma-joined (`layoutContainerCells`).
pub(super) fn containers(list: &[Value]) -> (String, String) {
    let field = |c: &Value, f: &str| c.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    let names: Vec<String> = list.iter().map(|c| field(c, "name")).collect();
    let images: Vec<String> = list.iter().map(|c| field(c, "image")).collect();
    (names.join(","), images.join(","))
}

/// Go's `net.JoinHostPort`: IPv6 hosts go in brackets.
pub(super) fn host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Upstream's `listWithMoreString`: the first `max` items, `+ N more...` when there were more
/// than fit, `<unset>` when there were none.
pub(super) fn list_with_more(list: &[String], more: bool, count: usize, max: usize) -> String {
    let joined = list.join(",");
    if more {
        return format!("{joined} + {} more...", count - max);
    }
    if joined.is_empty() {
        return "<unset>".to_string();
    }
    joined
}

/// `True`, `False`, or `<unset>` for an unset pointer (`printBoolPtr`).
pub(super) fn bool_ptr(value: Option<bool>) -> &'static str {
    match value {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    }
}

/// `s`, or `<none>` when empty.
pub(super) fn or_none(s: String) -> String {
    if s.is_empty() {
        "<none>".to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_are_sorted_by_key_and_empty_maps_print_none() {
        let m = json!({"b": "2", "a": "1"});
        assert_eq!(labels(m.as_object()), "a=1,b=2");
        assert_eq!(labels(json!({}).as_object()), "<none>");
        assert_eq!(labels(None), "<none>");
    }

    #[test]
    fn selectors_print_like_upstream_label_selectors() {
        let sel = json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["b", "a"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "Exists"}
            ]
        });
        assert_eq!(
            selector(Some(&sel)).unwrap(),
            "app=web,!canary,env notin (prod),tier in (a,b),zone"
        );
        assert_eq!(label_selector(Some(&json!({}))), "<none>");
        assert_eq!(label_selector(None), "<none>");
    }

    #[test]
    fn selectors_with_bad_operators_or_values_are_errors() {
        for e in [
            json!({"key": "a", "operator": "Gt", "values": ["1"]}),
            json!({"key": "a", "operator": "In", "values": []}),
            json!({"key": "a", "operator": "Exists", "values": ["x"]}),
        ] {
            let sel = json!({"matchExpressions": [e]});
            assert_eq!(selector(Some(&sel)), Err(InvalidSelector));
            assert_eq!(label_selector(Some(&sel)), "<error>");
        }
    }

    #[test]
    fn ipv6_hosts_are_bracketed() {
        assert_eq!(host_port("10.0.0.1", 80), "10.0.0.1:80");
        assert_eq!(host_port("fd00::1", 80), "[fd00::1]:80");
    }

    #[test]
    fn lists_say_how_many_more_or_unset() {
        let l = ["a".to_string(), "b".to_string(), "c".to_string()];
        assert_eq!(list_with_more(&l, true, 5, 3), "a,b,c + 2 more...");
        assert_eq!(list_with_more(&l, false, 3, 3), "a,b,c");
        assert_eq!(list_with_more(&[], false, 0, 3), "<unset>");
    }
}
