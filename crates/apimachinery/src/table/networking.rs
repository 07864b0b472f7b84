//! Tables of the autoscaling, networking and node kinds: horizontal pod autoscalers
//! (upstream's `printHorizontalPodAutoscaler` and `formatHPAMetrics`), ingresses, ingress
//! classes, network policies and runtime classes.

use super::format::label_selector;
use super::value::{age, int, list, name, object, opt_int, present, scalar, text};
use super::{AGE, Column, NAME, Printer};
use jiff::Timestamp;
use serde_json::Value;

pub(super) static HORIZONTAL_POD_AUTOSCALERS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Reference",
            "string",
            0,
            "The kind/name of the scaled object.",
        ),
        Column::new(
            "Targets",
            "string",
            0,
            "Current and target values of the first metrics.",
        ),
        Column::new("MinPods", "string", 0, "The lower replica limit."),
        Column::new("MaxPods", "string", 0, "The upper replica limit."),
        Column::new("Replicas", "string", 0, "The current number of replicas."),
        AGE,
    ],
    cells: hpa_cells,
};

/// A quantity's string, `<unknown>`-free: the zero quantity is `0`.
fn qty(v: &Value, ptr: &str) -> String {
    scalar(v.pointer(ptr)).unwrap_or_else(|| "0".to_string())
}

/// One metric as upstream's `formatHPAMetrics` writes it; `status` is the matching entry of
/// `status.currentMetrics`, if any.
fn format_metric(spec: &Value, status: Option<&Value>) -> String {
    const UNKNOWN: &str = "<unknown>";
    let current = |source: &str, field: &str| -> Option<String> {
        let s = status?.get(source).filter(|s| !s.is_null())?;
        Some(match s.pointer(&format!("/current/{field}")) {
            Some(v) => scalar(Some(v)).unwrap_or_else(|| "0".to_string()),
            None => "0".to_string(),
        })
    };
    let kind = text(spec, "/type");
    match kind {
        "External" | "Object" => {
            let source = if kind == "External" {
                "external"
            } else {
                "object"
            };
            let target = format!("/{source}/target");
            if present(spec, &format!("{target}/averageValue")) {
                let cur = status
                    .and_then(|s| s.get(source))
                    .and_then(|s| s.pointer("/current/averageValue"))
                    .and_then(|v| scalar(Some(v)))
                    .unwrap_or_else(|| UNKNOWN.to_string());
                format!(
                    "{cur}/{} (avg)",
                    qty(spec, &format!("{target}/averageValue"))
                )
            } else {
                let cur = current(source, "value").unwrap_or_else(|| UNKNOWN.to_string());
                format!("{cur}/{}", qty(spec, &format!("{target}/value")))
            }
        }
        "Pods" => {
            let cur = current("pods", "averageValue").unwrap_or_else(|| UNKNOWN.to_string());
            format!("{cur}/{}", qty(spec, "/pods/target/averageValue"))
        }
        "Resource" | "ContainerResource" => {
            let source = if kind == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let resource = text(spec, &format!("/{source}/name"));
            let target = format!("/{source}/target");
            if present(spec, &format!("{target}/averageValue")) {
                let cur = current(source, "averageValue").unwrap_or_else(|| UNKNOWN.to_string());
                format!(
                    "{resource}: {cur}/{}",
                    qty(spec, &format!("{target}/averageValue"))
                )
            } else {
                let cur = status
                    .and_then(|s| s.get(source))
                    .and_then(|s| s.pointer("/current/averageUtilization"))
                    .and_then(Value::as_i64)
                    .map_or_else(|| UNKNOWN.to_string(), |u| format!("{u}%"));
                let goal = opt_int(spec, &format!("{target}/averageUtilization"))
                    .map_or_else(|| "<auto>".to_string(), |u| format!("{u}%"));
                format!("{resource}: {cur}/{goal}")
            }
        }
        _ => "<unknown type>".to_string(),
    }
}

/// Upstream's `formatHPAMetrics`: the first two metrics, `+ N more...` for the rest.
fn format_metrics(hpa: &Value) -> String {
    const MAX: usize = 2;
    let specs = list(hpa, "/spec/metrics");
    if specs.is_empty() {
        return "<none>".to_string();
    }
    let statuses = list(hpa, "/status/currentMetrics");
    let shown: Vec<String> = specs
        .iter()
        .enumerate()
        .take(MAX)
        .map(|(i, spec)| format_metric(spec, statuses.get(i)))
        .collect();
    let joined = shown.join(", ");
    if specs.len() > MAX {
        format!("{joined} + {} more...", specs.len() - MAX)
    } else {
        joined
    }
}

fn hpa_cells(hpa: &Value, now: Timestamp) -> Vec<Value> {
    // upstream prints the internal object, so v1 shows the metrics v2 does
    let v2;
    let hpa = match hpa["apiVersion"].as_str() {
        Some("autoscaling/v1") => {
            v2 = crate::autoscaling::hpa_from_v1(hpa).unwrap_or_else(|_| hpa.clone());
            &v2
        }
        _ => hpa,
    };
    let reference = format!(
        "{}/{}",
        text(hpa, "/spec/scaleTargetRef/kind"),
        text(hpa, "/spec/scaleTargetRef/name")
    );
    let min =
        opt_int(hpa, "/spec/minReplicas").map_or_else(|| "<unset>".to_string(), |m| m.to_string());
    vec![
        name(hpa).into(),
        reference.into(),
        format_metrics(hpa).into(),
        min.into(),
        int(hpa, "/spec/maxReplicas").into(),
        int(hpa, "/status/currentReplicas").into(),
        age(hpa, now),
    ]
}

pub(super) static INGRESSES: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Class", "string", 0, "The name of the IngressClass."),
        Column::new(
            "Hosts",
            "string",
            0,
            "Hosts that incoming requests are matched against before the ingress rule",
        ),
        Column::new(
            "Address",
            "string",
            0,
            "Address is a list containing ingress points for the load-balancer",
        ),
        Column::new(
            "Ports",
            "string",
            0,
            "Ports of TLS configurations that open",
        ),
        AGE,
    ],
    cells: ingress_cells,
};

/// Upstream's `formatHosts`: the first three rule hosts, `*` when none.
fn hosts(ingress: &Value) -> String {
    const MAX: usize = 3;
    let rules = list(ingress, "/spec/rules");
    let mut shown: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if shown.len() == MAX {
            more = true;
        }
        let host = text(rule, "/host");
        if !more && !host.is_empty() {
            shown.push(host);
        }
    }
    if shown.is_empty() {
        return "*".to_string();
    }
    let joined = shown.join(",");
    if more {
        format!("{joined} + {} more...", rules.len() - MAX)
    } else {
        joined
    }
}

fn ingress_cells(ingress: &Value, now: Timestamp) -> Vec<Value> {
    let class = match ingress
        .pointer("/spec/ingressClassName")
        .and_then(Value::as_str)
    {
        Some(c) => c.to_string(),
        None => "<none>".to_string(),
    };
    let mut addresses: Vec<&str> = list(ingress, "/status/loadBalancer/ingress")
        .iter()
        .map(|lb| match text(lb, "/ip") {
            "" => text(lb, "/hostname"),
            ip => ip,
        })
        .filter(|a| !a.is_empty())
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    let ports = if list(ingress, "/spec/tls").is_empty() {
        "80"
    } else {
        "80, 443"
    };
    vec![
        name(ingress).into(),
        class.into(),
        hosts(ingress).into(),
        addresses.join(",").into(),
        ports.into(),
        age(ingress, now),
    ]
}

pub(super) static INGRESS_CLASSES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Controller",
            "string",
            0,
            "Controller that is responsible for handling this class",
        ),
        Column::new(
            "Parameters",
            "string",
            0,
            "A reference to a resource with additional parameters",
        ),
        AGE,
    ],
    cells: |class, now| {
        let parameters = match object(class, "/spec/parameters") {
            None => "<none>".to_string(),
            Some(_) => {
                let mut p = text(class, "/spec/parameters/kind").to_string();
                if let Some(group) = class
                    .pointer("/spec/parameters/apiGroup")
                    .and_then(Value::as_str)
                {
                    p = format!("{p}.{group}");
                }
                format!("{p}/{}", text(class, "/spec/parameters/name"))
            }
        };
        vec![
            name(class).into(),
            text(class, "/spec/controller").into(),
            parameters.into(),
            age(class, now),
        ]
    },
};

pub(super) static NETWORK_POLICIES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Pod-Selector",
            "string",
            0,
            "The pods the policy applies to.",
        ),
        AGE,
    ],
    cells: |policy, now| {
        let selector = policy
            .pointer("/spec/podSelector")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}));
        vec![
            name(policy).into(),
            label_selector(Some(&selector)).into(),
            age(policy, now),
        ]
    },
};

pub(super) static RUNTIME_CLASSES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Handler",
            "string",
            0,
            "The CRI handler that runs the pods.",
        ),
        AGE,
    ],
    cells: |class, now| {
        vec![
            name(class).into(),
            text(class, "/handler").into(),
            age(class, now),
        ]
    },
};

#[cfg(test)]
mod tests {
    use super::super::row;
    use serde_json::json;

    fn now() -> jiff::Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn autoscalers_show_the_first_two_metrics() {
        let hpa = json!({"metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 1,
                     "maxReplicas": 5, "metrics": [
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 50}}},
                {"type": "Pods", "pods": {"target": {"averageValue": "1k"}}},
                {"type": "External", "external": {"target": {"averageValue": "30"}}}]},
            "status": {"currentReplicas": 2, "currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": 12}}}]}});
        assert_eq!(
            row("autoscaling", "horizontalpodautoscalers", &hpa, now())[1..6],
            [
                json!("Deployment/web"),
                json!("cpu: 12%/50%, <unknown>/1k + 1 more..."),
                json!("1"),
                json!(5),
                json!(2)
            ]
        );
        // through autoscaling/v1, the same cells (with the CPU target last, where the v1 view
        // puts it)
        let cpu_last = json!({"metadata": {"name": "web"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5,
                     "metrics": [
                {"type": "Pods", "pods": {"metric": {"name": "qps"},
                    "target": {"type": "AverageValue", "averageValue": "1k"}}},
                {"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": 50}}}]},
            "status": {"currentReplicas": 2, "currentMetrics": [
                {"type": "Pods", "pods": {"metric": {"name": "qps"},
                    "current": {"averageValue": "900"}}},
                {"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": 12}}}]}});
        let v1 = crate::autoscaling::hpa_to_v1(&cpu_last);
        assert!(v1["spec"].get("metrics").is_none());
        assert_eq!(
            row("autoscaling", "horizontalpodautoscalers", &v1, now())[1..6],
            [
                json!("Deployment/web"),
                json!("900/1k, cpu: 12%/50%"),
                json!("<unset>"),
                json!(5),
                json!(2)
            ]
        );
        let bare = json!({"spec": {"metrics": []}});
        assert_eq!(
            row("autoscaling", "horizontalpodautoscalers", &bare, now())[2..4],
            [json!("<none>"), json!("<unset>")]
        );
    }

    #[test]
    fn ingresses_show_class_hosts_addresses_and_ports() {
        let ingress = json!({"metadata": {"name": "web"},
            "spec": {"rules": [{"host": "a.example.com"}, {}, {"host": "b.example.com"},
                               {"host": "c.example.com"}, {"host": "d.example.com"}],
                     "tls": [{"hosts": ["a.example.com"]}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.2"}, {"hostname": "lb.example.com"},
                                                    {"ip": "10.0.0.2"}]}}});
        assert_eq!(
            row("networking.k8s.io", "ingresses", &ingress, now())[1..5],
            [
                json!("<none>"),
                json!("a.example.com,b.example.com,c.example.com + 2 more..."),
                json!("10.0.0.2,lb.example.com"),
                json!("80, 443")
            ]
        );
        let catch_all = json!({"spec": {"ingressClassName": "nginx",
                                        "defaultBackend": {"service": {"name": "web"}}}});
        assert_eq!(
            row("networking.k8s.io", "ingresses", &catch_all, now())[1..5],
            [json!("nginx"), json!("*"), json!(""), json!("80")]
        );
    }

    #[test]
    fn classes_policies_and_runtime_classes_print_their_one_field() {
        let class = json!({"spec": {"controller": "k8s.io/ingress-nginx",
            "parameters": {"apiGroup": "k8s.example.com", "kind": "Params", "name": "p"}}});
        assert_eq!(
            row("networking.k8s.io", "ingressclasses", &class, now())[1..3],
            [
                json!("k8s.io/ingress-nginx"),
                json!("Params.k8s.example.com/p")
            ]
        );
        let policy = json!({"spec": {"podSelector": {"matchLabels": {"app": "db"}}}});
        assert_eq!(
            row("networking.k8s.io", "networkpolicies", &policy, now())[1],
            json!("app=db")
        );
        let deny = json!({"spec": {"podSelector": {}}});
        assert_eq!(
            row("networking.k8s.io", "networkpolicies", &deny, now())[1],
            json!("<none>")
        );
        let rc = json!({"handler": "runsc"});
        assert_eq!(
            row("node.k8s.io", "runtimeclasses", &rc, now())[1],
            json!("runsc")
        );
    }
}
