//! `DefaultBinder`: binds through the API server (`POST pods/{name}/binding`), with the
//! attempt's queue wait ([`CycleState::queue_wait`]) on the Binding. It lives outside `plugins`
//! because it needs the scheduler's [`ClusterApi`].

use std::sync::Arc;

use async_trait::async_trait;

use crate::api::ClusterApi;
use crate::framework::{BindPlugin, CycleState, Plugin, PodInfo, Status};

pub const NAME: &str = "DefaultBinder";

pub struct DefaultBinder {
    api: Arc<dyn ClusterApi>,
}

impl DefaultBinder {
    pub fn new(api: Arc<dyn ClusterApi>) -> DefaultBinder {
        DefaultBinder { api }
    }
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}

#[async_trait]
impl BindPlugin for DefaultBinder {
    async fn bind(&self, state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        match self.api.bind(pod, node, state.queue_wait).await {
            Ok(()) => Status::success(),
            Err(e) => Status::error(e.to_string()),
        }
    }
}
