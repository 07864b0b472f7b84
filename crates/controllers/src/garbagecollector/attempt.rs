//! What the collector's workers do with one queued uid (upstream's `attemptToDeleteItem` and
//! `attemptToOrphan`): read the object and its owners through the API, then delete it, strip
//! references, or release an owner's finalizer. Writes go through [`Objects`].

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::graph::{FOREGROUND, Graph, Identity, ORPHAN, Work};

/// How a dependent is deleted (`propagationPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Background,
    Foreground,
    Orphan,
}

/// Why a queued uid could not be handled (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no served resource for {api_version} {kind}")]
    Unresolvable { api_version: String, kind: String },
    #[error("{verb} {kind} {name}: {source}")]
    Api {
        verb: &'static str,
        kind: String,
        name: String,
        source: Box<kube::Error>,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An object named by kind, namespace and name (no uid: what a read answers decides that).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub api_version: String,
    pub kind: String,
    pub namespace: Option<String>,
    pub name: String,
}

impl From<&Identity> for Target {
    fn from(id: &Identity) -> Target {
        Target {
            api_version: id.api_version.clone(),
            kind: id.kind.clone(),
            namespace: id.namespace.clone(),
            name: id.name.clone(),
        }
    }
}

/// The API as the collector's workers use it.
#[async_trait]
pub trait Objects: Send + Sync {
    /// Whether objects of this kind are namespaced; `None` when the server serves no such kind.
    fn namespaced(&self, api_version: &str, kind: &str) -> Option<bool>;
    /// The object's metadata, `None` when it does not exist.
    async fn get(&self, target: &Target) -> Result<Option<ObjectMeta>>;
    /// Deletes the object with this uid (a uid precondition) and propagation policy.
    async fn delete(&self, id: &Identity, policy: Policy) -> Result<()>;
    /// Removes the ownerReferences to `owners` from the object with this uid.
    async fn remove_owner_references(&self, id: &Identity, owners: &[String]) -> Result<()>;
    /// Removes `finalizer` from the object with this uid.
    async fn remove_finalizer(&self, id: &Identity, finalizer: &str) -> Result<()>;
}

/// Where one ownerReference points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnerState {
    /// The owner exists and is not deleting its dependents.
    Solid,
    /// No object with that uid exists.
    Dangling,
    /// The owner is being deleted in the foreground.
    WaitingForDependents,
}

fn has(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == finalizer)
}

/// Reads the current object behind a graph identity; `None` if it is gone or was replaced.
async fn latest(api: &dyn Objects, id: &Identity) -> Result<Option<ObjectMeta>> {
    Ok(api
        .get(&Target::from(id))
        .await?
        .filter(|m| m.uid.as_deref() == Some(id.uid.as_str())))
}

async fn owner_state(
    api: &dyn Objects,
    dependent_namespace: Option<&str>,
    owner: &OwnerReference,
) -> Result<OwnerState> {
    let namespaced = api
        .namespaced(&owner.api_version, &owner.kind)
        .ok_or_else(|| Error::Unresolvable {
            api_version: owner.api_version.clone(),
            kind: owner.kind.clone(),
        })?;
    let namespace = match (namespaced, dependent_namespace) {
        (false, _) => None,
        (true, Some(ns)) => Some(ns.to_string()),
        // A cluster-scoped dependent cannot have a namespaced owner: upstream treats the
        // reference as pointing at nothing.
        (true, None) => return Ok(OwnerState::Dangling),
    };
    let target = Target {
        api_version: owner.api_version.clone(),
        kind: owner.kind.clone(),
        namespace,
        name: owner.name.clone(),
    };
    Ok(match api.get(&target).await? {
        Some(m) if m.uid.as_deref() == Some(owner.uid.as_str()) => {
            if m.deletion_timestamp.is_some() && has(&m, FOREGROUND) {
                OwnerState::WaitingForDependents
            } else {
                OwnerState::Solid
            }
        }
        _ => OwnerState::Dangling,
    })
}

/// What handling one item did, for tests and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Done {
    /// Nothing to do (gone, owned, being deleted, or no owners).
    Nothing,
    Deleted(Policy),
    /// References to these owner uids were removed.
    Unowned(Vec<String>),
    /// The owner's finalizer was removed.
    Released(&'static str),
    /// A foreground owner still waits: these uids are queued again.
    Waiting(Vec<Work>),
}

/// Handles one queued uid from a snapshot of the graph (the caller holds no lock across the API
/// calls).
pub async fn attempt(api: &dyn Objects, snapshot: &Snapshot, work: &Work) -> Result<Done> {
    match work {
        Work::Delete(_) => attempt_to_delete(api, snapshot).await,
        Work::Orphan(_) => attempt_to_orphan(api, snapshot).await,
    }
}

/// What a worker copies out of the graph for one uid.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub id: Identity,
    /// Every dependent.
    pub dependents: Vec<Identity>,
    /// Dependents whose reference to it blocks its deletion, and whether each is itself
    /// deleting its dependents.
    pub blocking: Vec<(Identity, bool)>,
}

impl Snapshot {
    pub fn of(graph: &Graph, uid: &str) -> Option<Snapshot> {
        let node = graph.get(uid)?;
        Some(Snapshot {
            id: node.id.clone(),
            dependents: graph.dependents(uid).iter().map(|d| d.id.clone()).collect(),
            blocking: graph
                .blocking_dependents(uid)
                .iter()
                .map(|d| (d.id.clone(), d.deleting_dependents()))
                .collect(),
        })
    }
}

async fn attempt_to_delete(api: &dyn Objects, item: &Snapshot) -> Result<Done> {
    let Some(meta) = latest(api, &item.id).await? else {
        // Gone: the watch removes it from the graph and queues its dependents.
        return Ok(Done::Nothing);
    };
    if meta.deletion_timestamp.is_some() {
        if !has(&meta, FOREGROUND) {
            return Ok(Done::Nothing);
        }
        // Deleting its dependents: done once none blocks it.
        if item.blocking.is_empty() {
            api.remove_finalizer(&item.id, FOREGROUND).await?;
            return Ok(Done::Released(FOREGROUND));
        }
        return Ok(Done::Waiting(
            item.blocking
                .iter()
                .filter(|(_, deleting)| !deleting)
                .map(|(d, _)| Work::Delete(d.uid.clone()))
                .collect(),
        ));
    }
    let owners = meta.owner_references.clone().unwrap_or_default();
    if owners.is_empty() {
        return Ok(Done::Nothing);
    }
    let mut solid = Vec::new();
    let mut dangling = Vec::new();
    let mut waiting = Vec::new();
    for owner in &owners {
        match owner_state(api, item.id.namespace.as_deref(), owner).await? {
            OwnerState::Solid => solid.push(owner.uid.clone()),
            OwnerState::Dangling => dangling.push(owner.uid.clone()),
            OwnerState::WaitingForDependents => waiting.push(owner.uid.clone()),
        }
    }
    if !solid.is_empty() {
        let mut stale = dangling;
        stale.extend(waiting);
        if stale.is_empty() {
            return Ok(Done::Nothing);
        }
        api.remove_owner_references(&item.id, &stale).await?;
        return Ok(Done::Unowned(stale));
    }
    let policy = if !waiting.is_empty() && !item.dependents.is_empty() {
        // An owner waits for this object: it goes in the foreground too, so that the owner
        // outlives everything below it.
        Policy::Foreground
    } else if has(&meta, ORPHAN) {
        Policy::Orphan
    } else if has(&meta, FOREGROUND) {
        Policy::Foreground
    } else {
        Policy::Background
    };
    api.delete(&item.id, policy).await?;
    Ok(Done::Deleted(policy))
}

async fn attempt_to_orphan(api: &dyn Objects, owner: &Snapshot) -> Result<Done> {
    let Some(meta) = latest(api, &owner.id).await? else {
        return Ok(Done::Nothing);
    };
    if meta.deletion_timestamp.is_none() || !has(&meta, ORPHAN) {
        return Ok(Done::Nothing);
    }
    for dependent in &owner.dependents {
        api.remove_owner_references(dependent, std::slice::from_ref(&owner.id.uid))
            .await?;
    }
    api.remove_finalizer(&owner.id, ORPHAN).await?;
    Ok(Done::Released(ORPHAN))
}

#[cfg(test)]
#[path = "attempt_tests.rs"]
mod tests;
