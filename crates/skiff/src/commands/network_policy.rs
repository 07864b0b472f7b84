//! `skiff network-policy`: the NetworkPolicy enforcement of a node (kube-router's network
//! policy controller in k3s), an ordinary API client: it watches Pods, Namespaces and
//! NetworkPolicies through the API server and programs this host's `inet skiff-netpol`
//! nftables table.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use parking_lot::Mutex;
use skiff_apimachinery::version::user_agent;
use skiff_netpol::controller;
use skiff_netpol::ruleset::Ruleset;
use skiff_runtime::events::{self, Event, Recorder, Reporter};
use skiff_runtime::informer::Informers;
use skiff_runtime::runner::{HostRunner, Runner};
use tokio::sync::Notify;

use super::lifecycle::Lifecycle;

/// The events' `reportingController`.
const REPORTING_CONTROLLER: &str = "skiff-network-policy-controller";

#[derive(Debug, Args)]
pub struct NetworkPolicyArgs {
    /// Kubeconfig with the API server's address and the controller's credentials (user
    /// `system:skiff-controller`, bound to the ClusterRole `system:skiff-network-policy`).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// This node's name: policies are enforced for the pods running on it.
    #[arg(long, value_name = "NAME")]
    pub node_name: String,

    /// Program the rules inside this network namespace (`ip netns exec NAME`) instead of the
    /// host's own.
    #[arg(long, value_name = "NAME")]
    pub netns: Option<String>,
}

pub async fn run(args: NetworkPolicyArgs, lifecycle: Lifecycle) -> anyhow::Result<()> {
    let client = skiff_runtime::http2::client(
        super::kube_config(&args.kubeconfig).await?,
        &user_agent("skiff-network-policy"),
    )?;
    let runner: Arc<dyn Runner> = Arc::new(HostRunner::new(args.netns.clone()));
    controller::ensure_bridge_netfilter(runner.as_ref()).context(
        "preparing the node for network policies (load br_netfilter, or run the server with \
         --disable network-policy)",
    )?;

    let ruleset = Arc::new(Mutex::new(Ruleset::new(&args.node_name)));
    let notify = Arc::new(Notify::new());
    // held until this returns: dropping the factory ends the watches
    let informers = Informers::new(client.clone());
    let synced = controller::subscribe(&informers, ruleset.clone(), notify.clone());
    tokio::select! {
        () = synced => {}
        () = lifecycle.stopped() => return Ok(()),
    }

    let node = args.node_name.clone();
    let announce = lifecycle.clone();
    let counts = ruleset.clone();
    let ready = move || {
        let (policies, pods) = counts.lock().counts();
        announce.ready(format!(
            "skiff network-policy ready: node {node}, {policies} policies over {pods} pods"
        ));
    };
    // a failed apply is reported on the Node: its pods' policies are not what they should be
    let node_events = Recorder::new(
        client,
        Reporter {
            controller: REPORTING_CONTROLLER.into(),
            instance: args.node_name.clone(),
        },
    );
    let failed = |error: &str| {
        let note = format!(
            "{error}; retrying as a whole table every {}s",
            controller::RETRY.as_secs()
        );
        node_events.record(Event::warning(
            events::node_reference(&args.node_name),
            "NetworkPolicyApplyFailed",
            note,
        ));
    };
    let sync_loop = controller::run(ruleset, runner, notify, ready, failed);
    tokio::select! {
        () = sync_loop => anyhow::bail!("the sync loop stopped"),
        () = lifecycle.stopped() => Ok(()),
    }
}
