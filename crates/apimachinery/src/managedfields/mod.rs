//! Server-side apply and `metadata.managedFields`: who owns which field of an object, how a
//! write moves ownership, and how an applied configuration merges into a live object, as
//! upstream's field manager (`k8s.io/apimachinery/pkg/util/managedfields`) over
//! `sigs.k8s.io/structured-merge-diff`. No maintained Rust crate implements structured merge
//! diff, so this is written here.
//!
//! - [`update`] records an `Update` entry for a create, update or patch: the writer takes every
//!   field it added or changed (from whoever owned it) and nobody keeps a field it removed.
//! - [`apply`] merges an applied configuration: the applier's `Apply` entry becomes exactly the
//!   configuration's fields, fields it applied before and omits now are removed unless someone
//!   else owns them, and changing another manager's field is a [`Conflict`] unless forced.
//!
//! # Layout
//! - [`fieldpath`]: path elements, field sets and their `FieldsV1` encoding.
//! - [`schema`]: list and map semantics of the built-in kinds (keys, sets, atomic values).
//! - [`typed`]: field sets, comparison, merge and pruning of JSON objects.
//! - `entries`: the `managedFields` entries, their identities, decoding and encoding.

mod entries;
pub mod fieldpath;
pub mod schema;
pub mod typed;

use serde_json::Value;

pub use entries::{Entry, Identity, Managed, Operation};
use fieldpath::{PathElement, Set};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why managed fields could not be read or an apply could not be done.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// A `FieldsV1` key or value is malformed.
    #[error("invalid FieldsV1 element {element:?}")]
    BadFieldsV1 { element: String },
    /// A `managedFields` entry is malformed (operation, apiVersion, fieldsType).
    #[error("managed fields entry {index}: {reason}")]
    BadEntry { index: usize, reason: String },
    /// An element of a keyed list in the applied configuration lacks a key field.
    #[error(
        "element {index}: associative list with keys has an element that omits key field {key:?} (and doesn't have default value)"
    )]
    MissingListKey { index: usize, key: String },
    /// Two elements of a keyed list or set in the applied configuration have one name.
    #[error("duplicate entries for key {key}")]
    DuplicateListKey { key: String },
    /// The applied configuration carries `metadata.managedFields`.
    #[error("metadata.managedFields must be nil")]
    ManagedFieldsInApply,
    /// The apply changes fields other managers own (HTTP 409 with one cause per field).
    #[error("{}", conflict_message(.0))]
    Conflicts(Vec<Conflict>),
}

/// One field an apply would change that another manager owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The owner as upstream prints it: `"kubectl-scale" with subresource "scale" using apps/v1`.
    pub manager: String,
    /// The field as upstream prints it: `.spec.replicas`.
    pub field: String,
    /// The field's path.
    pub path: fieldpath::Path,
}

/// Upstream's conflict message (`Apply failed with 1 conflict: conflict with "m" using v1: .a`).
fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [one] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            one.manager, one.field
        );
    }
    let mut managers: Vec<&str> = conflicts.iter().map(|c| c.manager.as_str()).collect();
    managers.sort();
    managers.dedup();
    let mut lines = Vec::new();
    for m in managers {
        lines.push(format!("conflicts with {m}:"));
        for c in conflicts.iter().filter(|c| c.manager == m) {
            lines.push(format!("- {}", c.field));
        }
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Which top-level fields a request can own: the status of kinds with a status subresource is
/// reset on writes to the object, and only the status is kept on writes to `/status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every field (kinds without a status subresource, `scale`).
    Everything,
    /// Everything but `.status`.
    NotStatus,
    /// Only `.status`.
    OnlyStatus,
}

impl Scope {
    fn keeps(self, pe: &PathElement) -> bool {
        let status = matches!(pe, PathElement::Field(f) if f == "status");
        match self {
            Scope::Everything => true,
            Scope::NotStatus => !status,
            Scope::OnlyStatus => status,
        }
    }
}

/// Who writes, through which version and path, and when.
#[derive(Debug, Clone, Copy)]
pub struct Writer<'a> {
    /// The field manager (`fieldManager`, or the User-Agent's product).
    pub manager: &'a str,
    /// The group version of the request (`apps/v1`).
    pub api_version: &'a str,
    /// `""`, `status` or `scale`.
    pub subresource: &'a str,
    pub scope: Scope,
    /// The time recorded on entries whose fields changed (RFC 3339 seconds).
    pub now: &'a str,
    /// The API group and kind, for the [`schema`].
    pub group: &'a str,
    pub kind: &'a str,
    /// A custom resource's schema (from its CRD), for the [`schema`].
    pub custom: Option<&'a schema::Custom>,
}

/// The fields no manager ever owns (upstream's `stripMeta`).
fn strip_meta(set: &mut Set) {
    for top in ["apiVersion", "kind", "metadata"] {
        set.remove(&[PathElement::field(top)]);
    }
    for field in [
        "name",
        "namespace",
        "creationTimestamp",
        "selfLink",
        "uid",
        "clusterName",
        "generation",
        "managedFields",
        "resourceVersion",
    ] {
        set.remove(&[PathElement::field("metadata"), PathElement::field(field)]);
    }
}

/// An object without its `metadata.managedFields`.
fn without_managed_fields(obj: &Value) -> Value {
    let mut obj = obj.clone();
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    obj
}

/// Whether the client asks to clear managedFields: `[]` or `[{}]`.
fn is_reset(v: Option<&Value>) -> bool {
    match v.and_then(Value::as_array).map(Vec::as_slice) {
        Some([]) => true,
        Some([one]) => one.as_object().is_some_and(|m| m.is_empty()),
        _ => false,
    }
}

/// Records the `Update` of `live` (`{}` for a create) into `new` by `writer`: sets
/// `new.metadata.managedFields`. Entries sent in `new` replace the live ones when they are
/// valid (writes to subresources always start from the live ones); `[]` or `[{}]` clears them.
/// Never fails: a write is not refused over bookkeeping.
pub fn update(live: &Value, new: &mut Value, writer: &Writer<'_>) {
    let sent = new.pointer("/metadata/managedFields");
    let from_live = || Managed::decode(live.pointer("/metadata/managedFields")).unwrap_or_default();
    let mut managed = if !writer.subresource.is_empty() {
        from_live()
    } else if is_reset(sent) {
        Managed::default()
    } else {
        match Managed::decode(sent) {
            Ok(m) if !m.is_empty() => m,
            _ => from_live(),
        }
    };
    let node = schema::root(writer.group, writer.kind, writer.custom);
    let mut c = typed::compare(live, new, &node);
    c.retain_top(|pe| writer.scope.keeps(pe));
    let changed = c.modified.union(&c.added);
    managed.remove_from_all(&changed, &c.removed);
    let mut taken = changed;
    strip_meta(&mut taken);
    if !taken.is_empty() {
        let id = Entry::identity(
            writer.manager,
            Operation::Update,
            writer.api_version,
            writer.subresource,
        );
        managed.take(id, writer.api_version, taken, Some(writer.now));
    }
    managed.write_into(new);
}

/// The annotation client-side `kubectl apply` keeps its last configuration in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The manager `kubectl apply --server-side` applies as; it gets upstream's help moving from
/// client-side apply.
const KUBECTL: &str = "kubectl";

/// Applies `config` to `live` (`{}` when the object does not exist yet) for `writer`; returns
/// the new object with its managedFields. An apply that changes nothing but ownership returns
/// the live object with the new entries (and keeps the entry's time).
///
/// As upstream, `kubectl` applying to an object that client-side apply manages may take the
/// fields whose live values are still those of the last-applied annotation without conflict,
/// and keeps that annotation in step with what it applies.
pub fn apply(live: &Value, config: &Value, writer: &Writer<'_>, force: bool) -> Result<Value> {
    let last_applied = (writer.manager == KUBECTL)
        .then(|| {
            live.pointer("/metadata/annotations")
                .and_then(|a| a.get(LAST_APPLIED))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        })
        .flatten();
    let mut out = match apply_once(live, config, writer, force) {
        Err(Error::Conflicts(conflicts)) if last_applied.is_some() => {
            let Some(allowed) = last_applied.and_then(|l| allowed_by_last_applied(live, l, writer))
            else {
                return Err(Error::Conflicts(conflicts));
            };
            let left: Vec<Conflict> = conflicts
                .into_iter()
                .filter(|c| !allowed.has(&c.path))
                .collect();
            if !left.is_empty() {
                return Err(Error::Conflicts(left));
            }
            apply_once(live, config, writer, true)?
        }
        other => other?,
    };
    if last_applied.is_some() {
        let mut recorded = config.clone();
        if let Some(a) = recorded
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            a.remove(LAST_APPLIED);
        }
        if !out["metadata"]["annotations"].is_object() {
            out["metadata"]["annotations"] = Value::Object(Default::default());
        }
        out["metadata"]["annotations"][LAST_APPLIED] = Value::String(recorded.to_string());
    }
    Ok(out)
}

/// The fields of the last client-side applied configuration whose live values still match it
/// (upstream's `allowedConflictsFromLastApplied`); `None` when the annotation is unusable.
fn allowed_by_last_applied(live: &Value, annotation: &str, writer: &Writer<'_>) -> Option<Set> {
    let last: Value = serde_json::from_str(annotation).ok()?;
    if last.get("apiVersion").and_then(Value::as_str) != Some(writer.api_version) {
        return None;
    }
    let node = schema::root(writer.group, writer.kind, writer.custom);
    let fields = typed::field_set(&last, &node).ok()?;
    let c = typed::compare(&last, live, &node);
    Some(
        fields
            .difference(&c.modified)
            .difference(&c.added)
            .difference(&c.removed),
    )
}

fn apply_once(live: &Value, config: &Value, writer: &Writer<'_>, force: bool) -> Result<Value> {
    if config
        .pointer("/metadata/managedFields")
        .is_some_and(|v| !v.is_null())
    {
        return Err(Error::ManagedFieldsInApply);
    }
    let mut managed = Managed::decode(live.pointer("/metadata/managedFields"))?;
    let live = without_managed_fields(live);
    let node = schema::root(writer.group, writer.kind, writer.custom);
    let mut applied = typed::field_set(config, &node)?;
    applied.retain_top(|pe| writer.scope.keeps(pe));
    let merged = typed::merge(&live, config, &node)?;
    let id = Entry::identity(
        writer.manager,
        Operation::Apply,
        writer.api_version,
        writer.subresource,
    );
    let previous = managed.remove(&id);
    managed.take(id.clone(), writer.api_version, applied, None);
    let new = match previous.as_ref().filter(|p| !p.set.is_empty()) {
        Some(p) => {
            let keep = managed.all_fields().with_named_fields_as_members();
            typed::prune(
                &merged,
                &node,
                &p.set.with_named_fields_as_members(),
                Some(&keep),
            )
        }
        None => merged,
    };
    let mut c = typed::compare(&live, &new, &node);
    c.retain_top(|pe| writer.scope.keeps(pe));
    let changed = c.modified.union(&c.added);
    let conflicts = managed.conflicts(&id, &changed);
    if !force && !conflicts.is_empty() {
        return Err(Error::Conflicts(conflicts));
    }
    managed.remove_from_others(&id, &changed, &c.removed);
    let object_changed = new != live;
    let time = if object_changed {
        Some(writer.now.to_string())
    } else {
        previous.and_then(|p| p.time)
    };
    managed.finish_apply(&id, time, strip_meta);
    let mut out = if object_changed { new } else { live };
    managed.write_into(&mut out);
    Ok(out)
}

#[cfg(test)]
mod tests;
