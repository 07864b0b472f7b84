//! The Local APIServices the server keeps for what it serves, as upstream's autoregister
//! controller (fed by kube-apiserver's own group versions and by the crdregistration
//! controller): one per built-in group version, labelled
//! `kube-aggregator.kubernetes.io/automanaged: onstart` (made or corrected when the server
//! starts, then left to the cluster's owner), and one per served version of every
//! CustomResourceDefinition, labelled `true` (kept in line, and deleted with the version).
//! APIServices without the label are never touched.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::registration::{ApiService, CRD_PRIORITY, builtin_priority, name_of};
use super::{GROUP, PLURAL};
use crate::strategy::common::str_at;

/// The label that marks an APIService the server manages.
pub const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";

/// How the server manages one of its APIServices (the label's value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `onstart`: made, corrected or removed only when the server starts.
    OnStart,
    /// `true`: kept in line while the server runs.
    Always,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::OnStart => "onstart",
            Mode::Always => "true",
        }
    }
}

/// An APIService the server wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    pub group: String,
    pub version: String,
    pub priority: (i64, i64),
    pub mode: Mode,
}

impl Wanted {
    fn name(&self) -> String {
        name_of(&self.group, &self.version)
    }

    fn object(&self) -> Value {
        json!({
            "apiVersion": format!("{GROUP}/v1"), "kind": "APIService",
            "metadata": {"name": self.name(), "labels": {AUTOMANAGED: self.mode.label()}},
            "spec": {"group": self.group, "version": self.version,
                     "groupPriorityMinimum": self.priority.0,
                     "versionPriority": self.priority.1},
        })
    }

    /// Whether `existing` already says what this would.
    fn matches(&self, existing: &Value) -> bool {
        let current = ApiService::from_object(existing);
        let wanted = ApiService::from_object(&self.object());
        let label = existing
            .pointer("/metadata/labels")
            .and_then(|l| l.get(AUTOMANAGED))
            .and_then(Value::as_str);
        ApiService {
            available: false,
            ..current
        } == wanted
            && label == Some(self.mode.label())
    }
}

/// What autoregistration reads of a CustomResourceDefinition (decoded without its schemas).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct CrdVersions {
    spec: CrdSpec,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct CrdSpec {
    group: String,
    versions: Vec<CrdVersion>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct CrdVersion {
    name: String,
    served: bool,
}

/// The APIServices for the built-in group versions (`builtin`, those upstream gives a
/// priority) and for every served version of `crds`.
pub fn wanted<'a>(
    builtin: impl IntoIterator<Item = (&'a str, &'a str)>,
    crds: &[CrdVersions],
) -> Vec<Wanted> {
    let mut out: Vec<Wanted> = Vec::new();
    let mut push = |w: Wanted| {
        if !out
            .iter()
            .any(|o| o.group == w.group && o.version == w.version)
        {
            out.push(w);
        }
    };
    for (group, version) in builtin {
        if let Some(priority) = builtin_priority(group, version) {
            push(Wanted {
                group: group.into(),
                version: version.into(),
                priority,
                mode: Mode::OnStart,
            });
        }
    }
    for crd in crds {
        for v in crd.spec.versions.iter().filter(|v| v.served) {
            push(Wanted {
                group: crd.spec.group.clone(),
                version: v.name.clone(),
                priority: CRD_PRIORITY,
                mode: Mode::Always,
            });
        }
    }
    out
}

/// One write that brings the APIServices in line.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Create(Value),
    /// Replace the spec and the label of the named APIService with this object's.
    Update(Value),
    Delete(String),
}

/// What to write, given `existing` APIServices; `starting` is the server's first pass.
pub fn plan(wanted: &[Wanted], existing: &[Value], starting: bool) -> Vec<Action> {
    let by_name: HashMap<&str, &Value> = existing
        .iter()
        .map(|o| (str_at(o, "/metadata/name"), o))
        .collect();
    let managed = |o: &Value| {
        o.pointer("/metadata/labels")
            .and_then(|l| l.get(AUTOMANAGED))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let mut actions = Vec::new();
    for w in wanted {
        let may = starting || w.mode == Mode::Always;
        match by_name.get(w.name().as_str()) {
            None if may => actions.push(Action::Create(w.object())),
            Some(e) if may && managed(e).is_some() && !w.matches(e) => {
                actions.push(Action::Update(w.object()));
            }
            _ => {}
        }
    }
    for e in existing {
        let name = str_at(e, "/metadata/name");
        let gone = !wanted.iter().any(|w| w.name() == name);
        match managed(e).as_deref() {
            Some("true") if gone => actions.push(Action::Delete(name.into())),
            Some(_) if gone && starting => actions.push(Action::Delete(name.into())),
            _ => {}
        }
    }
    actions
}

/// The APIServices' resource, for the controller's writes.
pub fn resource() -> &'static skiff_apimachinery::catalog::ResourceType {
    skiff_apimachinery::catalog::lookup(GROUP, "v1", PLURAL).expect("APIServices are built in")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(group: &str, versions: &[(&str, bool)]) -> CrdVersions {
        serde_json::from_value(json!({"spec": {"group": group, "versions": versions.iter()
            .map(|(n, s)| json!({"name": n, "served": s})).collect::<Vec<_>>()}}))
        .unwrap()
    }

    #[test]
    fn built_in_and_served_crd_versions_are_wanted_with_their_priorities() {
        let w = wanted(
            [("", "v1"), ("apps", "v1"), ("unknown.io", "v1")],
            &[crd("example.com", &[("v1", true), ("v2", false)])],
        );
        let names: Vec<_> = w.iter().map(|w| (w.name(), w.priority, w.mode)).collect();
        assert_eq!(
            names,
            [
                ("v1.".to_string(), (18000, 1), Mode::OnStart),
                ("v1.apps".to_string(), (17800, 15), Mode::OnStart),
                ("v1.example.com".to_string(), (1000, 100), Mode::Always),
            ]
        );
    }

    #[test]
    fn onstart_ones_are_made_only_at_start_and_crd_ones_follow_their_crds() {
        let w = wanted([("apps", "v1")], &[crd("example.com", &[("v1", true)])]);
        let all = plan(&w, &[], true);
        assert_eq!(all.len(), 2);
        // later, with v1.apps deleted by someone: only the CRD's comes back
        let crd_object = w[1].object();
        assert_eq!(plan(&w, std::slice::from_ref(&crd_object), false), []);
        let later = plan(&w, &[], false);
        assert_eq!(later, [Action::Create(crd_object.clone())]);
        // a changed priority is put back; a CRD version gone is deleted
        let mut changed = crd_object.clone();
        changed["spec"]["versionPriority"] = json!(5);
        assert_eq!(
            plan(&w, &[changed], false),
            [Action::Update(crd_object.clone())]
        );
        let none = wanted([("apps", "v1")], &[]);
        assert_eq!(
            plan(&none, &[w[0].object(), crd_object], false),
            [Action::Delete("v1.example.com".into())]
        );
        // APIServices without the label are left alone
        let mut mine = w[1].object();
        mine["metadata"]["labels"] = json!({});
        mine["spec"]["versionPriority"] = json!(5);
        assert_eq!(plan(&w, &[w[0].object(), mine], true), []);
    }
}
