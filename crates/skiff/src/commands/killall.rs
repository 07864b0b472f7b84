//! `skiff killall` and `skiff uninstall` (k3s's `k3s-killall.sh` and `k3s-uninstall.sh`): pods
//! outlive `skiff server`, `skiff agent` and `skiff kubelet` by design; these stop everything a
//! node on one data dir left running on this host and remove its network state and mounts
//! ([`skiff_kubelet::cleanup`]), and `uninstall` then removes the data dir.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use skiff_kubelet::cleanup::{self, Host, SystemHost};

#[derive(Debug, Args)]
pub struct KillallArgs {
    /// The node's data dir (`skiff server`'s, whose kubelet runs in `agent/` under it, or
    /// `skiff agent`'s or `skiff kubelet`'s); only what belongs to it is touched.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/skiff")]
    pub data_dir: PathBuf,
}

/// The data dir as the node's processes and mounts name it: absolute, symlinks resolved.
fn resolve(dir: &Path) -> anyhow::Result<PathBuf> {
    match std::fs::canonicalize(dir) {
        Ok(d) => Ok(d),
        Err(_) => std::path::absolute(dir).with_context(|| format!("resolving {}", dir.display())),
    }
}

/// Tears the node down and prints what was done.
async fn kill_all(dir: &Path) -> anyhow::Result<()> {
    println!("skiff killall: {}", dir.display());
    let owned = dir.to_path_buf();
    let report = tokio::task::spawn_blocking(move || cleanup::kill_all(&SystemHost, &owned))
        .await
        .context("the clean-up task")?;
    for line in report.to_string().lines() {
        println!("  {line}");
    }
    if !report.errors.is_empty() {
        anyhow::bail!(
            "{} of the clean-up of {} failed (see above)",
            report.errors.len(),
            dir.display()
        );
    }
    Ok(())
}

pub async fn killall(args: KillallArgs) -> anyhow::Result<()> {
    kill_all(&resolve(&args.data_dir)?).await
}

/// `killall`, then the data dir removed, unless something is still mounted under it (removing
/// it would reach into whatever that is).
pub async fn uninstall(args: KillallArgs) -> anyhow::Result<()> {
    let dir = resolve(&args.data_dir)?;
    kill_all(&dir).await?;
    if let Some(m) = SystemHost
        .mounts()
        .into_iter()
        .find(|m| m.starts_with(&dir))
    {
        anyhow::bail!(
            "{} is still mounted: not removing {}",
            m.display(),
            dir.display()
        );
    }
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => println!("  removed {}", dir.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("  {} does not exist", dir.display())
        }
        Err(e) => return Err(e).with_context(|| format!("removing {}", dir.display())),
    }
    Ok(())
}
