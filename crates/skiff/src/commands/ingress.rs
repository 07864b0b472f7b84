//! `skiff ingress`: the ingress controller of a node, an ordinary API client (seed 001): it
//! watches Ingresses, IngressClasses, Services, EndpointSlices and TLS Secrets through the API
//! server and serves the Ingresses of its class on this node's HTTP and HTTPS ports; one
//! elected instance writes their `status.loadBalancer` (see `skiff_ingress`).

use skiff_apimachinery::version::user_agent;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use skiff_ingress::config::Config;
use skiff_ingress::listen::{BIND_RETRY, Listener, Workers};
use skiff_ingress::status::{self, StatusWriter};
use skiff_ingress::{controller, tls};
use skiff_runtime::events::{self, Event, Recorder, Reporter};
use skiff_runtime::informer::Informers;
use tokio::sync::{Notify, watch};

use super::lifecycle::Lifecycle;

#[derive(Debug, Args)]
pub struct IngressArgs {
    /// Kubeconfig with the API server's address and the controller's credentials (user
    /// `system:skiff-controller`, bound to the ClusterRole `system:skiff-ingress`).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: PathBuf,

    /// This node's name: the controller's identity in its Lease and events.
    #[arg(long, value_name = "NAME")]
    pub node_name: String,

    /// The address the HTTP and HTTPS ports listen on (all of this node's by default).
    #[arg(long, value_name = "IP", default_value = "0.0.0.0")]
    pub bind_address: IpAddr,

    /// The plain HTTP port (0 picks a free one, printed in the ready line).
    #[arg(long, value_name = "PORT", default_value_t = 80)]
    pub http_port: u16,

    /// The HTTPS port (0 picks a free one, printed in the ready line).
    #[arg(long, value_name = "PORT", default_value_t = 443)]
    pub https_port: u16,
}

pub async fn run(args: IngressArgs, lifecycle: Lifecycle) -> anyhow::Result<()> {
    let client = skiff_runtime::http2::client(
        super::kube_config(&args.kubeconfig).await?,
        &user_agent("skiff-ingress"),
    )?;
    let changed = Arc::new(Notify::new());
    let nodes_changed = Arc::new(Notify::new());
    // held until this returns: dropping the factory ends the watches
    let informers = Informers::new(client.clone());
    let (caches, synced) = controller::subscribe(&informers, changed.clone());
    let nodes = status::watch_nodes(&informers, nodes_changed.clone());
    tokio::select! {
        () = synced => {}
        () = lifecycle.stopped() => return Ok(()),
    }
    let (publish, config) = watch::channel(Arc::new(Config::build(&caches.snapshot())));

    let default_cert = tls::default_certificate()?;
    let https_config = tls::server_config(tls::Resolver::new(config.clone(), default_cert));
    // a port another server holds is reported on the Node and waited for
    let node_events = Recorder::new(
        client.clone(),
        Reporter {
            controller: status::REPORTING_CONTROLLER.into(),
            instance: args.node_name.clone(),
        },
    );
    let busy = |e: &skiff_ingress::Error| {
        let note = format!(
            "{e}; the ingress controller tries again every {}s",
            BIND_RETRY.as_secs()
        );
        node_events.record(Event::warning(
            events::node_reference(&args.node_name),
            "IngressPortUnavailable",
            note,
        ));
    };
    let (http, https) = tokio::select! {
        bound = async {
            tokio::join!(
                Listener::bind_when_free(
                    SocketAddr::new(args.bind_address, args.http_port),
                    None,
                    busy,
                ),
                Listener::bind_when_free(
                    SocketAddr::new(args.bind_address, args.https_port),
                    Some(https_config),
                    busy,
                ),
            )
        } => bound,
        () = lifecycle.stopped() => return Ok(()),
    };
    let (http_addr, https_addr) = (http.local_addr(), https.local_addr());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let workers = Workers::start(config.clone(), threads)?;

    let writer = StatusWriter::new(
        client,
        caches.ingresses.clone(),
        (nodes, nodes_changed),
        config.clone(),
        &args.node_name,
    );
    let served = config.borrow().served.len();
    lifecycle.ready(format!(
        "skiff ingress ready: node {}, http {http_addr}, https {https_addr}; {served} ingresses",
        args.node_name
    ));
    tokio::select! {
        () = http.serve(workers.clone()) => anyhow::bail!("the HTTP listener stopped"),
        () = https.serve(workers) => anyhow::bail!("the HTTPS listener stopped"),
        () = controller::run(caches, changed, publish) => anyhow::bail!("the rebuild loop stopped"),
        () = writer.run_elected(&args.node_name) => anyhow::bail!("the status writer stopped"),
        () = lifecycle.stopped() => Ok(()),
    }
}
