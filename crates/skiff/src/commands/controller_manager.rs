//! `skiff controller-manager`: the reconcile loops on their own, an ordinary API client (seeds
//! 001–003). Replicas elect a leader on the Lease `kube-system/skiff-controller-manager`; only the
//! leader runs controllers, and one that loses the lease exits, as upstream's does.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use clap::Args;
use skiff_controllers::Context;
use skiff_runtime::leader::{self, LeaderElector};

use super::store::shutdown_signal;

#[derive(Debug, Args)]
pub struct ControllerManagerArgs {
    /// Kubeconfig with the API server's address and the controller manager's credentials.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// Controllers to run: `*` is every controller on by default, `name` adds one, `-name`
    /// removes one (upstream's `--controllers`).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,

    /// Run controllers only while holding the Lease `kube-system/skiff-controller-manager`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub leader_elect: bool,

    /// The most endpoints one EndpointSlice holds (upstream's `--max-endpoints-per-slice`).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub max_endpoints_per_slice: u16,
}

const LEASE_NAMESPACE: &str = "kube-system";
const LEASE_NAME: &str = "skiff-controller-manager";

pub async fn run(args: ControllerManagerArgs) -> anyhow::Result<()> {
    let selected = skiff_controllers::select(&args.controllers).map_err(super::UsageError)?;
    let client = kube::Client::try_from(super::kube_config(&args.kubeconfig).await?)?;
    let instance = super::instance_name();
    let mut ctx = Context::new(client.clone(), &instance);
    ctx.config.max_endpoints_per_slice = args.max_endpoints_per_slice.into();
    let ctx = Arc::new(ctx);

    let (leading_tx, mut leading) = tokio::sync::watch::channel(!args.leader_elect);
    if args.leader_elect {
        let leases = kube::Api::namespaced(client, LEASE_NAMESPACE);
        let elector = LeaderElector::new(leases, LEASE_NAME, &instance, leader::Config::default());
        tokio::spawn(elector.run(leading_tx));
    }
    let names: Vec<&str> = selected.iter().map(|d| d.name).collect();
    println!(
        "skiff controller-manager ready: controllers {}",
        names.join(", ")
    );
    tokio::select! {
        r = leading.wait_for(|l| *l) => { r.context("leader election stopped")?; }
        () = shutdown_signal() => return Ok(()),
    }
    tracing::info!(controllers = ?names, "leading; starting controllers");
    tokio::select! {
        r = skiff_controllers::run(ctx, &selected) => r,
        () = shutdown_signal() => Ok(()),
        _ = leading.wait_for(|l| !*l) => {
            anyhow::bail!("lost the lease {LEASE_NAMESPACE}/{LEASE_NAME}")
        }
    }
}
