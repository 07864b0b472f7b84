//! Admission: before it runs a pod the API server bound to this node, the kubelet checks that
//! the pod can run here beside the pods it admitted before (upstream's
//! `predicateAdmitHandler`): the `kubernetes.io/os` label and `spec.os`, the node's
//! allocatable resources, node affinity, host ports (the scheduler's own checks, which upstream's
//! kubelet imports from the scheduler and Skiff's from the component helpers), NoExecute
//! taints, `supplementalGroupsPolicy: Strict` on a runtime that cannot honour it, and (checked
//! first, by [`crate::sysctl`]) its sysctls. A pod that fails is never started: it gets a
//! Warning event and `status.phase: Failed` with the first failure's reason (`OutOfcpu`,
//! `NodePorts`, `SysctlForbidden`, …) and the message "Pod was rejected: …".
//!
//! Upstream's *soft* admission is checked at every sync of a Pending pod instead
//! ([`soft_check`]): a pod asking for an AppArmor profile on a host without AppArmor stays
//! Pending with reason `AppArmor`, its containers waiting `Blocked`, and runs nothing.
//!
//! Static pods' mirror pods are not checked (upstream exempts static pods from the taint check
//! and lets critical pods evict others to fit; Skiff admits them as they are).
//!
//! Before those checks, the eviction manager's ([`check_pressure`]): under memory pressure
//! BestEffort pods are refused (unless they tolerate the memory-pressure taint), under disk or
//! PID pressure every pod but critical ones, with reason `Evicted` and "The node had
//! condition: [DiskPressure]. ".

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, PodStatus, Taint};
use parking_lot::RwLock;
use skiff_component_helpers::admission::{self, AdmissionFailure};
use skiff_component_helpers::tolerations::{find_untolerated_taint, tolerated_by_any};

use crate::api::PodEvent;
use crate::eviction::{self, Condition};
use crate::pod_sync::{Outcome, Result as SyncResult, SyncContext};
use crate::security_context::{APPARMOR_ANNOTATION_PREFIX, NodeSecurity};
use crate::static_pods::MIRROR_ANNOTATION;
use crate::status::{self, ContainerView, PodView, Waiting};

/// Why a pod may not run here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

/// The Node as this kubelet last saw it (registered, then returned by each status post).
#[derive(Clone)]
pub struct NodeView(Arc<RwLock<Arc<Node>>>);

impl NodeView {
    pub fn new(node: Node) -> NodeView {
        NodeView(Arc::new(RwLock::new(Arc::new(node))))
    }

    pub fn get(&self) -> Arc<Node> {
        self.0.read().clone()
    }

    pub fn set(&self, node: Node) {
        *self.0.write() = Arc::new(node);
    }
}

/// Whether a pod the watch shows for the first time must be admitted: one not yet started,
/// finished or being deleted, and not a static pod's mirror.
pub fn needs_admission(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    pod.metadata.deletion_timestamp.is_none()
        && status.and_then(|s| s.start_time.as_ref()).is_none()
        && !matches!(phase, Some("Succeeded" | "Failed"))
        && !pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
}

/// Checks `pod` against `node` and the pods admitted before it.
pub fn check(pod: &Pod, node: &Node, admitted: &[Arc<Pod>]) -> Result<(), Rejection> {
    let os_label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get("kubernetes.io/os"));
    if os_label.is_some_and(|os| os != "linux") {
        return Err(Rejection {
            reason: "PodOSSelectorNodeLabelDoesNotMatch".into(),
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .into(),
        });
    }
    let spec = pod.spec.as_ref();
    if spec
        .and_then(|s| s.os.as_ref())
        .is_some_and(|os| os.name != "linux")
    {
        return Err(Rejection {
            reason: "PodOSNotSupported".into(),
            message: "Failed to admit pod as the OS field doesn't match node OS".into(),
        });
    }
    if strict_groups_unsupported(pod, node) {
        return Err(Rejection {
            reason: "SupplementalGroupsPolicyNotSupported".into(),
            message: "SupplementalGroupsPolicy=Strict is not supported in this node".into(),
        });
    }
    let admitted = admitted.iter().map(|p| &**p);
    if let Some(failure) = admission::check(pod, node, admitted).into_iter().next() {
        return Err(match failure {
            AdmissionFailure::Insufficient {
                resource,
                requested,
                used,
                capacity,
            } => Rejection {
                reason: format!("OutOf{resource}"),
                message: format!(
                    "Node didn't have enough resource: {resource}, requested: {requested}, \
                     used: {used}, capacity: {capacity}"
                ),
            },
            AdmissionFailure::Predicate { plugin, reason } => predicate(plugin, &reason),
        });
    }
    let taints = node.spec.as_ref().and_then(|s| s.taints.as_deref());
    let tolerations = spec.and_then(|s| s.tolerations.as_deref()).unwrap_or(&[]);
    if find_untolerated_taint(taints.unwrap_or(&[]), tolerations, |t| {
        t.effect == "NoExecute"
    })
    .is_some()
    {
        return Err(predicate(
            "TaintToleration",
            "node(s) had taints that the pod didn't tolerate",
        ));
    }
    Ok(())
}

/// Upstream's eviction admission (`managerImpl.Admit`): under pressure, critical pods are
/// admitted; under memory pressure alone, pods other than BestEffort ones, and BestEffort ones
/// that tolerate the `node.kubernetes.io/memory-pressure` NoSchedule taint; nothing else.
pub fn check_pressure(pod: &Pod, pressure: &BTreeSet<Condition>) -> Result<(), Rejection> {
    if pressure.is_empty() || eviction::rank::is_critical(pod) {
        return Ok(());
    }
    if pressure.len() == 1 && pressure.contains(&Condition::MemoryPressure) {
        let best_effort =
            pod.status.as_ref().and_then(|s| s.qos_class.as_deref()) == Some("BestEffort");
        let memory_pressure = Taint {
            key: "node.kubernetes.io/memory-pressure".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.as_deref());
        if !best_effort || tolerated_by_any(tolerations.unwrap_or(&[]), &memory_pressure) {
            return Ok(());
        }
    }
    let names: Vec<&str> = pressure.iter().map(|c| c.type_name()).collect();
    Err(Rejection {
        reason: eviction::REASON.into(),
        message: format!("The node had condition: [{}]. ", names.join(" ")),
    })
}

/// Whether the pod asks for `supplementalGroupsPolicy: Strict` and the node's runtime does
/// not say it supports it (`status.features.supplementalGroupsPolicy`; containerd 1.6 says
/// nothing), as upstream's `rejectPodAdmissionBasedOnSupplementalGroupsPolicy`.
fn strict_groups_unsupported(pod: &Pod, node: &Node) -> bool {
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.supplemental_groups_policy.as_deref());
    let supported = node
        .status
        .as_ref()
        .and_then(|s| s.features.as_ref())
        .and_then(|f| f.supplemental_groups_policy)
        .unwrap_or(false);
    policy == Some("Strict") && !supported
}

/// Upstream's soft admission, checked while the pod is Pending: on a host without AppArmor, a
/// pod asking for any AppArmor profile but `Unconfined` (pod or container field, or the
/// deprecated annotation) cannot run.
pub fn soft_check(pod: &Pod, node: &NodeSecurity) -> Result<(), Rejection> {
    let pending = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if node.apparmor_enabled || !matches!(pending, None | Some("Pending")) {
        return Ok(());
    }
    let confined = |p: Option<&k8s_openapi::api::core::v1::AppArmorProfile>| {
        p.is_some_and(|p| p.type_ != "Unconfined")
    };
    let spec = pod.spec.as_ref();
    let pod_level = spec
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.app_armor_profile.as_ref());
    let containers = spec.into_iter().flat_map(|s| {
        let init = s.init_containers.iter().flatten();
        let ephemeral = s.ephemeral_containers.iter().flatten();
        init.chain(&s.containers)
            .map(|c| c.security_context.as_ref())
            .chain(ephemeral.map(|c| c.security_context.as_ref()))
    });
    let mut fields = std::iter::once(pod_level)
        .chain(containers.map(|sc| sc.and_then(|s| s.app_armor_profile.as_ref())));
    let annotated = pod
        .metadata
        .annotations
        .iter()
        .flatten()
        .any(|(k, v)| k.starts_with(APPARMOR_ANNOTATION_PREFIX) && v != "unconfined");
    if fields.any(confined) || annotated {
        return Err(Rejection {
            reason: "AppArmor".into(),
            message: "Cannot enforce AppArmor: AppArmor is not enabled on the host".into(),
        });
    }
    Ok(())
}

impl SyncContext {
    /// Holds back a pod that soft admission refuses, as upstream's `SyncPod` does: whatever of
    /// it runs is stopped, and it stays Pending with the refusal's reason and message, its
    /// containers waiting `Blocked`, until it is deleted.
    pub(crate) async fn sync_blocked(&self, pod: &Pod, blocked: Rejection) -> SyncResult<Outcome> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let sandboxes = self
            .runtime
            .list_pod_sandboxes(crate::pod_sync::uid_labels(&uid))
            .await
            .map_err(self.runtime_err(pod))?;
        if !sandboxes.is_empty() {
            let grace = pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30);
            self.kill_pod(pod, grace).await?;
        }
        let now = (self.clock)();
        let spec = pod.spec.clone().unwrap_or_default();
        let view_of = |c: &k8s_openapi::api::core::v1::Container| ContainerView {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            current: None,
            previous: None,
            waiting: Some(Waiting {
                reason: "Blocked".into(),
                message: String::new(),
            }),
            probed: None,
            resources: None,
        };
        let (runs, ids) = (Default::default(), Default::default());
        let nothing_ran = crate::actions::Observed {
            runs: &runs,
            in_sandbox: &ids,
            startup_passed: &ids,
        };
        let view = PodView {
            sandbox: None,
            init_containers: spec.init_containers.iter().flatten().map(view_of).collect(),
            containers: spec.containers.iter().map(view_of).collect(),
            ephemeral_containers: crate::ephemeral::containers(&spec)
                .iter()
                .map(view_of)
                .collect(),
            init: crate::actions::plan(pod, nothing_ran, now).init,
            host_ip: self.host_ip.clone(),
            runtime_name: self.runtime_name.clone(),
            resize_conditions: Vec::new(),
        };
        let mut new_status = status::pod_status(pod, &view, now);
        new_status.phase = Some("Pending".into());
        new_status.reason = Some(blocked.reason);
        new_status.message = Some(blocked.message);
        self.write_status(pod, &new_status).await?;
        Ok(Outcome::Resync(self.sync_frequency))
    }
}

fn predicate(plugin: &str, reason: &str) -> Rejection {
    Rejection {
        reason: plugin.to_string(),
        message: format!("Predicate {plugin} failed: {reason}"),
    }
}

/// Rejects the pod: a Warning event and a Failed status, as upstream's `rejectPod`.
pub async fn reject(ctx: &SyncContext, pod: &Pod, rejection: Rejection) {
    tracing::info!(pod = ?pod.metadata.name, reason = %rejection.reason, "rejecting pod: {}", rejection.message);
    let status = PodStatus {
        phase: Some("Failed".into()),
        reason: Some(rejection.reason.clone()),
        message: Some(format!("Pod was rejected: {}", rejection.message)),
        ..Default::default()
    };
    ctx.api
        .event(
            pod,
            PodEvent::pod_warning(rejection.reason, rejection.message),
        )
        .await;
    let m = &pod.metadata;
    if let Err(e) = ctx
        .api
        .patch_status(
            m.namespace.as_deref().unwrap_or("default"),
            m.name.as_deref().unwrap_or_default(),
            &status,
        )
        .await
    {
        tracing::warn!(error = %e, "writing a rejected pod's status");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(taints: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n", "labels": {"kubernetes.io/os": "linux"}},
            "spec": {"taints": taints},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
        }))
        .unwrap()
    }

    fn pod(name: &str, extra: serde_json::Value) -> Pod {
        let mut pod = json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "image": "busybox"}]},
        });
        if let Some(spec) = extra.get("spec") {
            for (k, v) in spec.as_object().unwrap() {
                pod["spec"][k] = v.clone();
            }
        }
        if let Some(labels) = extra.get("labels") {
            pod["metadata"]["labels"] = labels.clone();
        }
        serde_json::from_value(pod).unwrap()
    }

    fn cpu(name: &str, amount: &str) -> Pod {
        pod(
            name,
            json!({"spec": {"containers": [{"name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": amount}}}]}}),
        )
    }

    fn rejected(pod: &Pod, node: &Node, admitted: &[Pod]) -> (String, String) {
        let admitted: Vec<Arc<Pod>> = admitted.iter().cloned().map(Arc::new).collect();
        let r = check(pod, node, &admitted).expect_err("rejected");
        (r.reason, r.message)
    }

    #[test]
    fn pods_beyond_the_allocatable_are_out_of_that_resource_with_upstream_amounts() {
        let n = node(json!([]));
        assert!(check(&cpu("a", "1500m"), &n, &[]).is_ok());
        assert_eq!(
            rejected(&cpu("b", "1"), &n, &[cpu("a", "1500m")]),
            (
                "OutOfcpu".into(),
                "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: \
                 2000"
                    .into()
            )
        );
    }

    #[test]
    fn a_taken_host_port_and_an_untolerated_no_execute_taint_fail_their_predicates() {
        let port = json!({"spec": {"containers": [{"name": "c", "image": "busybox",
                          "ports": [{"containerPort": 80, "hostPort": 8080}]}]}});
        let n = node(json!([]));
        assert_eq!(
            rejected(&pod("b", port.clone()), &n, &[pod("a", port)]),
            (
                "NodePorts".into(),
                "Predicate NodePorts failed: node(s) didn't have free ports for the requested \
                 pod ports"
                    .into()
            )
        );

        let tainted = node(json!([{"key": "k", "value": "v", "effect": "NoExecute"},
                                  {"key": "soft", "effect": "NoSchedule"}]));
        assert_eq!(
            rejected(&pod("c", json!({})), &tainted, &[]).0,
            "TaintToleration"
        );
        let tolerating = json!({"spec": {"tolerations": [
            {"key": "k", "operator": "Exists", "effect": "NoExecute"}]}});
        assert!(
            check(&pod("d", tolerating), &tainted, &[]).is_ok(),
            "NoSchedule taints are the scheduler's business"
        );
    }

    #[test]
    fn another_operating_system_is_refused() {
        let n = node(json!([]));
        let windows = json!({"labels": {"kubernetes.io/os": "windows"}});
        assert_eq!(
            rejected(&pod("w", windows), &n, &[]).0,
            "PodOSSelectorNodeLabelDoesNotMatch"
        );
        let os = json!({"spec": {"os": {"name": "windows"}}});
        assert_eq!(rejected(&pod("o", os), &n, &[]).0, "PodOSNotSupported");
        let affinity = json!({"spec": {"nodeSelector": {"disk": "ssd"}}});
        assert_eq!(
            rejected(&pod("s", affinity), &n, &[]),
            (
                "NodeAffinity".into(),
                "Predicate NodeAffinity failed: node(s) didn't match Pod's node \
                 affinity/selector"
                    .into()
            )
        );
    }

    #[test]
    fn pressure_refuses_best_effort_pods_for_memory_and_all_but_critical_ones_for_disk() {
        let memory = BTreeSet::from([Condition::MemoryPressure]);
        let with_qos = |qos: &str, extra: serde_json::Value| {
            let mut p = pod("p", extra);
            p.status = Some(PodStatus {
                qos_class: Some(qos.into()),
                ..Default::default()
            });
            p
        };
        let best_effort = with_qos("BestEffort", json!({}));
        assert_eq!(
            check_pressure(&best_effort, &memory),
            Err(Rejection {
                reason: "Evicted".into(),
                message: "The node had condition: [MemoryPressure]. ".into()
            })
        );
        assert!(check_pressure(&best_effort, &BTreeSet::new()).is_ok());
        assert!(check_pressure(&with_qos("Burstable", json!({})), &memory).is_ok());
        let tolerating = json!({"spec": {"tolerations": [{"key":
            "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}]}});
        assert!(check_pressure(&with_qos("BestEffort", tolerating.clone()), &memory).is_ok());

        let disk = BTreeSet::from([Condition::MemoryPressure, Condition::DiskPressure]);
        let burstable = with_qos("Burstable", json!({}));
        assert_eq!(
            check_pressure(&burstable, &disk).unwrap_err().message,
            "The node had condition: [MemoryPressure DiskPressure]. "
        );
        assert!(check_pressure(&with_qos("BestEffort", tolerating), &disk).is_err());
        let critical = with_qos("Burstable", json!({"spec": {"priority": 2000001000}}));
        assert!(check_pressure(&critical, &disk).is_ok());
    }

    #[test]
    fn strict_supplemental_groups_need_a_runtime_that_says_it_supports_them() {
        let strict = json!({"spec": {"securityContext": {"supplementalGroupsPolicy": "Strict"}}});
        let n = node(json!([]));
        assert_eq!(
            rejected(&pod("s", strict.clone()), &n, &[]),
            (
                "SupplementalGroupsPolicyNotSupported".into(),
                "SupplementalGroupsPolicy=Strict is not supported in this node".into()
            )
        );
        let merge = json!({"spec": {"securityContext": {"supplementalGroupsPolicy": "Merge"}}});
        assert!(check(&pod("m", merge), &n, &[]).is_ok());
        let mut supporting = n;
        supporting.status.as_mut().unwrap().features =
            serde_json::from_value(json!({"supplementalGroupsPolicy": true})).unwrap();
        assert!(check(&pod("s", strict), &supporting, &[]).is_ok());
    }

    #[test]
    fn apparmor_profiles_other_than_unconfined_need_apparmor_on_the_host() {
        let without = NodeSecurity::default();
        let blocked = |extra: serde_json::Value| soft_check(&pod("a", extra), &without).err();
        let rejection = blocked(
            json!({"spec": {"containers": [{"name": "c", "image": "busybox",
            "securityContext": {"appArmorProfile": {"type": "Localhost",
                                                    "localhostProfile": "p"}}}]}}),
        )
        .expect("blocked");
        assert_eq!(
            (rejection.reason.as_str(), rejection.message.as_str()),
            (
                "AppArmor",
                "Cannot enforce AppArmor: AppArmor is not enabled on the host"
            )
        );
        let pod_level =
            json!({"spec": {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}});
        assert!(blocked(pod_level.clone()).is_some());
        let unconfined =
            json!({"spec": {"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}});
        assert!(blocked(unconfined).is_none());
        assert!(blocked(json!({})).is_none());

        let mut annotated = pod("b", json!({}));
        annotated.metadata.annotations = Some(
            [(
                format!("{APPARMOR_ANNOTATION_PREFIX}c"),
                "runtime/default".to_string(),
            )]
            .into(),
        );
        assert!(soft_check(&annotated, &without).is_err());

        let with = NodeSecurity {
            apparmor_enabled: true,
            ..NodeSecurity::default()
        };
        assert!(soft_check(&pod("a", pod_level.clone()), &with).is_ok());
        let mut running = pod("r", pod_level);
        running.status = Some(PodStatus {
            phase: Some("Running".into()),
            ..Default::default()
        });
        assert!(
            soft_check(&running, &without).is_ok(),
            "a running pod is not checked again"
        );
    }

    #[test]
    fn started_finished_deleted_and_mirror_pods_are_not_admitted_again() {
        let fresh = pod("p", json!({}));
        assert!(needs_admission(&fresh));
        let mut started = fresh.clone();
        started.status = Some(PodStatus {
            start_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::now(),
            )),
            ..Default::default()
        });
        assert!(!needs_admission(&started));
        let mut failed = fresh.clone();
        failed.status = Some(PodStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        assert!(!needs_admission(&failed));
        let mut mirror = fresh;
        mirror.metadata.annotations =
            Some([(MIRROR_ANNOTATION.to_string(), "h".to_string())].into());
        assert!(!needs_admission(&mirror));
    }
}
