//! `skiff bench <what>`: benchmarks that print one JSON object per result, each measured against
//! its peer in the same run where there is one.

pub mod store;

use anyhow::Result;

/// What to benchmark.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// The store: embedded in-process, embedded over gRPC, and a real etcd, all with fsync.
    Store(store::StoreBenchArgs),
}

pub async fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Store(args) => store::run(args).await,
    }
}
