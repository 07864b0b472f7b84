//! The `skiff` binary: one subcommand per component (see `commands/`).
//!
//! Exit codes: 0 success, 1 runtime failure, 2 bad usage (clap's own exit code for a command
//! line it cannot parse, and ours for [`commands::UsageError`]). Logs go to stderr, filtered by
//! `RUST_LOG` (default `info`, and `warn` for hickory's server, which logs each DNS request at
//! `info`); stdout carries only what a command prints for its user (such as
//! the `ready` line), so scripts can read it.

mod commands;
mod logging;

/// jemalloc instead of glibc's malloc: the gRPC path allocates per request on several threads,
/// where glibc's arenas showed up in profiles (malloc, arena trimming, page faults).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = commands::Cli::parse();
    match cli.command {
        // the metrics server holds a few small caches: the kubelet's small heap suits it
        commands::Command::Kubelet(_) | commands::Command::MetricsServer(_) => {
            commands::kubelet::use_small_heap()
        }
        commands::Command::Server(_) => commands::server::use_small_heap(),
        _ => {}
    }
    let _log = logging::init();
    // The workers look for I/O readiness (a new request on a connection) before every task
    // they run, not every 61st (tokio's default): under a flood of LISTs, whose tasks each run
    // for a while, a waiting request was otherwise found only after dozens of them. Measured
    // with `skiff bench api --fairness`: a polite client's p99 under the flood went from 13 ms
    // to 4.3 ms, and the flood's own rate up (BENCHMARKS.md).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .event_interval(1)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("skiff: error: starting the tokio runtime failed: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("skiff: error: {err:#}");
            if err.downcast_ref::<commands::UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
