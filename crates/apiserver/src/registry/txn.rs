//! The generic registry's storage half, in the role of upstream's `genericregistry.Store` over
//! `storage.Interface`: every write the API server makes to the store is one guarded
//! transaction built here, so the guards (an object is written only over the revision it was
//! read at, or only where none exists), reservations of allocated values and the atomicity of
//! several keys live in one place. The request handlers, the bootstrap objects, ClusterRole
//! aggregation and quota accounting all write through [`Txn`]; no other module builds a store
//! transaction.

use bytes::Bytes;
use skiff_store::{
    Compare, CompareOp, CompareTarget, DeleteRequest, KeyRange, PutRequest, Store, TxnOp,
    TxnRequest,
};

use crate::error::Result;

/// What a key must hold for a write to it to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// No object: a create.
    Absent,
    /// The object as last written at this revision.
    At(i64),
}

impl Guard {
    /// The guard of an object read at `revision`, `0` meaning it does not exist.
    pub fn revision(revision: i64) -> Guard {
        if revision == 0 {
            Guard::Absent
        } else {
            Guard::At(revision)
        }
    }

    fn compare(self, key: &str) -> Compare {
        let target = match self {
            Guard::Absent => CompareTarget::CreateRevision(0),
            Guard::At(revision) => CompareTarget::ModRevision(revision),
        };
        Compare::new(key.to_string(), CompareOp::Equal, target)
    }
}

/// One transaction: guarded puts and deletes of objects, reservations taken and released.
#[derive(Debug, Default)]
#[must_use = "a transaction does nothing until committed"]
pub struct Txn {
    compare: Vec<Compare>,
    success: Vec<TxnOp>,
}

impl Txn {
    pub fn new() -> Txn {
        Txn::default()
    }

    /// Writes `value` at `key` if the key is as `guard` says.
    pub fn put(mut self, key: &str, guard: Guard, value: Bytes) -> Txn {
        self.compare.push(guard.compare(key));
        self.success.push(put(key, value));
        self
    }

    /// Deletes `key` if it is as `guard` says.
    pub fn delete(mut self, key: &str, guard: Guard) -> Txn {
        self.compare.push(guard.compare(key));
        self.success.push(TxnOp::Delete(DeleteRequest {
            range: KeyRange::key(key.to_string()),
            prev_kv: false,
        }));
        self
    }

    /// Takes reservation `key` (an allocated ClusterIP, NodePort, …) for the object at `owner`;
    /// the transaction fails if someone holds it.
    pub fn reserve(self, key: &str, owner: &str) -> Txn {
        self.put(key, Guard::Absent, Bytes::from(owner.to_string()))
    }

    /// Releases reservation `key`, whoever holds it.
    pub fn release(mut self, key: &str) -> Txn {
        self.success.push(TxnOp::Delete(DeleteRequest {
            range: KeyRange::key(key.to_string()),
            prev_kv: false,
        }));
        self
    }

    /// Commits: the new revision, or `None` when a guard did not hold (nothing was written).
    pub async fn commit(self, store: &dyn Store) -> Result<Option<i64>> {
        crate::timing::step("about to store");
        let resp = store
            .txn(TxnRequest {
                compare: self.compare,
                success: self.success,
                failure: vec![],
            })
            .await?;
        crate::timing::step("stored");
        Ok(resp.succeeded.then_some(resp.revision))
    }
}

fn put(key: &str, value: Bytes) -> TxnOp {
    TxnOp::Put(PutRequest {
        key: Bytes::from(key.to_string()),
        value,
        lease: 0,
        prev_kv: false,
    })
}

#[cfg(test)]
mod tests {
    use skiff_store::{EmbeddedConfig, EmbeddedStore, StoreExt};

    use super::*;

    #[tokio::test]
    async fn guards_reservations_and_releases_hold_together() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("s")))
            .await
            .unwrap();
        let created = Txn::new()
            .put("/o/a", Guard::Absent, Bytes::from_static(b"1"))
            .reserve("/r/x", "/o/a")
            .commit(&store)
            .await
            .unwrap()
            .expect("a create of an absent key with a free reservation");
        // the reservation is held: a second object cannot take it, and nothing is written
        let taken = Txn::new()
            .put("/o/b", Guard::Absent, Bytes::from_static(b"2"))
            .reserve("/r/x", "/o/b")
            .commit(&store)
            .await
            .unwrap();
        assert_eq!(taken, None);
        assert!(store.get(b"/o/b").await.unwrap().is_none());
        // a stale revision does not hold; the current one does, and releases go with it
        let stale = Txn::new()
            .put("/o/a", Guard::At(created - 1), Bytes::from_static(b"3"))
            .commit(&store)
            .await
            .unwrap();
        assert_eq!(stale, None);
        Txn::new()
            .delete("/o/a", Guard::revision(created))
            .release("/r/x")
            .commit(&store)
            .await
            .unwrap()
            .expect("a delete at the current revision");
        assert!(store.get(b"/r/x").await.unwrap().is_none());
        assert!(store.get(b"/o/a").await.unwrap().is_none());
    }
}
