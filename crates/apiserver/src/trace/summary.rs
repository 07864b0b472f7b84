//! What a write changed, for the timelines it lands on: the written object's own (for a pod:
//! created, nodeName set, phase X→Y, conditions, container states, deletion; for other kinds:
//! generation, replica counts, phase, conditions), its controller's (a child created, adopted,
//! released or deleted), the involved object's for an Event, and a pod's for an
//! Endpoints/EndpointSlice whose addresses name it (`targetRef`) when that pod's membership or
//! readiness in them changed.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use super::ObjectRef;

/// Facts of a write that the startup stages are derived from.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Facts {
    /// `spec.nodeName` this write set (the binding).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Seconds the pod waited in the scheduler's queue, as the scheduler that bound it measured
    /// them: its Binding's `scheduler.skiff.io/queue-wait-seconds` annotation, read from the
    /// write that set `spec.nodeName` (the API server copies a Binding's annotations onto the
    /// pod).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_wait: Option<f64>,
    /// Pod conditions this write turned True.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub became_true: Vec<String>,
    /// Containers this write shows running that were not before.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub started: Vec<String>,
    /// An Event's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// How a write links timelines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Links {
    /// The object's UID (its own write): requests whose trace ID it is land on its timeline.
    pub uid: Option<String>,
    /// The object's controller (its own write).
    pub owner: Option<ObjectRef>,
    /// The child this write on a controller's timeline is about.
    pub child: Option<ObjectRef>,
}

/// A timeline one write lands on, and what it says there.
#[derive(Debug, Clone, PartialEq)]
pub struct Target {
    pub object: ObjectRef,
    /// Whether the write starts a timeline (writes of the object and of its children do;
    /// Events and endpoints about it do not).
    pub creates: bool,
    pub summary: Vec<String>,
    pub facts: Facts,
    pub links: Links,
}

/// The resource (`replicasets.apps`) of an `apiVersion` and `kind`, and whether it is
/// namespaced: how owner references and Events name the objects they are about.
pub type Resolve<'a> = &'a dyn Fn(&str, &str) -> Option<(String, bool)>;

/// The timelines a write of resource `group`/`plural` from `old` to `new` lands on.
pub fn targets(
    group: &str,
    plural: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    resolve: Resolve,
) -> Vec<Target> {
    match (group, plural) {
        // an Event has no story of its own: it is part of its involved object's
        ("" | "events.k8s.io", "events") => event(new, resolve).into_iter().collect(),
        ("", "endpoints") => endpoints(plural, old, new, endpoints_members),
        ("discovery.k8s.io", "endpointslices") => endpoints(plural, old, new, slice_members),
        _ => {
            let Some(own) = own(group, plural, old, new, resolve) else {
                return Vec::new();
            };
            let child = child(&own.object, old, new, resolve);
            std::iter::once(own).chain(child).collect()
        }
    }
}

/// `v.pointer(path)` for a path without `~` escapes, without the copy of each segment that
/// `Value::pointer` makes: a summary reads a dozen paths on every write.
fn value_at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    debug_assert!(!path.contains('~'), "{path} has escapes");
    if path.is_empty() {
        return Some(v);
    }
    path.strip_prefix('/')?
        .split('/')
        .try_fold(v, |v, segment| match v {
            Value::Object(m) => m.get(segment),
            Value::Array(items) => items.get(segment.parse::<usize>().ok()?),
            _ => None,
        })
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    value_at(v, pointer).and_then(Value::as_str).unwrap_or("")
}

/// The object's own timeline: what the write changed in it.
fn own(
    group: &str,
    plural: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    resolve: Resolve,
) -> Option<Target> {
    let any = new.or(old)?;
    let is_pod = group.is_empty() && plural == "pods";
    let mut summary = Vec::new();
    let mut facts = Facts::default();
    let empty = Value::Null;
    let before = old.unwrap_or(&empty);
    let after = new.unwrap_or(&empty);
    match (old, new) {
        (None, _) => summary.push("created".to_string()),
        (_, None) => summary.push("deleted".to_string()),
        _ => {}
    }
    if new.is_some()
        && value_at(before, "/metadata/deletionTimestamp").is_none()
        && let Some(at) = value_at(after, "/metadata/deletionTimestamp").and_then(Value::as_str)
    {
        summary.push(format!("deletion requested (at {at})"));
    }
    if is_pod {
        let node = str_at(after, "/spec/nodeName");
        if !node.is_empty() && str_at(before, "/spec/nodeName").is_empty() {
            use skiff_component_helpers::binding::{ANN_QUEUE_WAIT, parse_queue_wait};
            summary.push(format!("spec.nodeName={node}"));
            facts.node_name = Some(node.to_string());
            facts.queue_wait = value_at(after, "/metadata/annotations")
                .and_then(|a| a.get(ANN_QUEUE_WAIT))
                .and_then(Value::as_str)
                .and_then(parse_queue_wait);
        }
    } else if old.is_some() && new.is_some() {
        counts(before, after, &mut summary);
    }
    let (p0, p1) = (
        str_at(before, "/status/phase"),
        str_at(after, "/status/phase"),
    );
    if new.is_some() && p0 != p1 && !p1.is_empty() {
        let from = if p0.is_empty() { "(none)" } else { p0 };
        summary.push(format!("phase {from}→{p1}"));
    }
    let (c0, c1) = (conditions(before), conditions(after));
    for (kind, status) in &c1 {
        match c0.get(kind) {
            Some(s) if s == status => {}
            Some(s) => summary.push(format!("{kind} {s}→{status}")),
            None => summary.push(format!("{kind}={status}")),
        }
        if status == "True" && c0.get(kind).is_none_or(|s| s != "True") {
            facts.became_true.push(kind.clone());
        }
    }
    if is_pod {
        let ip = str_at(after, "/status/podIP");
        if !ip.is_empty() && ip != str_at(before, "/status/podIP") {
            summary.push(format!("podIP {ip}"));
        }
        let (s0, s1) = (container_states(before), container_states(after));
        for (name, state) in &s1 {
            let previous = s0.get(name).map(String::as_str).unwrap_or("(none)");
            if previous != state {
                summary.push(format!("container {name}: {previous}→{state}"));
                if state == "running" {
                    facts.started.push(name.clone());
                }
            }
        }
    }
    for (field, what) in [
        ("/metadata/labels", "labels"),
        ("/metadata/annotations", "annotations"),
        ("/metadata/finalizers", "finalizers"),
        ("/metadata/ownerReferences", "ownerReferences"),
    ] {
        if old.is_some() && new.is_some() && value_at(before, field) != value_at(after, field) {
            summary.push(format!("{what} changed"));
        }
    }
    if summary.is_empty() {
        summary.push(if is_pod {
            "other metadata or spec change".to_string()
        } else if before.get("status") != after.get("status") {
            "other status change".to_string()
        } else {
            "other metadata or spec change".to_string()
        });
    }
    let object = ObjectRef::new(
        group,
        plural,
        str_at(any, "/metadata/namespace"),
        str_at(any, "/metadata/name"),
    );
    let uid = str_at(any, "/metadata/uid");
    Some(Target {
        links: Links {
            uid: (!uid.is_empty()).then(|| uid.to_string()),
            owner: controller(any, resolve),
            child: None,
        },
        object,
        creates: true,
        summary,
        facts,
    })
}

/// The counters a controller's story is told in: a new generation (the spec changed) and
/// replica counts, wherever a kind keeps them.
fn counts(before: &Value, after: &Value, summary: &mut Vec<String>) {
    let generation = |v: &Value| value_at(v, "/metadata/generation").and_then(Value::as_i64);
    if let (Some(g0), Some(g1)) = (generation(before), generation(after))
        && g0 != g1
    {
        summary.push(format!("spec changed (generation {g1})"));
    }
    for pointer in [
        "/spec/replicas",
        "/status/replicas",
        "/status/readyReplicas",
        "/status/availableReplicas",
        "/status/updatedReplicas",
        "/status/currentReplicas",
        "/status/desiredReplicas",
        "/status/currentNumberScheduled",
        "/status/numberReady",
        "/status/active",
        "/status/succeeded",
        "/status/failed",
    ] {
        let (n0, n1) = (value_at(before, pointer), value_at(after, pointer));
        if n0 != n1 {
            let show = |n: Option<&Value>| n.map_or("(none)".to_string(), Value::to_string);
            let field = pointer[1..].replace('/', ".");
            summary.push(format!("{field} {}→{}", show(n0), show(n1)));
        }
    }
}

/// The controller (`ownerReferences[].controller: true`) of `obj`.
fn controller(obj: &Value, resolve: Resolve) -> Option<ObjectRef> {
    let owner = value_at(obj, "/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))?;
    let (resource, namespaced) = resolve(str_at(owner, "/apiVersion"), str_at(owner, "/kind"))?;
    Some(ObjectRef {
        resource,
        namespace: if namespaced {
            str_at(obj, "/metadata/namespace").to_string()
        } else {
            String::new()
        },
        name: str_at(owner, "/name").to_string(),
    })
}

/// The controller's timeline: a child created, adopted, released or deleted.
fn child(
    object: &ObjectRef,
    old: Option<&Value>,
    new: Option<&Value>,
    resolve: Resolve,
) -> Option<Target> {
    let was = old.and_then(|o| controller(o, resolve));
    let is = new.and_then(|n| controller(n, resolve));
    let (owner, what) = match (was, is) {
        (None, Some(owner)) if old.is_none() => (owner, "created"),
        (None, Some(owner)) => (owner, "adopted"),
        (Some(owner), None) if new.is_none() => (owner, "deleted"),
        (Some(owner), None) => (owner, "released"),
        (Some(a), Some(b)) if a != b => (b, "adopted"),
        _ => return None,
    };
    let kind = str_at(new.or(old)?, "/kind");
    let kind = if kind.is_empty() {
        &object.resource
    } else {
        kind
    };
    Some(Target {
        object: owner,
        creates: true,
        summary: vec![format!("{kind} {} {what}", object.name)],
        facts: Facts::default(),
        links: Links {
            child: Some(object.clone()),
            ..Links::default()
        },
    })
}

fn conditions(pod: &Value) -> BTreeMap<String, String> {
    value_at(pod, "/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            (
                str_at(c, "/type").to_string(),
                str_at(c, "/status").to_string(),
            )
        })
        .collect()
}

/// Each container's state as one word: `waiting (Reason)`, `running`, `terminated (Reason)`.
fn container_states(pod: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for list in ["/status/initContainerStatuses", "/status/containerStatuses"] {
        for c in value_at(pod, list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(state) = c.get("state").and_then(Value::as_object) else {
                continue;
            };
            let Some((kind, detail)) = state.iter().next() else {
                continue;
            };
            let reason = str_at(detail, "/reason");
            let word = if reason.is_empty() {
                kind.clone()
            } else {
                format!("{kind} ({reason})")
            };
            out.insert(str_at(c, "/name").to_string(), word);
        }
    }
    out
}

fn event(new: Option<&Value>, resolve: Resolve) -> Option<Target> {
    let e = new?;
    // core/v1 names the object in involvedObject, events.k8s.io/v1 in regarding
    let about = e.get("involvedObject").or_else(|| e.get("regarding"))?;
    let api_version = match str_at(about, "/apiVersion") {
        "" => "v1",
        v => v,
    };
    let (resource, namespaced) = resolve(api_version, str_at(about, "/kind"))?;
    let reason = str_at(e, "/reason");
    let message = e
        .get("message")
        .or_else(|| e.get("note"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut line = format!("Event {} {reason}: {message}", str_at(e, "/type"));
    if let Some(n) = e.get("count").and_then(Value::as_i64).filter(|n| *n > 1) {
        line.push_str(&format!(" (×{n})"));
    }
    let namespace = match (namespaced, str_at(about, "/namespace")) {
        (false, _) => "",
        (true, "") => str_at(e, "/metadata/namespace"),
        (true, ns) => ns,
    };
    Some(Target {
        object: ObjectRef {
            resource,
            namespace: namespace.to_string(),
            name: str_at(about, "/name").to_string(),
        },
        creates: false,
        summary: vec![line],
        facts: Facts {
            reason: Some(reason.to_string()),
            ..Facts::default()
        },
        links: Links::default(),
    })
}

/// Pods an Endpoints object lists, `(namespace, name)` → ready.
fn endpoints_members(e: &Value) -> BTreeMap<(String, String), bool> {
    let mut out = BTreeMap::new();
    for subset in e
        .get("subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        for (list, ready) in [("addresses", true), ("notReadyAddresses", false)] {
            for a in subset
                .get(list)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(pod) = pod_ref(e, a.get("targetRef")) {
                    out.insert(pod, ready);
                }
            }
        }
    }
    out
}

/// Pods an EndpointSlice lists, `(namespace, name)` → ready (an unset `ready` counts as ready,
/// as upstream's consumers read it).
fn slice_members(e: &Value) -> BTreeMap<(String, String), bool> {
    e.get("endpoints")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|ep| {
            let ready = value_at(ep, "/conditions/ready")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            Some((pod_ref(e, ep.get("targetRef"))?, ready))
        })
        .collect()
}

fn pod_ref(owner: &Value, target: Option<&Value>) -> Option<(String, String)> {
    let t = target?;
    if str_at(t, "/kind") != "Pod" {
        return None;
    }
    let namespace = match str_at(t, "/namespace") {
        "" => str_at(owner, "/metadata/namespace"),
        ns => ns,
    };
    Some((namespace.to_string(), str_at(t, "/name").to_string()))
}

fn endpoints(
    plural: &str,
    old: Option<&Value>,
    new: Option<&Value>,
    members: fn(&Value) -> BTreeMap<(String, String), bool>,
) -> Vec<Target> {
    let before = old.map(members).unwrap_or_default();
    let after = new.map(members).unwrap_or_default();
    let name = str_at(new.or(old).unwrap_or(&Value::Null), "/metadata/name");
    let kind = if plural == "endpoints" {
        "Endpoints"
    } else {
        "EndpointSlice"
    };
    let mut out = Vec::new();
    for pod in before
        .keys()
        .chain(after.keys().filter(|k| !before.contains_key(*k)))
    {
        let line = match (before.get(pod), after.get(pod)) {
            (None, Some(true)) => "lists the pod, ready",
            (None, Some(false)) => "lists the pod, not ready",
            (Some(false), Some(true)) => "the pod's address is now ready",
            (Some(true), Some(false)) => "the pod's address is now not ready",
            (Some(_), None) => "no longer lists the pod",
            _ => continue,
        };
        out.push(Target {
            object: ObjectRef::pod(&pod.0, &pod.1),
            creates: false,
            summary: vec![format!("{kind} {name}: {line}")],
            facts: Facts::default(),
            links: Links::default(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The kinds these tests name.
    fn kinds(api_version: &str, kind: &str) -> Option<(String, bool)> {
        match (api_version, kind) {
            ("v1", "Pod") => Some(("pods".into(), true)),
            ("v1", "Node") => Some(("nodes".into(), false)),
            ("apps/v1", "ReplicaSet") => Some(("replicasets.apps".into(), true)),
            ("apps/v1", "Deployment") => Some(("deployments.apps".into(), true)),
            _ => None,
        }
    }

    fn targets(group: &str, plural: &str, old: Option<&Value>, new: Option<&Value>) -> Vec<Target> {
        super::targets(group, plural, old, new, &kinds)
    }

    fn pod_at(node: &str, phase: &str, ready: &str, state: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "ns"},
               "spec": {"nodeName": node},
               "status": {"phase": phase,
                          "conditions": [{"type": "Ready", "status": ready}],
                          "containerStatuses": [{"name": "app", "state": state}]}})
    }

    #[test]
    fn a_pod_create_starts_a_timeline() {
        let p = json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": {}});
        let t = targets("", "pods", None, Some(&p));
        assert_eq!(t.len(), 1);
        assert!(t[0].creates);
        assert_eq!(t[0].object, ObjectRef::pod("ns", "web"));
        assert_eq!(t[0].summary, ["created"]);
    }

    #[test]
    fn a_binding_is_summarized_as_the_node_name_it_set() {
        let old = json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": {}});
        let mut new = old.clone();
        new["spec"]["nodeName"] = json!("n1");
        new["status"] = json!({"conditions": [{"type": "PodScheduled", "status": "True"}]});
        let t = &targets("", "pods", Some(&old), Some(&new))[0];
        assert_eq!(t.summary, ["spec.nodeName=n1", "PodScheduled=True"]);
        assert_eq!(t.facts.node_name.as_deref(), Some("n1"));
        assert_eq!(t.facts.became_true, ["PodScheduled"]);
        assert_eq!(t.facts.queue_wait, None, "no scheduler reported it");
    }

    #[test]
    fn a_binding_carries_the_queue_wait_the_scheduler_annotated_it_with() {
        let old = json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": {}});
        let mut new = old.clone();
        new["spec"]["nodeName"] = json!("n1");
        new["metadata"]["annotations"] = json!({"scheduler.skiff.io/queue-wait-seconds": "0.0123"});
        let t = &targets("", "pods", Some(&old), Some(&new))[0];
        assert_eq!(t.facts.queue_wait, Some(0.0123));
        // later writes of the bound pod keep the annotation, but set no node: no queue wait
        let mut later = new.clone();
        later["status"] = json!({"phase": "Running"});
        let t = &targets("", "pods", Some(&new), Some(&later))[0];
        assert_eq!(
            (t.facts.node_name.as_ref(), t.facts.queue_wait),
            (None, None)
        );
    }

    #[test]
    fn a_status_write_is_summarized_as_phase_conditions_and_container_states() {
        let old = pod_at(
            "n1",
            "Pending",
            "False",
            json!({"waiting": {"reason": "ContainerCreating"}}),
        );
        let new = pod_at(
            "n1",
            "Running",
            "True",
            json!({"running": {"startedAt": "t"}}),
        );
        let t = &targets("", "pods", Some(&old), Some(&new))[0];
        assert_eq!(
            t.summary,
            [
                "phase Pending→Running",
                "Ready False→True",
                "container app: waiting (ContainerCreating)→running"
            ]
        );
        assert_eq!(t.facts.became_true, ["Ready"]);
        assert_eq!(t.facts.started, ["app"]);
    }

    #[test]
    fn a_label_change_is_named_and_anything_else_is_said_to_be_other() {
        let old = json!({"metadata": {"name": "web", "namespace": "ns", "labels": {"a": "1"}}});
        let mut new = old.clone();
        new["metadata"]["labels"]["b"] = json!("2");
        assert_eq!(
            targets("", "pods", Some(&old), Some(&new))[0].summary,
            ["labels changed"]
        );
        let mut other = old.clone();
        other["spec"] = json!({"activeDeadlineSeconds": 5});
        assert_eq!(
            targets("", "pods", Some(&old), Some(&other))[0].summary,
            ["other metadata or spec change"]
        );
    }

    #[test]
    fn an_event_belongs_to_its_involved_pods_timeline() {
        let e = json!({"metadata": {"name": "web.1", "namespace": "ns"}, "type": "Normal",
                       "reason": "Pulled", "message": "image pulled", "count": 1,
                       "involvedObject": {"kind": "Pod", "name": "web", "namespace": "ns"}});
        let t = targets("", "events", None, Some(&e));
        assert_eq!(t.len(), 1);
        assert!(!t[0].creates);
        assert_eq!(t[0].object, ObjectRef::pod("ns", "web"));
        assert_eq!(t[0].summary, ["Event Normal Pulled: image pulled"]);
        assert_eq!(t[0].facts.reason.as_deref(), Some("Pulled"));
        let about_node = json!({"metadata": {"namespace": "default"}, "reason": "Starting",
                                "involvedObject": {"kind": "Node", "name": "n1"}});
        let t = targets("", "events", None, Some(&about_node));
        assert_eq!(t[0].object, ObjectRef::new("", "nodes", "", "n1"));
        let about_unknown = json!({"reason": "X", "involvedObject": {"apiVersion": "x/v1", "kind": "Y", "name": "y"}});
        assert!(targets("", "events", None, Some(&about_unknown)).is_empty());
    }

    #[test]
    fn endpoint_slices_land_on_the_pods_whose_membership_or_readiness_changed() {
        let slice = |ready_b: bool| {
            json!({"metadata": {"name": "svc-abc", "namespace": "ns"}, "endpoints": [
                {"conditions": {"ready": true}, "targetRef": {"kind": "Pod", "name": "a", "namespace": "ns"}},
                {"conditions": {"ready": ready_b}, "targetRef": {"kind": "Pod", "name": "b", "namespace": "ns"}}]})
        };
        let t = targets(
            "discovery.k8s.io",
            "endpointslices",
            Some(&slice(false)),
            Some(&slice(true)),
        );
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].object, ObjectRef::pod("ns", "b"));
        assert_eq!(
            t[0].summary,
            ["EndpointSlice svc-abc: the pod's address is now ready"]
        );
        let first = targets(
            "discovery.k8s.io",
            "endpointslices",
            None,
            Some(&slice(true)),
        );
        assert_eq!(first.len(), 2);
    }

    #[test]
    fn endpoints_list_ready_and_not_ready_addresses() {
        let e = json!({"metadata": {"name": "svc", "namespace": "ns"}, "subsets": [{
            "addresses": [{"ip": "10.0.0.1", "targetRef": {"kind": "Pod", "name": "a"}}],
            "notReadyAddresses": [{"ip": "10.0.0.2", "targetRef": {"kind": "Pod", "name": "b"}}]}]});
        let t = targets("", "endpoints", None, Some(&e));
        let lines: Vec<_> = t
            .iter()
            .map(|t| (t.object.name.as_str(), t.summary[0].as_str()))
            .collect();
        assert_eq!(
            lines,
            [
                ("a", "Endpoints svc: lists the pod, ready"),
                ("b", "Endpoints svc: lists the pod, not ready")
            ]
        );
    }

    fn replica_set(ready: i64) -> Value {
        json!({"kind": "ReplicaSet",
               "metadata": {"name": "web-1", "namespace": "ns", "uid": "u-1", "generation": 1,
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                                 "name": "web", "uid": "u-0", "controller": true}]},
               "spec": {"replicas": 3}, "status": {"readyReplicas": ready}})
    }

    #[test]
    fn a_child_created_lands_on_its_controllers_timeline_too() {
        let rs = replica_set(0);
        let t = targets("apps", "replicasets", None, Some(&rs));
        assert_eq!(t.len(), 2);
        let rs_ref = ObjectRef::new("apps", "replicasets", "ns", "web-1");
        assert_eq!(t[0].object, rs_ref);
        assert_eq!(t[0].links.uid.as_deref(), Some("u-1"));
        let deployment = ObjectRef::new("apps", "deployments", "ns", "web");
        assert_eq!(t[0].links.owner.as_ref(), Some(&deployment));
        assert_eq!(t[1].object, deployment);
        assert_eq!(t[1].summary, ["ReplicaSet web-1 created"]);
        assert_eq!(t[1].links.child.as_ref(), Some(&rs_ref));
        let gone = targets("apps", "replicasets", Some(&rs), None);
        assert_eq!(gone[1].summary, ["ReplicaSet web-1 deleted"]);
        let mut orphan = rs.clone();
        orphan["metadata"]["ownerReferences"] = json!([]);
        let released = targets("apps", "replicasets", Some(&rs), Some(&orphan));
        assert_eq!(released[1].summary, ["ReplicaSet web-1 released"]);
    }

    #[test]
    fn other_kinds_are_summarized_by_generation_replica_counts_and_conditions() {
        let (old, mut new) = (replica_set(1), replica_set(3));
        new["metadata"]["generation"] = json!(2);
        new["status"]["conditions"] = json!([{"type": "ReplicaFailure", "status": "False"}]);
        let t = targets("apps", "replicasets", Some(&old), Some(&new));
        assert_eq!(
            t.len(),
            1,
            "an update that keeps the controller is not the controller's"
        );
        assert_eq!(
            t[0].summary,
            [
                "spec changed (generation 2)",
                "status.readyReplicas 1→3",
                "ReplicaFailure=False"
            ]
        );
        let mut status = old.clone();
        status["status"]["observedGeneration"] = json!(1);
        assert_eq!(
            targets("apps", "replicasets", Some(&old), Some(&status))[0].summary,
            ["other status change"]
        );
    }
}
