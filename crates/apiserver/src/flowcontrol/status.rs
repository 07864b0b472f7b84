//! The FlowSchemas' `Dangling` condition, kept by every API server as upstream's
//! configuration controller keeps it: `True` (reason `NotFound`) while the priority level a
//! FlowSchema names does not exist, `False` (reason `Found`) once it does. Every server
//! writes the same condition, so two of them never disagree.

use std::collections::HashSet;
use std::sync::{Arc, Weak};

use crate::cache::Snapshot;
use crate::error::Result;
use crate::registry;
use crate::server::ApiServer;
use crate::strategy::generic::Condition;

/// Keeps the conditions in line with the FlowSchemas and priority levels in the watch cache,
/// until the server is dropped.
pub fn spawn(server: Weak<ApiServer>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Some(strong) = server.upgrade() else {
                return;
            };
            let types = [super::flow_schemas(), super::priority_levels()];
            let Some(mut changes) = strong.cache.subscribe(&types) else {
                return;
            };
            if let Err(e) = sync(&strong, &changes.snapshots[0], &changes.snapshots[1]).await {
                tracing::warn!(error = %e, "FlowSchema conditions");
                drop(strong);
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
            drop(strong);
            if !changes.changed().await {
                return;
            }
        }
    })
}

async fn sync(server: &Arc<ApiServer>, schemas: &Snapshot, levels: &Snapshot) -> Result<()> {
    let names: HashSet<String> = levels
        .objects
        .iter()
        .filter_map(|c| c.object().ok())
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    for object in schemas.objects.iter().filter_map(|c| c.object().ok()) {
        let (Some(name), Some(level)) = (
            object["metadata"]["name"].as_str(),
            object
                .pointer("/spec/priorityLevelConfiguration/name")
                .and_then(|n| n.as_str()),
        ) else {
            continue;
        };
        let found = names.contains(level);
        let message = dangling_message(level, found);
        let (status, reason) = if found {
            ("False", "Found")
        } else {
            ("True", "NotFound")
        };
        let condition = Condition {
            type_: "Dangling",
            status,
            reason,
            message: &message,
        };
        if !condition.is_in(&object) {
            let resource = (super::GROUP, "flowschemas");
            registry::write_condition(server, resource, name, &condition).await?;
        }
    }
    Ok(())
}

/// Upstream's message for the condition.
fn dangling_message(level: &str, exists: bool) -> String {
    if exists {
        format!(
            "This FlowSchema references the PriorityLevelConfiguration object named {level:?} and it exists"
        )
    } else {
        format!(
            "This FlowSchema references the PriorityLevelConfiguration object named {level:?} but there is no such object"
        )
    }
}
