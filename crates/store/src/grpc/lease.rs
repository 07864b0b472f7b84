//! The Lease service: grant, revoke, the keep-alive stream, time-to-live and list, as etcd's
//! `v3rpc/lease.go` answers them (a missing lease is TTL 0 in a keep-alive and TTL -1 in
//! time-to-live, not an error).

use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::Facade;
use super::convert::*;
use super::pb::etcdserverpb as rpc;
use crate::error::Error;
use crate::store::Store;

/// etcd's largest lease TTL in seconds (`lease.MaxLeaseTTL`).
const MAX_LEASE_TTL: i64 = 9_000_000_000;

/// Keep-alive answers queued for a client before the stream stops reading its requests.
const KEEP_ALIVE_BUFFER: usize = 16;

pub(crate) struct LeaseService<S> {
    f: Arc<Facade<S>>,
}

impl<S> LeaseService<S> {
    pub(crate) fn new(f: Arc<Facade<S>>) -> Self {
        LeaseService { f }
    }
}

#[tonic::async_trait]
impl<S: Store> rpc::lease_server::Lease for LeaseService<S> {
    async fn lease_grant(
        &self,
        req: Request<rpc::LeaseGrantRequest>,
    ) -> Result<Response<rpc::LeaseGrantResponse>, Status> {
        let req = req.into_inner();
        if req.ttl > MAX_LEASE_TTL {
            return Err(Status::out_of_range(MSG_LEASE_TTL_TOO_LARGE));
        }
        let grant = self
            .f
            .store
            .lease_grant(req.id, req.ttl)
            .await
            .map_err(to_status)?;
        Ok(Response::new(rpc::LeaseGrantResponse {
            header: Some(self.f.cached_header()),
            id: grant.id,
            ttl: grant.ttl,
            error: String::new(),
        }))
    }

    async fn lease_revoke(
        &self,
        req: Request<rpc::LeaseRevokeRequest>,
    ) -> Result<Response<rpc::LeaseRevokeResponse>, Status> {
        let id = req.into_inner().id;
        let revision = self.f.store.lease_revoke(id).await.map_err(to_status)?;
        Ok(Response::new(rpc::LeaseRevokeResponse {
            header: Some(self.f.header(revision)),
        }))
    }

    type LeaseKeepAliveStream = ReceiverStream<Result<rpc::LeaseKeepAliveResponse, Status>>;

    async fn lease_keep_alive(
        &self,
        req: Request<Streaming<rpc::LeaseKeepAliveRequest>>,
    ) -> Result<Response<Self::LeaseKeepAliveStream>, Status> {
        let mut inbound = req.into_inner();
        let (tx, rx) = mpsc::channel(KEEP_ALIVE_BUFFER);
        let f = self.f.clone();
        tokio::spawn(async move {
            loop {
                let req = tokio::select! {
                    msg = inbound.message() => match msg {
                        Ok(Some(req)) => req,
                        Ok(None) => break,
                        Err(status) => {
                            tracing::debug!(%status, "lease keep-alive stream from client failed");
                            break;
                        }
                    },
                    () = f.stopped() => break,
                };
                let answer = match f.store.lease_keep_alive(req.id).await {
                    Ok(ttl) => Ok(ttl),
                    Err(Error::LeaseNotFound { .. }) => Ok(0),
                    Err(err) => Err(status_from_error(&err)),
                };
                let failed = answer.is_err();
                let resp = answer.map(|ttl| rpc::LeaseKeepAliveResponse {
                    header: Some(f.cached_header()),
                    id: req.id,
                    ttl,
                });
                let sent = tokio::select! {
                    sent = tx.send(resp) => sent.is_ok(),
                    () = f.stopped() => false,
                };
                if !sent || failed {
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn lease_time_to_live(
        &self,
        req: Request<rpc::LeaseTimeToLiveRequest>,
    ) -> Result<Response<rpc::LeaseTimeToLiveResponse>, Status> {
        let req = req.into_inner();
        let resp = match self.f.store.lease_time_to_live(req.id, req.keys).await {
            Ok(info) => rpc::LeaseTimeToLiveResponse {
                header: Some(self.f.cached_header()),
                id: info.id,
                ttl: info.ttl,
                granted_ttl: info.granted_ttl,
                keys: info.keys,
            },
            Err(Error::LeaseNotFound { .. }) => rpc::LeaseTimeToLiveResponse {
                header: Some(self.f.cached_header()),
                id: req.id,
                ttl: -1,
                ..Default::default()
            },
            Err(err) => return Err(status_from_error(&err)),
        };
        Ok(Response::new(resp))
    }

    async fn lease_leases(
        &self,
        _req: Request<rpc::LeaseLeasesRequest>,
    ) -> Result<Response<rpc::LeaseLeasesResponse>, Status> {
        let ids = self.f.store.lease_list().await.map_err(to_status)?;
        Ok(Response::new(rpc::LeaseLeasesResponse {
            header: Some(self.f.cached_header()),
            leases: ids.into_iter().map(|id| rpc::LeaseStatus { id }).collect(),
        }))
    }
}
