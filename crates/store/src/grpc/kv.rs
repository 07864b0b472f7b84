//! The KV service: Range, Put, DeleteRange, Txn and Compact onto [`Store`] calls.
//!
//! What the store does not do itself is done here, as etcd's `v3_server`/`apply` does it: sorting
//! and revision filters of Range (fetch everything, filter, sort, then cut to the limit), and
//! Put's `ignore_value`/`ignore_lease` (a compare-and-swap loop on the key's mod revision).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::Facade;
use super::convert::*;
use super::pb::etcdserverpb as rpc;
use crate::store::Store;
use crate::types::*;

pub(crate) struct KvService<S> {
    f: Arc<Facade<S>>,
}

impl<S> KvService<S> {
    pub(crate) fn new(f: Arc<Facade<S>>) -> Self {
        KvService { f }
    }

    /// Refuse a request larger than etcd's gRPC limit with grpc-go's status and message, as etcd
    /// does (the transport's own decoding limit sits higher, so this check is the one that fires).
    fn check_size(&self, req: &impl prost::Message) -> Result<(), Status> {
        let size = req.encoded_len();
        let limit = self.f.config.max_request_bytes;
        if size > limit {
            let msg = format!("grpc: received message larger than max ({size} vs. {limit})");
            return Err(Status::resource_exhausted(msg));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl<S: Store> rpc::kv_server::Kv for KvService<S> {
    async fn range(
        &self,
        req: Request<rpc::RangeRequest>,
    ) -> Result<Response<rpc::RangeResponse>, Status> {
        let plan = RangePlan::new(req.into_inner())?;
        let resp = self
            .f
            .store
            .range(plan.store_request())
            .await
            .map_err(to_status)?;
        let header = self.f.header(resp.revision);
        Ok(Response::new(plan.finish(resp, Some(header))))
    }

    async fn put(
        &self,
        req: Request<rpc::PutRequest>,
    ) -> Result<Response<rpc::PutResponse>, Status> {
        let req = req.into_inner();
        self.check_size(&req)?;
        check_put(&req)?;
        let resp = if req.ignore_value || req.ignore_lease {
            self.put_keeping_current(req).await?
        } else {
            self.f
                .store
                .put(put_from_pb(req))
                .await
                .map_err(to_status)?
        };
        self.f.after_commit().await;
        Ok(Response::new(rpc::PutResponse {
            header: Some(self.f.header(resp.revision)),
            prev_kv: resp.prev_kv.map(kv_to_pb),
        }))
    }

    async fn delete_range(
        &self,
        req: Request<rpc::DeleteRangeRequest>,
    ) -> Result<Response<rpc::DeleteRangeResponse>, Status> {
        let del = delete_from_pb(req.into_inner())?;
        let resp = self.f.store.delete(del).await.map_err(to_status)?;
        self.f.after_commit().await;
        let header = Some(self.f.header(resp.revision));
        Ok(Response::new(delete_to_pb(resp, header)))
    }

    async fn txn(
        &self,
        req: Request<rpc::TxnRequest>,
    ) -> Result<Response<rpc::TxnResponse>, Status> {
        let req = req.into_inner();
        self.check_size(&req)?;
        let max = self.f.config.max_txn_ops;
        if req.compare.len() > max || req.success.len() > max || req.failure.len() > max {
            return Err(invalid(MSG_TOO_MANY_OPS));
        }
        let compare = req
            .compare
            .into_iter()
            .map(compare_from_pb)
            .collect::<Result<Vec<_>, _>>()?;
        let (success, success_plans) = ops_from_pb(req.success)?;
        let (failure, failure_plans) = ops_from_pb(req.failure)?;
        let txn = TxnRequest {
            compare,
            success,
            failure,
        };
        let resp = self.f.store.txn(txn).await.map_err(to_status)?;
        self.f.after_commit().await;
        let plans = if resp.succeeded {
            success_plans
        } else {
            failure_plans
        };
        let responses = resp
            .responses
            .into_iter()
            .zip(plans)
            .map(|(op, plan)| {
                let response = match op {
                    TxnOpResponse::Range(r) => {
                        let header = Some(nested_header(r.revision));
                        let plan = plan.expect("a range response answers a range op");
                        rpc::response_op::Response::ResponseRange(plan.finish(r, header))
                    }
                    TxnOpResponse::Put(p) => {
                        rpc::response_op::Response::ResponsePut(rpc::PutResponse {
                            header: Some(nested_header(p.revision)),
                            prev_kv: p.prev_kv.map(kv_to_pb),
                        })
                    }
                    TxnOpResponse::Delete(d) => {
                        let header = Some(nested_header(d.revision));
                        rpc::response_op::Response::ResponseDeleteRange(delete_to_pb(d, header))
                    }
                };
                rpc::ResponseOp {
                    response: Some(response),
                }
            })
            .collect();
        Ok(Response::new(rpc::TxnResponse {
            header: Some(self.f.header(resp.revision)),
            succeeded: resp.succeeded,
            responses,
        }))
    }

    async fn compact(
        &self,
        req: Request<rpc::CompactionRequest>,
    ) -> Result<Response<rpc::CompactionResponse>, Status> {
        // `physical` needs no waiting: the store's compaction has taken effect when it returns.
        let req = req.into_inner();
        self.f
            .store
            .compact(req.revision)
            .await
            .map_err(to_status)?;
        let revision = self.f.current_revision().await;
        Ok(Response::new(rpc::CompactionResponse {
            header: Some(self.f.header(revision)),
        }))
    }
}

impl<S: Store> KvService<S> {
    /// A put with `ignore_value` and/or `ignore_lease`: write the key's current value and/or lease,
    /// retrying if the key changes between the read and the write. The key must exist.
    async fn put_keeping_current(&self, req: rpc::PutRequest) -> Result<PutResponse, Status> {
        let (ignore_value, ignore_lease) = (req.ignore_value, req.ignore_lease);
        let req = put_from_pb(req);
        loop {
            let current = self
                .f
                .store
                .range(RangeRequest {
                    range: KeyRange::key(req.key.clone()),
                    ..Default::default()
                })
                .await
                .map_err(to_status)?;
            let Some(kv) = current.kvs.into_iter().next() else {
                return Err(invalid(MSG_KEY_NOT_FOUND));
            };
            let put = PutRequest {
                key: req.key.clone(),
                value: if ignore_value {
                    kv.value.clone()
                } else {
                    req.value.clone()
                },
                lease: if ignore_lease { kv.lease } else { req.lease },
                prev_kv: req.prev_kv,
            };
            let txn = TxnRequest {
                compare: vec![Compare::new(
                    req.key.clone(),
                    CompareOp::Equal,
                    CompareTarget::ModRevision(kv.mod_revision),
                )],
                success: vec![TxnOp::Put(put)],
                failure: vec![],
            };
            let resp = self.f.store.txn(txn).await.map_err(to_status)?;
            if resp.succeeded {
                if let Some(TxnOpResponse::Put(put)) = resp.responses.into_iter().next() {
                    return Ok(put);
                }
                return Err(Status::internal(
                    "store answered a put in a txn with another response",
                ));
            }
        }
    }
}

/// The header of a response nested in a txn response: etcd fills in only the revision there.
fn nested_header(revision: i64) -> rpc::ResponseHeader {
    rpc::ResponseHeader {
        revision,
        ..Default::default()
    }
}

fn check_put(req: &rpc::PutRequest) -> Result<(), Status> {
    if req.key.is_empty() {
        return Err(invalid(MSG_EMPTY_KEY));
    }
    if req.ignore_value && !req.value.is_empty() {
        return Err(invalid(MSG_VALUE_PROVIDED));
    }
    if req.ignore_lease && req.lease != 0 {
        return Err(invalid(MSG_LEASE_PROVIDED));
    }
    Ok(())
}

fn delete_from_pb(req: rpc::DeleteRangeRequest) -> Result<DeleteRequest, Status> {
    if req.key.is_empty() {
        return Err(invalid(MSG_EMPTY_KEY));
    }
    Ok(DeleteRequest {
        range: key_range(req.key, req.range_end),
        prev_kv: req.prev_kv,
    })
}

fn delete_to_pb(
    resp: DeleteResponse,
    header: Option<rpc::ResponseHeader>,
) -> rpc::DeleteRangeResponse {
    rpc::DeleteRangeResponse {
        header,
        deleted: resp.deleted,
        prev_kvs: resp.prev_kvs.into_iter().map(kv_to_pb).collect(),
    }
}

/// A txn branch's ops, with the plan of each range op (to finish its response the same way).
type Ops = (Vec<TxnOp>, Vec<Option<RangePlan>>);

fn ops_from_pb(ops: Vec<rpc::RequestOp>) -> Result<Ops, Status> {
    use rpc::request_op::Request as Op;
    let mut out = Vec::with_capacity(ops.len());
    let mut plans = Vec::with_capacity(ops.len());
    for op in ops {
        match op.request {
            Some(Op::RequestRange(r)) => {
                let plan = RangePlan::new(r)?;
                out.push(TxnOp::Range(plan.store_request()));
                plans.push(Some(plan));
            }
            Some(Op::RequestPut(p)) => {
                check_put(&p)?;
                if p.ignore_value || p.ignore_lease {
                    return Err(Status::unimplemented(
                        "ignore_value and ignore_lease are not supported inside a txn",
                    ));
                }
                out.push(TxnOp::Put(put_from_pb(p)));
                plans.push(None);
            }
            Some(Op::RequestDeleteRange(d)) => {
                out.push(TxnOp::Delete(delete_from_pb(d)?));
                plans.push(None);
            }
            Some(Op::RequestTxn(_)) => {
                return Err(Status::unimplemented(
                    "nested txn requests are not supported",
                ));
            }
            // etcd answers an empty op so.
            None => return Err(invalid(MSG_KEY_NOT_FOUND)),
        }
    }
    Ok((out, plans))
}

/// How to serve one Range request with the store's plain ascending-key range: what to ask the
/// store for, and what to do with its answer (filter, sort, cut to the limit).
#[derive(Debug)]
struct RangePlan {
    req: rpc::RangeRequest,
    /// Sort by this target in this order after reading; `None` when key order is wanted.
    sort: Option<(
        rpc::range_request::SortTarget,
        rpc::range_request::SortOrder,
    )>,
    /// Read the whole range and cut to the limit here (sorting or filtering needs every key).
    read_all: bool,
}

impl RangePlan {
    fn new(req: rpc::RangeRequest) -> Result<Self, Status> {
        use rpc::range_request::{SortOrder, SortTarget};
        if req.key.is_empty() {
            return Err(invalid(MSG_EMPTY_KEY));
        }
        let order =
            SortOrder::try_from(req.sort_order).map_err(|_| invalid(MSG_INVALID_SORT_OPTION))?;
        let target =
            SortTarget::try_from(req.sort_target).map_err(|_| invalid(MSG_INVALID_SORT_OPTION))?;
        // As etcd: sorting by anything but the key with no order means ascending.
        let effective = if target != SortTarget::Key && order == SortOrder::None {
            SortOrder::Ascend
        } else {
            order
        };
        let sort = match (target, effective) {
            (_, SortOrder::None) | (SortTarget::Key, SortOrder::Ascend) => None,
            other => Some(other),
        };
        // As etcd: an explicit order or a revision filter reads everything, then cuts.
        let read_all = order != SortOrder::None
            || req.min_mod_revision != 0
            || req.max_mod_revision != 0
            || req.min_create_revision != 0
            || req.max_create_revision != 0;
        Ok(RangePlan {
            req,
            sort,
            read_all,
        })
    }

    fn store_request(&self) -> RangeRequest {
        let sorts_by_value = matches!(self.sort, Some((rpc::range_request::SortTarget::Value, _)));
        RangeRequest {
            range: key_range(self.req.key.clone(), self.req.range_end.clone()),
            limit: if self.read_all { 0 } else { self.req.limit },
            revision: self.req.revision,
            keys_only: self.req.keys_only && !sorts_by_value,
            count_only: self.req.count_only,
        }
    }

    fn finish(
        &self,
        resp: RangeResponse,
        header: Option<rpc::ResponseHeader>,
    ) -> rpc::RangeResponse {
        use rpc::range_request::{SortOrder, SortTarget};
        let r = &self.req;
        let mut kvs = resp.kvs;
        let mut more = resp.more;
        kvs.retain(|kv| {
            (r.min_mod_revision == 0 || kv.mod_revision >= r.min_mod_revision)
                && (r.max_mod_revision == 0 || kv.mod_revision <= r.max_mod_revision)
                && (r.min_create_revision == 0 || kv.create_revision >= r.min_create_revision)
                && (r.max_create_revision == 0 || kv.create_revision <= r.max_create_revision)
        });
        if let Some((target, order)) = self.sort {
            // Stable: keys stay ascending among equal targets.
            match target {
                SortTarget::Key => kvs.sort_by(|a, b| a.key.cmp(&b.key)),
                SortTarget::Version => kvs.sort_by_key(|kv| kv.version),
                SortTarget::Create => kvs.sort_by_key(|kv| kv.create_revision),
                SortTarget::Mod => kvs.sort_by_key(|kv| kv.mod_revision),
                SortTarget::Value => kvs.sort_by(|a, b| a.value.cmp(&b.value)),
            }
            if order == SortOrder::Descend {
                kvs.reverse();
            }
        }
        if self.read_all && r.limit > 0 && kvs.len() > r.limit as usize {
            kvs.truncate(r.limit as usize);
            more = true;
        }
        if r.keys_only {
            for kv in &mut kvs {
                kv.value = bytes::Bytes::new();
            }
        }
        rpc::RangeResponse {
            header,
            kvs: kvs.into_iter().map(kv_to_pb).collect(),
            more,
            count: resp.count,
        }
    }
}
