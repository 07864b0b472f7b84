//! `skiff store serve`: the embedded store behind the etcd v3 gRPC facade, so `etcdctl` and any
//! etcd v3 client can use it.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use skiff_store::{EmbeddedConfig, EmbeddedStore, grpc};
use tokio::net::TcpListener;

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Serve the embedded store over the etcd v3 gRPC API until SIGTERM or Ctrl-C.
    Serve(ServeArgs),
    /// Check a stopped embedded store's consistency, without changing it: every record and
    /// write-ahead log batch decodes, each key's versions follow from its writes, live keys'
    /// leases exist. Prints what it found; exits 1 if anything is inconsistent.
    Check(CheckArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The store's directory: `skiff store serve`'s `--data-dir`, or `DATA_DIR/store` of
    /// `skiff server` and `skiff apiserver`.
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory holding the store's data; created if missing.
    #[arg(long, value_name = "DIR")]
    pub data_dir: PathBuf,

    /// Address to serve on, `HOST:PORT` or `http://HOST:PORT` (etcd's default client port; port
    /// 0 picks a free one, printed in the ready line).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:2379", value_parser = parse_listen)]
    pub listen: SocketAddr,

    /// Threads serving gRPC connections (each connection stays on one); default one per core.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
}

/// Run a `skiff store` subcommand.
pub async fn run(cmd: StoreCommand) -> anyhow::Result<()> {
    match cmd {
        StoreCommand::Serve(args) => serve(args).await,
        StoreCommand::Check(args) => check(args),
    }
}

fn check(args: CheckArgs) -> anyhow::Result<()> {
    let dir = args.data_dir.display().to_string();
    if !args.data_dir.join("store.redb").exists() {
        anyhow::bail!("{dir} holds no embedded store (no store.redb)");
    }
    let report = skiff_store::embedded::check::check(&args.data_dir)
        .with_context(|| format!("reading the store in {dir}"))?;
    println!(
        "revision {}, compacted at {}; {} keys ({} live), {} writes kept, {} leases, {} log batches",
        report.revision,
        report.compact_revision,
        report.keys,
        report.live_keys,
        report.records,
        report.leases,
        report.log_batches
    );
    for problem in &report.problems {
        println!("problem: {problem}");
    }
    println!("{} inconsistencies", report.problems.len());
    if !report.problems.is_empty() {
        anyhow::bail!("the store in {dir} is inconsistent");
    }
    Ok(())
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let dir = args.data_dir.display().to_string();
    let store = EmbeddedStore::open(EmbeddedConfig::new(&args.data_dir))
        .await
        .with_context(|| format!("opening the store in {dir}"))?;
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let addr = listener
        .local_addr()
        .context("reading the listener's address")?;

    // Connections queue on the bound socket from here on and are served as soon as `serve` runs.
    println!("skiff store: ready, serving etcd v3 gRPC on {addr} (data dir {dir})");
    tracing::info!(%addr, data_dir = %dir, "store serving");
    let mut config = grpc::FacadeConfig::default();
    if let Some(threads) = args.threads {
        config.threads = threads.into();
    }
    let served = grpc::serve_with_config(store.clone(), listener, config, shutdown_signal()).await;
    store.close().await;
    served.with_context(|| format!("serving the store in {dir}"))?;
    tracing::info!(%addr, "store stopped");
    Ok(())
}

/// Resolves on SIGTERM or SIGINT (Ctrl-C).
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(term) => term,
        Err(err) => {
            tracing::warn!(error = %err, "cannot listen for SIGTERM; only Ctrl-C stops the store");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupt received"),
    }
}

fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    let hostport = s.strip_prefix("http://").unwrap_or(s);
    hostport
        .parse()
        .map_err(|e| format!("{s:?} is not HOST:PORT with an IP address: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_accepts_host_port_and_an_http_url() {
        assert_eq!(
            parse_listen("127.0.0.1:2379").unwrap(),
            "127.0.0.1:2379".parse().unwrap()
        );
        assert_eq!(
            parse_listen("http://127.0.0.1:0").unwrap(),
            "127.0.0.1:0".parse().unwrap()
        );
        assert!(parse_listen("localhost:2379").is_err());
    }
}
