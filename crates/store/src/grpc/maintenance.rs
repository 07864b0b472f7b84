//! The Maintenance service (Status, Alarm, Defragment) and the Cluster service's MemberList:
//! Skiff's store is a single member that is always its own leader, in raft term 1.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::Facade;
use super::convert::to_status;
use super::pb::etcdserverpb as rpc;
use crate::store::Store;

pub(crate) struct MaintenanceService<S> {
    f: Arc<Facade<S>>,
}

impl<S> MaintenanceService<S> {
    pub(crate) fn new(f: Arc<Facade<S>>) -> Self {
        MaintenanceService { f }
    }
}

#[tonic::async_trait]
impl<S: Store> rpc::maintenance_server::Maintenance for MaintenanceService<S> {
    /// No alarms are ever raised: the store has no space quota, and it refuses to open corrupt
    /// data instead of serving it. Activating or deactivating an alarm changes nothing.
    async fn alarm(
        &self,
        _req: Request<rpc::AlarmRequest>,
    ) -> Result<Response<rpc::AlarmResponse>, Status> {
        Ok(Response::new(rpc::AlarmResponse {
            header: Some(self.f.cached_header()),
            alarms: Vec::new(),
        }))
    }

    async fn status(
        &self,
        _req: Request<rpc::StatusRequest>,
    ) -> Result<Response<rpc::StatusResponse>, Status> {
        let status = self.f.store.status().await.map_err(to_status)?;
        let index = u64::try_from(status.revision).unwrap_or(0);
        Ok(Response::new(rpc::StatusResponse {
            header: Some(self.f.header(status.revision)),
            version: self.f.config.version.clone(),
            db_size: status.db_size,
            leader: self.f.config.member_id,
            raft_index: index,
            raft_term: 1,
            raft_applied_index: index,
            errors: Vec::new(),
            db_size_in_use: status.db_size_in_use,
            is_learner: false,
        }))
    }

    /// Nothing to do: the store reuses its free space itself.
    async fn defragment(
        &self,
        _req: Request<rpc::DefragmentRequest>,
    ) -> Result<Response<rpc::DefragmentResponse>, Status> {
        let revision = self.f.current_revision().await;
        Ok(Response::new(rpc::DefragmentResponse {
            header: Some(self.f.header(revision)),
        }))
    }
}

pub(crate) struct ClusterService<S> {
    f: Arc<Facade<S>>,
}

impl<S> ClusterService<S> {
    pub(crate) fn new(f: Arc<Facade<S>>) -> Self {
        ClusterService { f }
    }
}

#[tonic::async_trait]
impl<S: Store> rpc::cluster_server::Cluster for ClusterService<S> {
    /// The one member: this server, with no peer URLs (it has no peers).
    async fn member_list(
        &self,
        _req: Request<rpc::MemberListRequest>,
    ) -> Result<Response<rpc::MemberListResponse>, Status> {
        let config = &self.f.config;
        Ok(Response::new(rpc::MemberListResponse {
            header: Some(self.f.cached_header()),
            members: vec![rpc::Member {
                id: config.member_id,
                name: config.member_name.clone(),
                peer_ur_ls: Vec::new(),
                client_ur_ls: config.client_urls.clone(),
                is_learner: false,
            }],
        }))
    }
}
