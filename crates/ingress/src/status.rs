//! What one elected instance writes back (every node runs the controller; one of them, the
//! holder of the Lease `kube-system/skiff-ingress-controller-leader`, as ingress-nginx elects its
//! status writer): `status.loadBalancer.ingress` of every served Ingress, set to the
//! InternalIPs of the Ready nodes (every node serves the ports), cleared when an Ingress it
//! served stops being served (another class, or its rules gone), and a Warning event for each
//! new [`Problem`] of the configuration (once per problem while it lasts, not once per node).

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, ObjectReference};
use k8s_openapi::api::networking::v1::Ingress;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;
use skiff_runtime::events::{Event, Recorder, Reporter};
use skiff_runtime::informer::{Cache, Change, Informers};
use skiff_runtime::leader::{self, LeaderElector};
use tokio::sync::{Notify, watch};

use crate::config::{Config, IngressRef, Problem};

/// Where the status writer's Lease lives, and its name.
pub const LEASE_NAMESPACE: &str = "kube-system";
pub const LEASE_NAME: &str = "skiff-ingress-controller-leader";
/// The events' `reportingController`.
pub const REPORTING_CONTROLLER: &str = "skiff-ingress-controller";
/// How soon a failed status write is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// The Node cache the writer reads addresses from, waking `changed` on every Node change.
pub fn watch_nodes(informers: &Informers, changed: Arc<Notify>) -> Cache<Node> {
    let nodes = informers.get::<Node>();
    nodes.add_handler(move |_: &Change<Node>| changed.notify_one());
    nodes.cache().clone()
}

/// The InternalIPs of the Ready nodes, sorted.
pub fn node_addresses(nodes: &[Arc<Node>]) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = nodes
        .iter()
        .filter_map(|n| n.status.as_ref())
        .filter(|s| {
            s.conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
        .flat_map(|s| s.addresses.iter().flatten())
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse().ok())
        .collect();
    ips.sort_unstable();
    ips.dedup();
    ips
}

/// The addresses an Ingress's status lists now.
fn status_addresses(ingress: &Ingress) -> Vec<IpAddr> {
    let listed = ingress
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref());
    let mut ips: Vec<IpAddr> = listed
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect();
    ips.sort_unstable();
    ips
}

/// The status writer of an elected instance.
pub struct StatusWriter {
    client: kube::Client,
    ingresses: Cache<Ingress>,
    nodes: Cache<Node>,
    nodes_changed: Arc<Notify>,
    config: watch::Receiver<Arc<Config>>,
    recorder: Recorder,
    /// The problems already reported, forgotten once they are gone.
    reported: HashSet<Problem>,
    /// The Ingresses (namespace, name) served while this instance led: their status is ours to
    /// clear when they stop being served.
    owned: HashSet<(String, String)>,
}

impl StatusWriter {
    pub fn new(
        client: kube::Client,
        ingresses: Cache<Ingress>,
        (nodes, nodes_changed): (Cache<Node>, Arc<Notify>),
        config: watch::Receiver<Arc<Config>>,
        instance: &str,
    ) -> StatusWriter {
        let reporter = Reporter {
            controller: REPORTING_CONTROLLER.into(),
            instance: instance.into(),
        };
        StatusWriter {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            ingresses,
            nodes,
            nodes_changed,
            config,
            reported: HashSet::new(),
            owned: HashSet::new(),
        }
    }

    /// Campaigns for the Lease as `identity`; while leading, keeps statuses and events up to
    /// date; after losing the Lease, campaigns again. Never returns.
    pub async fn run_elected(mut self, identity: &str) {
        loop {
            let (leading_tx, mut leading) = watch::channel(false);
            let leases = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
            let elector =
                LeaderElector::new(leases, LEASE_NAME, identity, leader::Config::default());
            let campaign = tokio::spawn(elector.run(leading_tx));
            if leading.wait_for(|l| *l).await.is_ok() {
                tokio::select! {
                    () = self.write() => {}
                    _ = leading.wait_for(|l| !*l) => {}
                }
            }
            let _ = campaign.await;
            self.reported.clear();
            self.owned.clear();
        }
    }

    /// Writes after every change of the configuration or of a Node, for ever.
    async fn write(&mut self) {
        loop {
            let config = self.config.borrow_and_update().clone();
            self.report(&config.problems);
            let synced = self.sync_status(&config.served).await;
            let retry = async {
                if synced {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(RETRY).await;
            };
            tokio::select! {
                _ = self.config.changed() => {}
                () = self.nodes_changed.notified() => {}
                () = retry => {}
            }
        }
    }

    /// Records an event for each problem not reported yet.
    fn report(&mut self, problems: &[Problem]) {
        self.reported.retain(|p| problems.contains(p));
        for problem in problems {
            if self.reported.insert(problem.clone()) {
                self.recorder.record(
                    Event::warning(
                        reference(&problem.ingress),
                        problem.reason,
                        problem.note.clone(),
                    )
                    .with_action("Sync"),
                );
            }
        }
    }

    /// Sets the status of each served Ingress that lists other addresses, and clears the status
    /// of those served before and no longer; false if a write failed.
    async fn sync_status(&mut self, served: &[IngressRef]) -> bool {
        let addresses = node_addresses(&self.nodes.state());
        let mut ok = true;
        for ingress in served {
            let key = (ingress.namespace.clone(), ingress.name.clone());
            let Some(current) = self.ingresses.get(&object_ref(&key)) else {
                continue;
            };
            self.owned.insert(key.clone());
            if status_addresses(&current) != addresses {
                ok &= self.patch_status(&key, &addresses).await;
            }
        }
        let left: Vec<_> = self
            .owned
            .iter()
            .filter(|(ns, name)| !served.iter().any(|i| &i.namespace == ns && &i.name == name))
            .cloned()
            .collect();
        for key in left {
            let listed = self
                .ingresses
                .get(&object_ref(&key))
                .is_some_and(|i| !status_addresses(&i).is_empty());
            if !listed || self.patch_status(&key, &[]).await {
                self.owned.remove(&key);
            } else {
                ok = false;
            }
        }
        ok
    }

    /// Sets the status of one Ingress to `addresses` (none: cleared); false if the write failed
    /// (an Ingress gone is no failure).
    async fn patch_status(
        &self,
        (namespace, name): &(String, String),
        addresses: &[IpAddr],
    ) -> bool {
        let listed: Vec<_> = addresses
            .iter()
            .map(|ip| json!({"ip": ip.to_string()}))
            .collect();
        let listed = if listed.is_empty() {
            serde_json::Value::Null
        } else {
            listed.into()
        };
        let patch = json!({"status": {"loadBalancer": {"ingress": listed}}});
        let api: Api<Ingress> = Api::namespaced(self.client.clone(), namespace);
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(ingress = %format!("{namespace}/{name}"), ?addresses, "status updated");
                true
            }
            Err(kube::Error::Api(e)) if e.code == 404 => true,
            Err(e) => {
                tracing::warn!(ingress = %format!("{namespace}/{name}"), error = %e, "updating the status");
                false
            }
        }
    }
}

fn object_ref((namespace, name): &(String, String)) -> ObjectRef<Ingress> {
    ObjectRef::new(name).within(namespace)
}

/// The event's `regarding`.
fn reference(ingress: &IngressRef) -> ObjectReference {
    ObjectReference {
        api_version: Some("networking.k8s.io/v1".into()),
        kind: Some("Ingress".into()),
        namespace: Some(ingress.namespace.clone()),
        name: Some(ingress.name.clone()),
        uid: Some(ingress.uid.clone()).filter(|u| !u.is_empty()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ip: &str, ready: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": ip},
                "status": {
                    "conditions": [{"type": "Ready", "status": ready}],
                    "addresses": [{"type": "Hostname", "address": "h"},
                                  {"type": "InternalIP", "address": ip}],
                },
            }))
            .unwrap(),
        )
    }

    #[test]
    fn the_internal_ips_of_ready_nodes_are_the_addresses() {
        let nodes = [
            node("10.0.0.3", "True"),
            node("10.0.0.2", "True"),
            node("10.0.0.4", "False"),
            node("10.0.0.5", "Unknown"),
        ];
        let ips: Vec<String> = node_addresses(&nodes)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(ips, ["10.0.0.2", "10.0.0.3"]);
    }

    #[test]
    fn an_ingress_status_is_read_as_sorted_addresses() {
        let ingress: Ingress = serde_json::from_value(json!({
            "metadata": {"name": "i"},
            "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.3"}, {"ip": "10.0.0.2"},
                                                    {"hostname": "lb.example.com"}]}},
        }))
        .unwrap();
        let ips: Vec<String> = status_addresses(&ingress)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(ips, ["10.0.0.2", "10.0.0.3"]);
    }
}
