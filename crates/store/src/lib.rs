//! Skiff's store: a key-value store with etcd v3's semantics, which the API server is the only
//! user of (seeds 000–002: "etcd is the only data store; nothing but the API server talks to it").
//!
//! # Layout
//! - [`error`]: the [`Error`] enum shared by every backend.
//! - [`types`]: requests, responses, events (etcd v3's data model).
//! - [`store`]: the [`Store`] trait and [`WatchStream`].
//! - [`embedded`]: the default backend, in-process and durable on disk (a write-ahead log, with a
//!   redb file as its checkpoint), with an in-memory MVCC index, group commit, a watch hub, leases
//!   and compaction.
//! - [`etcd`]: the etcd backend, real etcd v3 through `etcd-client`, under a key prefix.
//! - [`grpc`]: an etcd v3 gRPC facade over any [`Store`], so `etcdctl` works against Skiff.
//! - [`etcd_process`]: starts a real `etcd` on free loopback ports (tests and benchmarks).

pub mod embedded;
pub mod error;
pub mod etcd;
pub mod etcd_process;
pub mod grpc;
pub mod store;
pub mod types;

pub use embedded::{CompactionPolicy, EmbeddedConfig, EmbeddedStore};
pub use error::{Error, Result};
pub use store::{Store, StoreExt, WatchControl, WatchStream};
pub use types::*;
