//! The entries of `metadata.managedFields`: one per manager identity (name, operation, API
//! version for updates, subresource), read from and written to their JSON form in upstream's
//! order, and the ownership moves the updater makes on them.

use serde_json::{Map, Value, json};

use super::fieldpath::{Set, path_string};
use super::{Conflict, Error, Result};

/// The kind of write that gave a manager its fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Server-side apply: the set is exactly the manager's last applied configuration.
    Apply,
    /// Any other write: the set grows with every field the manager changes.
    Update,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// What tells two managers apart (upstream's manager identifier): appliers are one manager
/// whatever version they apply through; updaters are one per API version.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    pub manager: String,
    pub operation: Operation,
    /// Empty for appliers.
    pub api_version: String,
    pub subresource: String,
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: Identity,
    pub api_version: String,
    /// When the manager last changed the object (RFC 3339), if it did.
    pub time: Option<String>,
    pub set: Set,
}

impl Entry {
    /// The identity of a manager writing with `operation` through `api_version`.
    pub fn identity(
        manager: &str,
        operation: Operation,
        api_version: &str,
        subresource: &str,
    ) -> Identity {
        Identity {
            manager: manager.to_string(),
            operation,
            api_version: match operation {
                Operation::Apply => String::new(),
                Operation::Update => api_version.to_string(),
            },
            subresource: subresource.to_string(),
        }
    }

    /// The manager as upstream prints it in conflicts.
    fn display(&self) -> String {
        let quote = |s: &str| Value::String(s.to_string()).to_string();
        let mut out = quote(&self.id.manager);
        if !self.id.subresource.is_empty() {
            out.push_str(&format!(
                " with subresource {}",
                quote(&self.id.subresource)
            ));
        }
        if self.id.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }

    fn decode(index: usize, v: &Value) -> Result<Entry> {
        let bad = |reason: &str| Error::BadEntry {
            index,
            reason: reason.to_string(),
        };
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("");
        let operation = match s("operation") {
            "Apply" => Operation::Apply,
            "Update" => Operation::Update,
            _ => return Err(bad("operation must be `Apply` or `Update`")),
        };
        if s("apiVersion").is_empty() {
            return Err(bad("apiVersion must not be empty"));
        }
        match s("fieldsType") {
            "FieldsV1" => {}
            "" => return Err(bad("missing fieldsType")),
            other => return Err(bad(&format!("invalid fieldsType {other:?}"))),
        }
        let set = match v.get("fieldsV1") {
            None | Some(Value::Null) => Set::new(),
            Some(f) => Set::from_fields_v1(f)?,
        };
        Ok(Entry {
            id: Entry::identity(s("manager"), operation, s("apiVersion"), s("subresource")),
            api_version: s("apiVersion").to_string(),
            time: v
                .get("time")
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
                .map(str::to_string),
            set,
        })
    }

    fn encode(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.id.manager));
        m.insert("operation".into(), json!(self.id.operation.as_str()));
        m.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.set.to_fields_v1());
        if !self.id.subresource.is_empty() {
            m.insert("subresource".into(), json!(self.id.subresource));
        }
        Value::Object(m)
    }
}

/// All entries of one object. Invariant: one entry per identity, none with an empty set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Managed {
    entries: Vec<Entry>,
}

impl Managed {
    /// Reads `metadata.managedFields` (absent or `null`: no entries). A later entry with the
    /// identity of an earlier one replaces it.
    pub fn decode(v: Option<&Value>) -> Result<Managed> {
        let mut managed = Managed::default();
        let Some(list) = v.filter(|v| !v.is_null()) else {
            return Ok(managed);
        };
        let Some(list) = list.as_array() else {
            return Err(Error::BadEntry {
                index: 0,
                reason: "managedFields must be a list".into(),
            });
        };
        for (i, e) in list.iter().enumerate() {
            let entry = Entry::decode(i, e)?;
            managed.entries.retain(|x| x.id != entry.id);
            managed.entries.push(entry);
        }
        Ok(managed)
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The entries in upstream's order: appliers first, then by time, manager, version and
    /// subresource.
    pub fn encode(&self) -> Value {
        let mut sorted: Vec<&Entry> = self.entries.iter().collect();
        sorted.sort_by(|a, b| {
            (
                a.id.operation.as_str(),
                a.time.as_deref().unwrap_or(""),
                &a.id.manager,
                &a.api_version,
                &a.id.subresource,
            )
                .cmp(&(
                    b.id.operation.as_str(),
                    b.time.as_deref().unwrap_or(""),
                    &b.id.manager,
                    &b.api_version,
                    &b.id.subresource,
                ))
        });
        Value::Array(sorted.into_iter().map(Entry::encode).collect())
    }

    /// Sets `obj.metadata.managedFields` (removes it when there are no entries).
    pub fn write_into(&self, obj: &mut Value) {
        let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
            if !self.is_empty() && obj.is_object() {
                obj["metadata"] = json!({"managedFields": self.encode()});
            }
            return;
        };
        if self.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), self.encode());
        }
    }

    /// Removes and returns the entry of `id`.
    pub fn remove(&mut self, id: &Identity) -> Option<Entry> {
        let i = self.entries.iter().position(|e| e.id == *id)?;
        Some(self.entries.remove(i))
    }

    /// Gives `set` to `id` (joined with what it owns), through `api_version`, at `time`.
    pub fn take(&mut self, id: Identity, api_version: &str, set: Set, time: Option<&str>) {
        let mut entry = self.remove(&id).unwrap_or(Entry {
            id,
            api_version: api_version.to_string(),
            time: None,
            set: Set::new(),
        });
        entry.set = entry.set.union(&set);
        entry.api_version = api_version.to_string();
        if let Some(t) = time {
            entry.time = Some(t.to_string());
        }
        if !entry.set.is_empty() {
            self.entries.push(entry);
        }
    }

    /// Every field anyone owns.
    pub fn all_fields(&self) -> Set {
        self.entries
            .iter()
            .fold(Set::new(), |acc, e| acc.union(&e.set))
    }

    /// The fields in `changed` that managers other than `id` own.
    pub fn conflicts(&self, id: &Identity, changed: &Set) -> Vec<Conflict> {
        let mut out = Vec::new();
        for e in self.entries.iter().filter(|e| e.id != *id) {
            let manager = e.display();
            for path in e.set.intersection(changed).paths() {
                out.push(Conflict {
                    manager: manager.clone(),
                    field: path_string(&path),
                    path,
                });
            }
        }
        out.sort_by(|a, b| a.manager.cmp(&b.manager));
        out
    }

    /// Every manager loses the fields in `changed` and `removed`; empty entries go.
    pub fn remove_from_all(&mut self, changed: &Set, removed: &Set) {
        for e in &mut self.entries {
            e.set = e.set.difference(changed).difference(removed);
        }
        self.entries.retain(|e| !e.set.is_empty());
    }

    /// As [`Managed::remove_from_all`], sparing `id`.
    pub fn remove_from_others(&mut self, id: &Identity, changed: &Set, removed: &Set) {
        for e in self.entries.iter_mut().filter(|e| e.id != *id) {
            e.set = e.set.difference(changed).difference(removed);
        }
        self.entries.retain(|e| !e.set.is_empty());
    }

    /// Final touches on the applier's entry: `strip` its set, drop it if empty, set its time.
    pub fn finish_apply(&mut self, id: &Identity, time: Option<String>, strip: fn(&mut Set)) {
        if let Some(e) = self.entries.iter_mut().find(|e| e.id == *id) {
            strip(&mut e.set);
            e.time = time;
        }
        self.entries.retain(|e| !e.set.is_empty());
    }
}
