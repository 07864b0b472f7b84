//! The floor under `etcdctl check perf`: the etcd v3 gRPC facade over a store that keeps nothing,
//! optionally with one `fdatasync` per group commit and nothing else.
//!
//! Whatever a real store does costs at least this much, so if `check perf` fails against
//! `--fsync`, no durable store served by this facade can pass it on that machine. Not a store:
//! every put answers revision 1, reads find nothing, and transactions, watches and leases are
//! refused.
//!
//! ```text
//! cargo build --release -p skiff-store --example facade_floor
//! facade_floor 127.0.0.1:23790                        # the facade alone
//! facade_floor 127.0.0.1:23790 --fsync /var/tmp/floor # plus one fdatasync per group commit
//! ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:23790 check perf --load=l
//! ```
//!
//! With `--fsync`, puts queue for one thread that takes everything queued, writes as many bytes
//! as the puts' keys and values into a file filled with zeros beforehand (so, as in the store's
//! log, no write changes the file's size), `fdatasync`s it and answers the lot.

use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::sync::mpsc;

use async_trait::async_trait;
use skiff_store::{
    DeleteRequest, DeleteResponse, Error, LeaseGrant, LeaseInfo, PutRequest, PutResponse,
    RangeRequest, RangeResponse, Result, Store, StoreStatus, TxnRequest, TxnResponse, WatchRequest,
    WatchStream,
};
use tokio::sync::oneshot;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Bytes of the file the group commits cycle through.
const FILE_BYTES: u64 = 64 << 20;

/// One put waiting for its group commit: how many bytes it adds, and whom to answer.
type Waiting = (usize, oneshot::Sender<()>);

#[derive(Clone)]
struct Floor {
    /// The group-commit thread, with `--fsync`.
    commits: Option<mpsc::Sender<Waiting>>,
}

fn refused() -> Error {
    Error::Unavailable("facade_floor keeps nothing".into())
}

#[async_trait]
impl Store for Floor {
    async fn range(&self, _req: RangeRequest) -> Result<RangeResponse> {
        Ok(RangeResponse::default())
    }
    async fn put(&self, req: PutRequest) -> Result<PutResponse> {
        if let Some(commits) = &self.commits {
            let (done, committed) = oneshot::channel();
            let bytes = req.key.len() + req.value.len();
            commits.send((bytes, done)).map_err(|_| refused())?;
            committed.await.map_err(|_| refused())?;
        }
        Ok(PutResponse {
            revision: 1,
            prev_kv: None,
        })
    }
    async fn delete(&self, _req: DeleteRequest) -> Result<DeleteResponse> {
        Ok(DeleteResponse::default())
    }
    async fn txn(&self, _req: TxnRequest) -> Result<TxnResponse> {
        Err(refused())
    }
    async fn watch(&self, _req: WatchRequest) -> Result<WatchStream> {
        Err(refused())
    }
    async fn compact(&self, _revision: i64) -> Result<()> {
        Ok(())
    }
    async fn lease_grant(&self, _id: i64, _ttl_secs: i64) -> Result<LeaseGrant> {
        Err(refused())
    }
    async fn lease_revoke(&self, _id: i64) -> Result<i64> {
        Err(refused())
    }
    async fn lease_keep_alive(&self, _id: i64) -> Result<i64> {
        Err(refused())
    }
    async fn lease_time_to_live(&self, _id: i64, _keys: bool) -> Result<LeaseInfo> {
        Err(refused())
    }
    async fn lease_list(&self) -> Result<Vec<i64>> {
        Ok(Vec::new())
    }
    async fn status(&self) -> Result<StoreStatus> {
        Ok(StoreStatus {
            revision: 1,
            ..Default::default()
        })
    }
}

/// Group-commit puts from `queue` into `file` until every sender is gone.
fn commit_groups(queue: mpsc::Receiver<Waiting>, mut file: File) -> std::io::Result<()> {
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..FILE_BYTES / zeros.len() as u64 {
        file.write_all(&zeros)?;
    }
    file.sync_all()?;
    file.rewind()?;
    let (mut at, mut frame) = (0u64, Vec::new());
    while let Ok(first) = queue.recv() {
        let group: Vec<Waiting> = std::iter::once(first).chain(queue.try_iter()).collect();
        frame.clear();
        frame.resize(group.iter().map(|(bytes, _)| bytes).sum(), 1);
        if at + frame.len() as u64 > FILE_BYTES {
            at = file.seek(SeekFrom::Start(0))?;
        }
        file.write_all(&frame)?;
        file.sync_data()?;
        at += frame.len() as u64;
        for (_, done) in group {
            let _ = done.send(());
        }
    }
    Ok(())
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, fsync) = match args.as_slice() {
        [addr] => (addr.clone(), None),
        [addr, flag, path] if flag == "--fsync" => (addr.clone(), Some(path.clone())),
        _ => return Err("usage: facade_floor ADDR [--fsync FILE]".into()),
    };
    let commits = match fsync {
        Some(path) => {
            let file = File::options()
                .create(true)
                .truncate(true)
                .write(true)
                .open(&path)?;
            let (tx, rx) = mpsc::channel();
            std::thread::Builder::new()
                .name("floor-commit".into())
                .spawn(move || commit_groups(rx, file).expect("group commit failed"))?;
            Some(tx)
        }
        None => None,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr).await?;
        println!("facade_floor ready on {addr}");
        let shutdown = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        skiff_store::grpc::serve(Floor { commits }, listener, shutdown).await?;
        Ok(())
    })
}
