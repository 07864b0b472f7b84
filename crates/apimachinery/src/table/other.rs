//! Tables of the smaller groups: leases (coordination.k8s.io), endpoint slices
//! (discovery.k8s.io), pod disruption budgets (policy), role and cluster role bindings
//! (rbac.authorization.k8s.io), priority classes (scheduling.k8s.io), certificate signing
//! requests (certificates.k8s.io), the admission configurations
//! (admissionregistration.k8s.io), API services (apiregistration.k8s.io) and API Priority and
//! Fairness's flow schemas and priority levels (flowcontrol.apiserver.k8s.io).

use super::format::list_with_more;
use super::value::{age, flag, int, list, name, object, opt_int, scalar, text};
use super::{AGE, Column, NAME, Printer};
use crate::labels::Selector;
use jiff::Timestamp;
use serde_json::Value;

pub(super) static LEASES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Holder",
            "string",
            0,
            "Identity of the lease's current holder.",
        ),
        AGE,
    ],
    cells: |lease, now| {
        vec![
            name(lease).into(),
            text(lease, "/spec/holderIdentity").into(),
            age(lease, now),
        ]
    },
};

pub(super) static CERTIFICATE_SIGNING_REQUESTS: Printer = Printer {
    columns: &[
        NAME,
        AGE,
        Column::new("SignerName", "string", 0, "The signer the request names."),
        Column::new(
            "Requestor",
            "string",
            0,
            "The user who created the request.",
        ),
        Column::new(
            "RequestedDuration",
            "string",
            0,
            "The certificate lifetime the request asks for.",
        ),
        Column::new(
            "Condition",
            "string",
            0,
            "Pending, Approved or Denied, then Failed and Issued where they apply.",
        ),
    ],
    cells: |csr, now| {
        let requested = opt_int(csr, "/spec/expirationSeconds").map_or_else(
            || "<none>".to_string(),
            |s| super::duration::human_duration(jiff::SignedDuration::from_secs(s)),
        );
        vec![
            name(csr).into(),
            age(csr, now),
            text(csr, "/spec/signerName").into(),
            text(csr, "/spec/username").into(),
            requested.into(),
            csr_condition(csr).into(),
        ]
    },
};

/// Upstream's `extractCSRStatus`: Denied over Approved over Pending, then `,Failed` and
/// `,Issued`.
fn csr_condition(csr: &Value) -> String {
    let has = |kind: &str| {
        list(csr, "/status/conditions")
            .iter()
            .any(|c| c["type"] == kind)
    };
    let mut status = if has("Denied") {
        "Denied"
    } else if has("Approved") {
        "Approved"
    } else {
        "Pending"
    }
    .to_string();
    if has("Failed") {
        status += ",Failed";
    }
    if !text(csr, "/status/certificate").is_empty() {
        status += ",Issued";
    }
    status
}

pub(super) static ENDPOINT_SLICES: Printer = Printer {
    columns: &[
        NAME,
        Column::new("AddressType", "string", 0, "IPv4, IPv6 or FQDN."),
        Column::new(
            "Ports",
            "string",
            0,
            "The first ports (number, else name, else *), and how many more.",
        ),
        Column::new(
            "Endpoints",
            "string",
            0,
            "The first endpoint addresses, and how many more.",
        ),
        AGE,
    ],
    cells: endpoint_slice_cells,
};

fn endpoint_slice_cells(slice: &Value, now: Timestamp) -> Vec<Value> {
    const MAX: usize = 3;
    let ports: Vec<String> = list(slice, "/ports")
        .iter()
        .map(
            |p| match (opt_int(p, "/port"), p.get("name").and_then(Value::as_str)) {
                (Some(port), _) => port.to_string(),
                (None, Some(name)) => name.to_string(),
                (None, None) => "*".to_string(),
            },
        )
        .collect();
    let addresses: Vec<String> = list(slice, "/endpoints")
        .iter()
        .flat_map(|e| list(e, "/addresses"))
        .map(|a| a.as_str().unwrap_or("").to_string())
        .collect();
    let first = |all: &[String]| {
        let shown = &all[..all.len().min(MAX)];
        list_with_more(shown, all.len() > MAX, all.len(), MAX)
    };
    vec![
        name(slice).into(),
        text(slice, "/addressType").into(),
        first(&ports).into(),
        first(&addresses).into(),
        age(slice, now),
    ]
}

pub(super) static POD_DISRUPTION_BUDGETS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Min Available",
            "string",
            0,
            "Pods that must stay available, as a number or percentage.",
        ),
        Column::new(
            "Max Unavailable",
            "string",
            0,
            "Pods that may be unavailable, as a number or percentage.",
        ),
        Column::new(
            "Allowed Disruptions",
            "integer",
            0,
            "Pods that may be disrupted right now.",
        ),
        AGE,
    ],
    cells: |pdb, now| {
        let int_or_percent = |ptr: &str| scalar(pdb.pointer(ptr)).unwrap_or_else(|| "N/A".into());
        vec![
            name(pdb).into(),
            int_or_percent("/spec/minAvailable").into(),
            int_or_percent("/spec/maxUnavailable").into(),
            int(pdb, "/status/disruptionsAllowed").into(),
            age(pdb, now),
        ]
    },
};

/// One table for RoleBindings and ClusterRoleBindings; only the descriptions differ upstream.
pub(super) static ROLE_BINDINGS: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Role", "string", 0, "The role bound, as Kind/name."),
        AGE,
        Column::new(
            "Users",
            "string",
            1,
            "Users the binding grants the role to.",
        ),
        Column::new(
            "Groups",
            "string",
            1,
            "Groups the binding grants the role to.",
        ),
        Column::new(
            "ServiceAccounts",
            "string",
            1,
            "Service accounts the binding grants the role to, as namespace/name.",
        ),
    ],
    cells: role_binding_cells,
};

/// Upstream's `rbac.SubjectsStrings`, each list joined with `, `.
fn role_binding_cells(binding: &Value, now: Timestamp) -> Vec<Value> {
    let (mut users, mut groups, mut service_accounts) = (vec![], vec![], vec![]);
    for subject in list(binding, "/subjects") {
        let subject_name = text(subject, "/name");
        match text(subject, "/kind") {
            "ServiceAccount" => {
                service_accounts.push(format!("{}/{subject_name}", text(subject, "/namespace")))
            }
            "User" => users.push(subject_name.to_string()),
            "Group" => groups.push(subject_name.to_string()),
            _ => {}
        }
    }
    let role = format!(
        "{}/{}",
        text(binding, "/roleRef/kind"),
        text(binding, "/roleRef/name")
    );
    vec![
        name(binding).into(),
        role.into(),
        age(binding, now),
        users.join(", ").into(),
        groups.join(", ").into(),
        service_accounts.join(", ").into(),
    ]
}

/// Upstream's printer for both webhook configuration kinds: how many webhooks each holds.
pub(super) static WEBHOOK_CONFIGURATIONS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Webhooks",
            "integer",
            0,
            "Webhooks indicates the number of webhooks in the configuration.",
        ),
        AGE,
    ],
    cells: |c, now| {
        let count = c
            .get("webhooks")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        vec![name(c).into(), count.into(), age(c, now)]
    },
};

/// Upstream's ValidatingAdmissionPolicy printer: how many validations, and the param kind.
pub(super) static VALIDATING_ADMISSION_POLICIES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Validations",
            "integer",
            0,
            "Validations indicates the number of validation rules defined in this configuration",
        ),
        Column::new(
            "ParamKind",
            "string",
            0,
            "ParamKind specifies the kind of resources used to parameterize this policy",
        ),
        AGE,
    ],
    cells: |p, now| {
        let param_kind = match object(p, "/spec/paramKind") {
            Some(_) => format!(
                "{}/{}",
                text(p, "/spec/paramKind/apiVersion"),
                text(p, "/spec/paramKind/kind")
            ),
            None => "<unset>".to_string(),
        };
        vec![
            name(p).into(),
            list(p, "/spec/validations").len().into(),
            param_kind.into(),
            age(p, now),
        ]
    },
};

/// Upstream's ValidatingAdmissionPolicyBinding printer: the policy and the param reference
/// (`namespace/name`, `*/name` without a namespace, else the selector).
pub(super) static VALIDATING_ADMISSION_POLICY_BINDINGS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "PolicyName",
            "string",
            0,
            "PolicyName indicates the policy definition which the policy binding binded to",
        ),
        Column::new(
            "ParamRef",
            "string",
            0,
            "ParamRef indicates the param resource which sets the configration param",
        ),
        AGE,
    ],
    cells: |b, now| {
        let param_ref = match object(b, "/spec/paramRef") {
            None => "<unset>".to_string(),
            Some(_) if !text(b, "/spec/paramRef/name").is_empty() => {
                match text(b, "/spec/paramRef/namespace") {
                    "" => format!("*/{}", text(b, "/spec/paramRef/name")),
                    ns => format!("{ns}/{}", text(b, "/spec/paramRef/name")),
                }
            }
            Some(r) => r.get("selector").map_or_else(
                || "<unset>".to_string(),
                |s| {
                    Selector::from_label_selector(s)
                        .map(|s| s.to_string())
                        .unwrap_or_default()
                },
            ),
        };
        vec![
            name(b).into(),
            text(b, "/spec/policyName").into(),
            param_ref.into(),
            age(b, now),
        ]
    },
};

pub(super) static PRIORITY_CLASSES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Value",
            "integer",
            0,
            "The priority pods of this class get.",
        ),
        Column::new(
            "Global-Default",
            "boolean",
            0,
            "Whether pods without a priority class get this one.",
        ),
        AGE,
        Column::new(
            "PreemptionPolicy",
            "string",
            0,
            "Whether pods of this class may preempt lower-priority pods.",
        ),
    ],
    cells: |pc, now| {
        // The decoder defaults preemptionPolicy to PreemptLowerPriority.
        let policy = match text(pc, "/preemptionPolicy") {
            "" => "PreemptLowerPriority",
            p => p,
        };
        vec![
            name(pc).into(),
            int(pc, "/value").into(),
            flag(pc, "/globalDefault").into(),
            age(pc, now),
            policy.into(),
        ]
    },
};

pub(super) static FLOW_SCHEMAS: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "PriorityLevel",
            "string",
            0,
            "The priority level configuration the matching requests are assigned to.",
        ),
        Column::new(
            "MatchingPrecedence",
            "string",
            0,
            "The order the flow schemas are tried in (lowest first).",
        ),
        Column::new(
            "DistinguisherMethod",
            "string",
            0,
            "How matching requests are split into flows (ByUser, ByNamespace).",
        ),
        AGE,
        Column::new(
            "MissingPL",
            "string",
            0,
            "Whether the priority level this flow schema names is missing (its Dangling condition).",
        ),
    ],
    cells: |fs, now| {
        let method = match text(fs, "/spec/distinguisherMethod/type") {
            "" => "<none>",
            m => m,
        };
        // "?" until the API server has written the Dangling condition, as upstream prints it
        let missing = list(fs, "/status/conditions")
            .iter()
            .find(|c| c["type"] == "Dangling")
            .map_or("?", |c| c["status"].as_str().unwrap_or("?"));
        vec![
            name(fs).into(),
            text(fs, "/spec/priorityLevelConfiguration/name").into(),
            int(fs, "/spec/matchingPrecedence").into(),
            method.into(),
            age(fs, now),
            missing.into(),
        ]
    },
};

pub(super) static PRIORITY_LEVEL_CONFIGURATIONS: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Type", "string", 0, "Exempt (never limited) or Limited."),
        Column::new(
            "NominalConcurrencyShares",
            "string",
            0,
            "This level's share of the server's concurrency limit.",
        ),
        Column::new(
            "Queues",
            "string",
            0,
            "The number of queues requests wait in.",
        ),
        Column::new(
            "HandSize",
            "string",
            0,
            "The number of queues a flow is shuffle-sharded over.",
        ),
        Column::new(
            "QueueLengthLimit",
            "string",
            0,
            "The most requests waiting in one queue.",
        ),
        AGE,
    ],
    cells: |pl, now| {
        let none = || Value::from("<none>");
        let limited = pl.pointer("/spec/limited").filter(|l| l.is_object());
        let at = |ptr: &str| limited.and_then(|l| l.pointer(ptr)).cloned();
        let queuing = |field: &str| at(&format!("/limitResponse/queuing/{field}"));
        vec![
            name(pl).into(),
            text(pl, "/spec/type").into(),
            limited.map_or_else(none, |_| {
                at("/nominalConcurrencyShares").unwrap_or_else(none)
            }),
            queuing("queues").unwrap_or_else(none),
            queuing("handSize").unwrap_or_else(none),
            queuing("queueLengthLimit").unwrap_or_else(none),
            age(pl, now),
        ]
    },
};

pub(super) static API_SERVICES: Printer = Printer {
    columns: &[
        NAME,
        Column::new(
            "Service",
            "string",
            0,
            "The Service that serves this group version, or Local when the API server does.",
        ),
        Column::new(
            "Available",
            "string",
            0,
            "Whether the group version is available, with the reason when it is not.",
        ),
        AGE,
    ],
    cells: |api_service, now| {
        let service = match text(api_service, "/spec/service/name") {
            "" => "Local".to_string(),
            name => format!("{}/{name}", text(api_service, "/spec/service/namespace")),
        };
        // upstream: Unknown without the condition, True, else the status and its reason
        let available = list(api_service, "/status/conditions")
            .iter()
            .find(|c| text(c, "/type") == "Available")
            .map_or_else(
                || "Unknown".to_string(),
                |c| match (text(c, "/status"), text(c, "/reason")) {
                    ("True", _) => "True".to_string(),
                    (status, "") => status.to_string(),
                    (status, reason) => format!("{status} ({reason})"),
                },
            );
        vec![
            name(api_service).into(),
            service.into(),
            available.into(),
            age(api_service, now),
        ]
    },
};

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> Timestamp {
        "2024-05-01T12:00:00Z".parse().unwrap()
    }

    fn meta(name: &str) -> Value {
        json!({"name": name, "creationTimestamp": "2024-05-01T11:59:15Z"})
    }

    #[test]
    fn leases_show_their_holder() {
        let lease = json!({"metadata": meta("kube-scheduler"),
            "spec": {"holderIdentity": "cp-1_8d2f"}});
        assert_eq!(
            (LEASES.cells)(&lease, now()),
            [json!("kube-scheduler"), json!("cp-1_8d2f"), json!("45s")]
        );
        assert_eq!((LEASES.cells)(&json!({}), now())[1], json!(""));
    }

    #[test]
    fn certificate_signing_requests_show_their_decision_and_issue() {
        let csr = json!({"metadata": meta("node-csr-a"),
            "spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet",
                     "username": "system:bootstrap:abcdef", "expirationSeconds": 3600},
            "status": {"certificate": "Y2VydA==", "conditions": [{"type": "Approved"}]}});
        assert_eq!(
            (CERTIFICATE_SIGNING_REQUESTS.cells)(&csr, now()),
            [
                json!("node-csr-a"),
                json!("45s"),
                json!("kubernetes.io/kube-apiserver-client-kubelet"),
                json!("system:bootstrap:abcdef"),
                json!("60m"),
                json!("Approved,Issued")
            ]
        );
        let pending = json!({"metadata": meta("p"), "spec": {}});
        assert_eq!(
            (CERTIFICATE_SIGNING_REQUESTS.cells)(&pending, now())[4..],
            [json!("<none>"), json!("Pending")]
        );
    }

    #[test]
    fn endpoint_slices_list_ports_and_addresses_with_a_count_of_the_rest() {
        let slice = json!({"metadata": meta("web-abc"), "addressType": "IPv4",
            "ports": [{"port": 80, "name": "http"}, {"name": "metrics"}, {}, {"port": 9000}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3"]}]});
        assert_eq!(
            (ENDPOINT_SLICES.cells)(&slice, now()),
            [
                json!("web-abc"),
                json!("IPv4"),
                json!("80,metrics,* + 1 more..."),
                json!("10.0.0.1,10.0.0.2,10.0.0.3"),
                json!("45s")
            ]
        );
        let empty = json!({"metadata": meta("e"), "addressType": "IPv6"});
        assert_eq!(
            (ENDPOINT_SLICES.cells)(&empty, now())[2..4],
            [json!("<unset>"), json!("<unset>")]
        );
    }

    #[test]
    fn pod_disruption_budgets_show_numbers_percentages_or_na() {
        let pdb = json!({"metadata": meta("db"), "spec": {"minAvailable": 2},
            "status": {"disruptionsAllowed": 1}});
        assert_eq!(
            (POD_DISRUPTION_BUDGETS.cells)(&pdb, now()),
            [
                json!("db"),
                json!("2"),
                json!("N/A"),
                json!(1),
                json!("45s")
            ]
        );
        let pct = json!({"metadata": meta("web"), "spec": {"maxUnavailable": "25%"}});
        assert_eq!(
            (POD_DISRUPTION_BUDGETS.cells)(&pct, now())[1..4],
            [json!("N/A"), json!("25%"), json!(0)]
        );
    }

    #[test]
    fn bindings_show_the_role_and_subjects_by_kind() {
        let binding = json!({"metadata": meta("admins"),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [
                {"kind": "User", "name": "alice"}, {"kind": "User", "name": "bob"},
                {"kind": "Group", "name": "ops"},
                {"kind": "ServiceAccount", "namespace": "ci", "name": "deployer"},
                {"kind": "Robot", "name": "r2"}]});
        assert_eq!(
            (ROLE_BINDINGS.cells)(&binding, now()),
            [
                json!("admins"),
                json!("ClusterRole/admin"),
                json!("45s"),
                json!("alice, bob"),
                json!("ops"),
                json!("ci/deployer")
            ]
        );
    }

    #[test]
    fn flow_schemas_and_priority_levels_print_as_kubectl_shows_them() {
        let fs = json!({"metadata": meta("global-default"),
            "spec": {"priorityLevelConfiguration": {"name": "global-default"},
                     "matchingPrecedence": 9900, "distinguisherMethod": {"type": "ByUser"}},
            "status": {"conditions": [{"type": "Dangling", "status": "False"}]}});
        assert_eq!(
            (FLOW_SCHEMAS.cells)(&fs, now()),
            [
                json!("global-default"),
                json!("global-default"),
                json!(9900),
                json!("ByUser"),
                json!("45s"),
                json!("False")
            ]
        );
        let exempt = json!({"metadata": meta("exempt"),
            "spec": {"priorityLevelConfiguration": {"name": "exempt"}, "matchingPrecedence": 1}});
        let cells = (FLOW_SCHEMAS.cells)(&exempt, now());
        assert_eq!((&cells[3], &cells[5]), (&json!("<none>"), &json!("?")));

        let limited = json!({"metadata": meta("workload-low"), "spec": {"type": "Limited",
            "limited": {"nominalConcurrencyShares": 100, "lendablePercent": 90,
                        "limitResponse": {"type": "Queue",
                            "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50}}}}});
        assert_eq!(
            (PRIORITY_LEVEL_CONFIGURATIONS.cells)(&limited, now()),
            [
                json!("workload-low"),
                json!("Limited"),
                json!(100),
                json!(128),
                json!(6),
                json!(50),
                json!("45s")
            ]
        );
        let exempt = json!({"metadata": meta("exempt"), "spec": {"type": "Exempt",
            "exempt": {"nominalConcurrencyShares": 0}}});
        let cells = (PRIORITY_LEVEL_CONFIGURATIONS.cells)(&exempt, now());
        assert_eq!(
            cells[1..6],
            ["Exempt", "<none>", "<none>", "<none>", "<none>"]
        );
    }

    #[test]
    fn priority_classes_show_value_default_and_preemption() {
        let pc = json!({"metadata": meta("system-node-critical"), "value": 2000001000,
            "globalDefault": false, "preemptionPolicy": "Never"});
        assert_eq!(
            (PRIORITY_CLASSES.cells)(&pc, now()),
            [
                json!("system-node-critical"),
                json!(2000001000),
                json!(false),
                json!("45s"),
                json!("Never")
            ]
        );
        assert_eq!(
            (PRIORITY_CLASSES.cells)(&json!({}), now())[4],
            json!("PreemptLowerPriority")
        );
    }

    #[test]
    fn policies_count_validations_and_bindings_show_their_param_reference() {
        let p = json!({"metadata": {"name": "p", "creationTimestamp": "2024-05-01T11:59:15Z"},
                       "spec": {"validations": [{"expression": "true"}],
                                "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}}});
        assert_eq!(
            (VALIDATING_ADMISSION_POLICIES.cells)(&p, now()),
            [json!("p"), json!(1), json!("v1/ConfigMap"), json!("45s")]
        );
        let b = |param_ref: Value| {
            let b = json!({"metadata": {"name": "b", "creationTimestamp": "2024-05-01T11:59:15Z"},
                           "spec": {"policyName": "p", "paramRef": param_ref}});
            (VALIDATING_ADMISSION_POLICY_BINDINGS.cells)(&b, now())[2].clone()
        };
        assert_eq!(
            b(json!({"name": "limits", "namespace": "team"})),
            "team/limits"
        );
        assert_eq!(b(json!({"name": "limits"})), "*/limits");
        assert_eq!(b(json!({"selector": {"matchLabels": {"a": "b"}}})), "a=b");
        assert_eq!(b(Value::Null), "<unset>");
    }

    #[test]
    fn webhook_configurations_count_their_webhooks() {
        let c = json!({"metadata": {"name": "hooks", "creationTimestamp": "2024-05-01T11:59:15Z"},
                       "webhooks": [{"name": "a.x.io"}, {"name": "b.x.io"}]});
        assert_eq!(
            (WEBHOOK_CONFIGURATIONS.cells)(&c, now()),
            [json!("hooks"), json!(2), json!("45s")]
        );
    }

    #[test]
    fn api_services_show_their_service_and_availability_with_the_reason() {
        let local = json!({"metadata": meta("v1.apps"),
            "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local"}]}});
        assert_eq!(
            (API_SERVICES.cells)(&local, now()),
            [
                json!("v1.apps"),
                json!("Local"),
                json!("True"),
                json!("45s")
            ]
        );
        let down = json!({"metadata": meta("v1beta1.metrics.k8s.io"),
            "spec": {"service": {"namespace": "kube-system", "name": "metrics-server"}},
            "status": {"conditions": [{"type": "Available", "status": "False",
                                       "reason": "MissingEndpoints"}]}});
        assert_eq!(
            (API_SERVICES.cells)(&down, now())[1..3],
            [
                json!("kube-system/metrics-server"),
                json!("False (MissingEndpoints)")
            ]
        );
        let new = json!({"metadata": meta("v1.x.io"), "spec": {"service": {"name": "s"}}});
        assert_eq!((API_SERVICES.cells)(&new, now())[2], json!("Unknown"));
    }
}
