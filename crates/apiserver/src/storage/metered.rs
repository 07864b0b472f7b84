//! The store as the API server uses it, timed: each read and write's latency by operation and
//! resource in `etcd_request_duration_seconds` (upstream's name, whatever the backend), so
//! that a slow request can be told apart from a slow store.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use skiff_store::{
    CompareOp, CompareTarget, DeleteRequest, DeleteResponse, LeaseGrant, LeaseInfo, PutRequest,
    PutResponse, RangeRequest, RangeResponse, Result, Store, StoreStatus, TxnOp, TxnRequest,
    TxnResponse, WatchRequest, WatchStream,
};

use super::ROOT;
use crate::metrics::Metrics;

/// Upstream's `etcd_request_duration_seconds` buckets.
const BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    operation: &'static str,
    /// The resource, as upstream's group-resource string: `pods`, `leases.coordination.k8s.io`.
    r#type: String,
}

/// `inner`, timed into `metrics`.
pub struct Metered {
    inner: Arc<dyn Store>,
    latency: Family<Labels, Histogram>,
}

impl Metered {
    pub fn new(inner: Arc<dyn Store>, metrics: &Metrics) -> Self {
        let latency = Family::<Labels, Histogram>::new_with_constructor(
            (|| Histogram::new(BUCKETS)) as fn() -> Histogram,
        );
        metrics.register(
            "etcd_request_duration_seconds",
            "Etcd request latency in seconds for each operation and object type.",
            latency.clone(),
        );
        Metered { inner, latency }
    }

    fn observe(&self, operation: &'static str, key: &[u8], since: Instant) {
        let labels = Labels {
            operation,
            r#type: resource_of(key),
        };
        self.latency
            .get_or_create(&labels)
            .observe(since.elapsed().as_secs_f64());
    }
}

/// The group-resource a key belongs to (`/registry/core/pods/ns/p`: `pods`), or the key's first
/// segment outside the API's objects.
fn resource_of(key: &[u8]) -> String {
    let key = String::from_utf8_lossy(key);
    let Some(rest) = key.strip_prefix(ROOT) else {
        return key.split('/').find(|s| !s.is_empty()).unwrap_or("").into();
    };
    let mut segments = rest.split('/');
    match (segments.next(), segments.next()) {
        (Some("core"), Some(resource)) => resource.into(),
        (Some(group), Some(resource)) if !resource.is_empty() => format!("{resource}.{group}"),
        (first, _) => first.unwrap_or("").into(),
    }
}

/// What a transaction does, as upstream names its storage operations, and the key it is about.
fn operation_of(txn: &TxnRequest) -> (&'static str, Bytes) {
    let creates = txn
        .compare
        .iter()
        .any(|c| c.op == CompareOp::Equal && c.target == CompareTarget::CreateRevision(0));
    match txn.success.first().or(txn.failure.first()) {
        Some(TxnOp::Delete(d)) => ("delete", d.range.key.clone()),
        Some(TxnOp::Put(p)) if creates => ("create", p.key.clone()),
        Some(TxnOp::Put(p)) => ("update", p.key.clone()),
        Some(TxnOp::Range(r)) => ("get", r.range.key.clone()),
        None => (
            "txn",
            txn.compare
                .first()
                .map(|c| c.range.key.clone())
                .unwrap_or_default(),
        ),
    }
}

fn read_operation(req: &RangeRequest) -> &'static str {
    if req.range.is_single() { "get" } else { "list" }
}

#[async_trait]
impl Store for Metered {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let (since, operation, key) = (Instant::now(), read_operation(&req), req.range.key.clone());
        let r = self.inner.range(req).await;
        self.observe(operation, &key, since);
        r
    }
    async fn put(&self, req: PutRequest) -> Result<PutResponse> {
        let (since, key) = (Instant::now(), req.key.clone());
        let r = self.inner.put(req).await;
        self.observe("update", &key, since);
        r
    }
    async fn delete(&self, req: DeleteRequest) -> Result<DeleteResponse> {
        let (since, key) = (Instant::now(), req.range.key.clone());
        let r = self.inner.delete(req).await;
        self.observe("delete", &key, since);
        r
    }
    async fn txn(&self, req: TxnRequest) -> Result<TxnResponse> {
        let since = Instant::now();
        let (operation, key) = operation_of(&req);
        let r = self.inner.txn(req).await;
        self.observe(operation, &key, since);
        r
    }
    async fn watch(&self, req: WatchRequest) -> Result<WatchStream> {
        self.inner.watch(req).await
    }
    async fn compact(&self, revision: i64) -> Result<()> {
        self.inner.compact(revision).await
    }
    async fn lease_grant(&self, id: i64, ttl_secs: i64) -> Result<LeaseGrant> {
        self.inner.lease_grant(id, ttl_secs).await
    }
    async fn lease_revoke(&self, id: i64) -> Result<i64> {
        self.inner.lease_revoke(id).await
    }
    async fn lease_keep_alive(&self, id: i64) -> Result<i64> {
        self.inner.lease_keep_alive(id).await
    }
    async fn lease_time_to_live(&self, id: i64, keys: bool) -> Result<LeaseInfo> {
        self.inner.lease_time_to_live(id, keys).await
    }
    async fn lease_list(&self) -> Result<Vec<i64>> {
        self.inner.lease_list().await
    }
    async fn status(&self) -> Result<StoreStatus> {
        self.inner.status().await
    }
    async fn revision(&self) -> Result<i64> {
        self.inner.revision().await
    }
}

#[cfg(test)]
mod tests {
    use skiff_store::{Compare, EmbeddedConfig, EmbeddedStore};

    use super::*;

    #[test]
    fn keys_are_named_by_their_group_resource() {
        assert_eq!(resource_of(b"/registry/core/pods/ns/p"), "pods");
        assert_eq!(
            resource_of(b"/registry/coordination.k8s.io/leases/kube-node-lease/n1"),
            "leases.coordination.k8s.io"
        );
        assert_eq!(resource_of(b"/registry/core/nodes/"), "nodes");
        assert_eq!(resource_of(b"/skiff/ranges/services"), "skiff");
    }

    #[tokio::test]
    async fn reads_and_writes_are_timed_by_operation_and_resource() {
        let dir = tempfile::tempdir().unwrap();
        let inner: Arc<dyn Store> = Arc::new(
            EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("s")))
                .await
                .unwrap(),
        );
        let metrics = Metrics::default();
        let store = Metered::new(inner, &metrics);
        let key = "/registry/core/configmaps/ns/c";
        store
            .txn(TxnRequest {
                compare: vec![Compare::new(
                    key,
                    CompareOp::Equal,
                    CompareTarget::CreateRevision(0),
                )],
                success: vec![TxnOp::Put(PutRequest {
                    key: Bytes::from(key),
                    value: Bytes::from_static(b"{}"),
                    ..Default::default()
                })],
                failure: vec![],
            })
            .await
            .unwrap();
        store
            .range(RangeRequest {
                range: skiff_store::KeyRange::prefix("/registry/core/configmaps/"),
                ..Default::default()
            })
            .await
            .unwrap();
        let text = metrics.render(&[]);
        for (operation, count) in [("create", 1), ("list", 1)] {
            let line = format!(
                "etcd_request_duration_seconds_count{{operation=\"{operation}\",type=\"configmaps\"}} {count}"
            );
            assert!(text.contains(&line), "{line} in {text}");
        }
    }
}
