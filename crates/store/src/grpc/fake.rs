//! An in-memory [`Store`] for the facade's tests: etcd's semantics kept simple (reads at past
//! revisions replay the history), so the facade can be tested before and apart from the real
//! backends. Not for production: every read at a past revision costs the whole history.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use crate::error::{Error, Result};
use crate::store::{Store, WatchControl, WatchStream};
use crate::types::*;

#[derive(Clone)]
pub(crate) struct FakeStore {
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    revision: i64,
    compacted: i64,
    /// Every write revision's events, oldest first.
    history: Vec<(i64, Vec<Event>)>,
    live: BTreeMap<Bytes, KeyValue>,
    leases: BTreeMap<i64, i64>,
    next_lease: i64,
    watchers: Vec<Watcher>,
}

struct Watcher {
    range: KeyRange,
    prev_kv: bool,
    tx: mpsc::UnboundedSender<Result<WatchBatch>>,
}

impl FakeStore {
    /// An empty store at revision 1, as a fresh etcd.
    pub(crate) fn new() -> Self {
        FakeStore {
            state: Arc::new(Mutex::new(State {
                revision: 1,
                ..Default::default()
            })),
        }
    }

    /// Cut off every watcher as lagging (to test how the facade reports it).
    pub(crate) fn lag_all_watchers(&self) {
        let mut st = self.state.lock();
        let next_revision = st.revision + 1;
        for w in st.watchers.drain(..) {
            let _ = w.tx.send(Err(Error::WatcherLagged { next_revision }));
        }
    }
}

impl State {
    fn snapshot(&self, revision: i64) -> Result<BTreeMap<Bytes, KeyValue>> {
        if revision == 0 || revision == self.revision {
            return Ok(self.live.clone());
        }
        if revision > self.revision {
            return Err(Error::FutureRevision {
                requested: revision,
                current: self.revision,
            });
        }
        if revision < self.compacted {
            return Err(Error::Compacted {
                requested: revision,
                compact_revision: self.compacted,
            });
        }
        let mut map = BTreeMap::new();
        for (rev, events) in &self.history {
            if *rev > revision {
                break;
            }
            for ev in events {
                match ev.kind {
                    EventKind::Put => map.insert(ev.kv.key.clone(), ev.kv.clone()),
                    EventKind::Delete => map.remove(&ev.kv.key),
                };
            }
        }
        Ok(map)
    }

    fn range(&self, req: &RangeRequest) -> Result<RangeResponse> {
        if req.range.key.is_empty() {
            return Err(Error::EmptyKey);
        }
        let map = self.snapshot(req.revision)?;
        let all: Vec<_> = map
            .values()
            .filter(|kv| req.range.contains(&kv.key))
            .cloned()
            .collect();
        let count = all.len() as i64;
        let mut kvs = if req.count_only { Vec::new() } else { all };
        let mut more = false;
        if req.limit > 0 && kvs.len() > req.limit as usize {
            kvs.truncate(req.limit as usize);
            more = true;
        }
        if req.keys_only {
            kvs.iter_mut().for_each(|kv| kv.value = Bytes::new());
        }
        Ok(RangeResponse {
            revision: self.revision,
            kvs,
            more,
            count,
        })
    }

    fn put(&mut self, req: &PutRequest, rev: i64, events: &mut Vec<Event>) -> Result<PutResponse> {
        if req.key.is_empty() {
            return Err(Error::EmptyKey);
        }
        if req.lease != 0 && !self.leases.contains_key(&req.lease) {
            return Err(Error::LeaseNotFound { id: req.lease });
        }
        let prev = self.live.get(&req.key).cloned();
        let kv = KeyValue {
            key: req.key.clone(),
            value: req.value.clone(),
            create_revision: prev.as_ref().map_or(rev, |p| p.create_revision),
            mod_revision: rev,
            version: prev.as_ref().map_or(1, |p| p.version + 1),
            lease: req.lease,
        };
        self.live.insert(req.key.clone(), kv.clone());
        events.push(Event {
            kind: EventKind::Put,
            kv,
            prev_kv: prev.clone(),
        });
        Ok(PutResponse {
            revision: rev,
            prev_kv: if req.prev_kv { prev } else { None },
        })
    }

    fn delete(&mut self, req: &DeleteRequest, rev: i64, events: &mut Vec<Event>) -> DeleteResponse {
        let keys: Vec<Bytes> = self
            .live
            .keys()
            .filter(|k| req.range.contains(k))
            .cloned()
            .collect();
        let mut prev_kvs = Vec::new();
        for k in keys {
            let prev = self.live.remove(&k).expect("listed");
            let kv = KeyValue {
                key: k,
                mod_revision: rev,
                ..Default::default()
            };
            events.push(Event {
                kind: EventKind::Delete,
                kv,
                prev_kv: Some(prev.clone()),
            });
            prev_kvs.push(prev);
        }
        let deleted = prev_kvs.len() as i64;
        DeleteResponse {
            revision: rev,
            deleted,
            prev_kvs: if req.prev_kv { prev_kvs } else { Vec::new() },
        }
    }

    /// Record the events of revision `rev` (if any) and send them to watchers.
    fn commit(&mut self, rev: i64, events: Vec<Event>) -> i64 {
        if events.is_empty() {
            return self.revision;
        }
        self.revision = rev;
        self.watchers.retain(|w| {
            let events: Vec<Event> = events
                .iter()
                .filter(|ev| w.range.contains(&ev.kv.key))
                .map(|ev| Event {
                    prev_kv: if w.prev_kv { ev.prev_kv.clone() } else { None },
                    ..ev.clone()
                })
                .collect();
            events.is_empty()
                || w.tx
                    .send(Ok(WatchBatch {
                        revision: rev,
                        events,
                    }))
                    .is_ok()
        });
        self.history.push((rev, events));
        rev
    }

    fn compare(&self, c: &Compare) -> bool {
        let kv = self.live.get(&c.range.key);
        let ord = match &c.target {
            CompareTarget::Version(v) => kv.map_or(0, |kv| kv.version).cmp(v),
            CompareTarget::CreateRevision(v) => kv.map_or(0, |kv| kv.create_revision).cmp(v),
            CompareTarget::ModRevision(v) => kv.map_or(0, |kv| kv.mod_revision).cmp(v),
            CompareTarget::Lease(v) => kv.map_or(0, |kv| kv.lease).cmp(v),
            CompareTarget::Value(v) => match kv {
                Some(kv) => kv.value.cmp(v),
                None => return false,
            },
        };
        match c.op {
            CompareOp::Equal => ord.is_eq(),
            CompareOp::Greater => ord.is_gt(),
            CompareOp::Less => ord.is_lt(),
            CompareOp::NotEqual => ord.is_ne(),
        }
    }
}

struct Progress {
    state: Arc<Mutex<State>>,
    tx: mpsc::UnboundedSender<Result<WatchBatch>>,
}

impl WatchControl for Progress {
    fn request_progress(&self) {
        let st = self.state.lock();
        let _ = self.tx.send(Ok(WatchBatch {
            revision: st.revision,
            events: Vec::new(),
        }));
    }
}

#[async_trait]
impl Store for FakeStore {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.state.lock().range(&req)
    }

    async fn put(&self, req: PutRequest) -> Result<PutResponse> {
        let mut st = self.state.lock();
        let rev = st.revision + 1;
        let mut events = Vec::new();
        let resp = st.put(&req, rev, &mut events)?;
        st.commit(rev, events);
        Ok(resp)
    }

    async fn delete(&self, req: DeleteRequest) -> Result<DeleteResponse> {
        let mut st = self.state.lock();
        let rev = st.revision + 1;
        let mut events = Vec::new();
        let mut resp = st.delete(&req, rev, &mut events);
        resp.revision = st.commit(rev, events);
        Ok(resp)
    }

    async fn txn(&self, req: TxnRequest) -> Result<TxnResponse> {
        let mut st = self.state.lock();
        let succeeded = req.compare.iter().all(|c| st.compare(c));
        let ops = if succeeded {
            &req.success
        } else {
            &req.failure
        };
        let rev = st.revision + 1;
        let mut events = Vec::new();
        let mut responses = Vec::new();
        for op in ops {
            responses.push(match op {
                TxnOp::Range(r) => TxnOpResponse::Range(st.range(r)?),
                TxnOp::Put(p) => TxnOpResponse::Put(st.put(p, rev, &mut events)?),
                TxnOp::Delete(d) => TxnOpResponse::Delete(st.delete(d, rev, &mut events)),
            });
        }
        let revision = st.commit(rev, events);
        Ok(TxnResponse {
            revision,
            succeeded,
            responses,
        })
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream> {
        let mut st = self.state.lock();
        let (tx, rx) = mpsc::unbounded_channel();
        let control = Arc::new(Progress {
            state: self.state.clone(),
            tx: tx.clone(),
        });
        if req.start_revision > 0 && req.start_revision < st.compacted {
            let _ = tx.send(Err(Error::Compacted {
                requested: req.start_revision,
                compact_revision: st.compacted,
            }));
            return Ok(WatchStream::new(UnboundedReceiverStream::new(rx), control));
        }
        let start = if req.start_revision == 0 {
            st.revision + 1
        } else {
            req.start_revision
        };
        for (rev, events) in st.history.iter().filter(|(rev, _)| *rev >= start) {
            let events: Vec<Event> = events
                .iter()
                .filter(|ev| req.range.contains(&ev.kv.key))
                .map(|ev| Event {
                    prev_kv: if req.prev_kv {
                        ev.prev_kv.clone()
                    } else {
                        None
                    },
                    ..ev.clone()
                })
                .collect();
            if !events.is_empty() {
                let _ = tx.send(Ok(WatchBatch {
                    revision: *rev,
                    events,
                }));
            }
        }
        st.watchers.push(Watcher {
            range: req.range,
            prev_kv: req.prev_kv,
            tx,
        });
        Ok(WatchStream::new(UnboundedReceiverStream::new(rx), control))
    }

    async fn compact(&self, revision: i64) -> Result<()> {
        let mut st = self.state.lock();
        if revision <= st.compacted {
            return Err(Error::Compacted {
                requested: revision,
                compact_revision: st.compacted,
            });
        }
        if revision > st.revision {
            return Err(Error::FutureRevision {
                requested: revision,
                current: st.revision,
            });
        }
        st.compacted = revision;
        Ok(())
    }

    async fn lease_grant(&self, id: i64, ttl_secs: i64) -> Result<LeaseGrant> {
        let mut st = self.state.lock();
        let id = if id == 0 {
            st.next_lease += 1;
            0x1000 + st.next_lease
        } else {
            id
        };
        if st.leases.insert(id, ttl_secs).is_some() {
            return Err(Error::LeaseExists { id });
        }
        Ok(LeaseGrant { id, ttl: ttl_secs })
    }

    async fn lease_revoke(&self, id: i64) -> Result<i64> {
        let mut st = self.state.lock();
        st.leases.remove(&id).ok_or(Error::LeaseNotFound { id })?;
        let keys: Vec<Bytes> = st
            .live
            .values()
            .filter(|kv| kv.lease == id)
            .map(|kv| kv.key.clone())
            .collect();
        let rev = st.revision + 1;
        let mut events = Vec::new();
        for k in keys {
            st.delete(
                &DeleteRequest {
                    range: KeyRange::key(k),
                    prev_kv: false,
                },
                rev,
                &mut events,
            );
        }
        Ok(st.commit(rev, events))
    }

    async fn lease_keep_alive(&self, id: i64) -> Result<i64> {
        self.state
            .lock()
            .leases
            .get(&id)
            .copied()
            .ok_or(Error::LeaseNotFound { id })
    }

    async fn lease_time_to_live(&self, id: i64, keys: bool) -> Result<LeaseInfo> {
        let st = self.state.lock();
        let ttl = *st.leases.get(&id).ok_or(Error::LeaseNotFound { id })?;
        let keys = if keys {
            st.live
                .values()
                .filter(|kv| kv.lease == id)
                .map(|kv| kv.key.clone())
                .collect()
        } else {
            Vec::new()
        };
        Ok(LeaseInfo {
            id,
            ttl,
            granted_ttl: ttl,
            keys,
        })
    }

    async fn lease_list(&self) -> Result<Vec<i64>> {
        Ok(self.state.lock().leases.keys().copied().collect())
    }

    async fn status(&self) -> Result<StoreStatus> {
        let st = self.state.lock();
        Ok(StoreStatus {
            revision: st.revision,
            compact_revision: st.compacted,
            db_size: 4096,
            db_size_in_use: 2048,
            version: "fake".to_string(),
        })
    }
}
