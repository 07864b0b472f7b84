//! `skiff image import FILE`: loads an image archive (OCI layout or `docker save` tarball) into
//! the containerd the kubelet runs, in the `k8s.io` namespace where CRI finds it.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use skiff_kubelet::containerd::ContainerdConfig;
use skiff_kubelet::images::{CtrImporter, ImageImporter};

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Import an image archive into the node's containerd.
    Import(ImportArgs),
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The archive to import.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// The kubelet's data dir, whose managed containerd receives the image.
    #[arg(long, value_name = "DIR", default_value = "/var/lib/skiff")]
    pub data_dir: PathBuf,

    /// containerd's socket, instead of the managed one under the data dir.
    #[arg(long, value_name = "SOCKET")]
    pub address: Option<PathBuf>,
}

pub async fn run(cmd: ImageCommand) -> anyhow::Result<()> {
    match cmd {
        ImageCommand::Import(args) => {
            let socket = args.address.unwrap_or_else(|| {
                ContainerdConfig {
                    dir: args.data_dir.join("containerd"),
                    ..Default::default()
                }
                .socket()
            });
            let importer = CtrImporter {
                ctr: PathBuf::from("ctr"),
                socket,
            };
            importer.import(&args.file).await?;
            println!("imported {}", args.file.display());
            Ok(())
        }
    }
}
