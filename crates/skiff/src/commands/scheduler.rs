//! `skiff scheduler`: the scheduler on its own, an ordinary API client (seed 000): it watches
//! pods, nodes and the storage objects through the API server, and binds pods (and, for
//! `WaitForFirstConsumer` claims, volumes) there.

use skiff_apimachinery::version::user_agent;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use skiff_runtime::informer::Informers;
use skiff_runtime::leader::{self, LeaderElector};
use skiff_scheduler::api::KubeApi;
use skiff_scheduler::config::Configuration;
use skiff_scheduler::plugins::Handle;
use skiff_scheduler::volumes::Volumes;
use skiff_scheduler::{Scheduler, informer};

use super::lifecycle::Lifecycle;

#[derive(Debug, Args)]
pub struct SchedulerArgs {
    /// Kubeconfig with the API server's address and the scheduler's credentials.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// A `KubeSchedulerConfiguration` (kubescheduler.config.k8s.io/v1) file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Schedule only while holding the Lease `kube-system/kube-scheduler` (or the one the
    /// configuration's `leaderElection` names), so that several replicas can run and one
    /// schedules (upstream's `--leader-elect`; the configuration's `leaderElect` wins).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,

    /// Where to serve `/metrics` and `/healthz` over plain HTTP (port 0 picks a free one,
    /// printed in the ready line); upstream serves them on its secure port 10259.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:10259")]
    pub metrics_bind_address: std::net::SocketAddr,
}

/// The Lease replicas elect a leader on, unless the configuration names another.
const LEASE_NAMESPACE: &str = "kube-system";
const LEASE_NAME: &str = "kube-scheduler";

pub async fn run(args: SchedulerArgs, lifecycle: Lifecycle) -> anyhow::Result<()> {
    let config = match &args.config {
        Some(path) => Configuration::parse(
            &std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?,
        )?,
        None => Configuration::default(),
    };
    let builder = skiff_runtime::http2::client_builder(
        super::kube_config(&args.kubeconfig).await?,
        &user_agent("skiff-scheduler"),
    )?;
    let client = match config.client_connection.rate_limit() {
        Some(layer) => builder.with_layer(&layer).build(),
        None => builder.build(),
    };
    let instance = super::instance_name();
    let api = Arc::new(KubeApi::new(client.clone(), instance.clone()));
    let informers = Informers::new(client.clone());
    // the volume plugins read the storage objects from the same informers the scheduler's feed
    // follows (their caches do not keep the informers running)
    let handle = Handle {
        api: api.clone(),
        volumes: Volumes::from_informers(&informers),
    };
    let frameworks = config.frameworks_with(&handle)?;
    drop(handle);
    let names: Vec<String> = frameworks
        .iter()
        .map(|f| f.scheduler_name().to_string())
        .collect();
    let scheduler = Scheduler::new(frameworks, api);

    let (synced_tx, mut synced) = tokio::sync::watch::channel(false);
    // `feed` holds the factory's only clone: the watches stop when it is dropped, however this
    // returns
    let mut feed = tokio::task::JoinSet::new();
    feed.spawn(informer::run(&informers, scheduler.clone(), synced_tx));
    drop(informers);
    tokio::select! {
        r = synced.wait_for(|s| *s) => { r.context("informers stopped")?; }
        () = lifecycle.stopped() => return Ok(()),
    }
    let metrics_addr = {
        let scheduler = scheduler.clone();
        super::metrics::serve(args.metrics_bind_address, &lifecycle, move || {
            scheduler.metrics.encode(scheduler.queue().sizes())
        })
        .await?
    };
    lifecycle.ready(format!(
        "skiff scheduler ready: profiles {}; metrics http://{metrics_addr}/metrics",
        names.join(", ")
    ));

    // replicas keep their caches warm but only the leader schedules
    let election = config.leader_election.clone().unwrap_or_default();
    let elect = election.leader_elect.unwrap_or(args.leader_elect);
    let lease_namespace = election
        .resource_namespace
        .unwrap_or_else(|| LEASE_NAMESPACE.into());
    let lease_name = election.resource_name.unwrap_or_else(|| LEASE_NAME.into());
    let (leading_tx, mut leading) = tokio::sync::watch::channel(!elect);
    if elect {
        let leases = kube::Api::namespaced(client, &lease_namespace);
        let elector = LeaderElector::new(leases, &lease_name, &instance, leader::Config::default());
        tokio::spawn(elector.run(leading_tx));
        tokio::select! {
            r = leading.wait_for(|l| *l) => { r.context("leader election stopped")?; }
            () = lifecycle.stopped() => return Ok(()),
        }
    }
    let run = {
        let scheduler = scheduler.clone();
        tokio::spawn(async move { scheduler.run().await })
    };
    let lost = tokio::select! {
        () = lifecycle.stopped() => false,
        _ = leading.wait_for(|l| !*l) => true,
    };
    scheduler.queue().close();
    drop(feed);
    let _ = run.await;
    if lost {
        // as upstream: a replica that lost the lease exits rather than risk two leaders
        anyhow::bail!("lost the lease {lease_namespace}/{lease_name}");
    }
    Ok(())
}
