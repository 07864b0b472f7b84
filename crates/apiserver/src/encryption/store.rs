//! [`EncryptedStore`]: the store as the API server sees it with encryption at rest on. Values of
//! covered resources are encrypted on every write (put, txn) and decrypted on every read
//! (range, txn ranges, previous values, watch events), so the watch cache, direct reads and
//! every write path agree without knowing about it. A value no configured key opens is handed
//! up as [`crate::storage::UNREADABLE`] and its reason, failing that one object with a 500.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use skiff_store::{
    DeleteRequest, DeleteResponse, KeyValue, LeaseGrant, LeaseInfo, PutRequest, PutResponse,
    RangeRequest, RangeResponse, Result, Store, StoreExt, StoreStatus, TxnOp, TxnOpResponse,
    TxnRequest, TxnResponse, WatchRequest, WatchStream,
};

use super::Encryption;
use crate::storage::UNREADABLE;

/// A [`Store`] that encrypts the resources an EncryptionConfiguration names.
pub struct EncryptedStore {
    inner: Arc<dyn Store>,
    encryption: Arc<Encryption>,
}

impl std::fmt::Debug for EncryptedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncryptedStore").finish_non_exhaustive()
    }
}

impl EncryptedStore {
    pub fn new(inner: Arc<dyn Store>, encryption: Encryption) -> Self {
        Self {
            inner,
            encryption: Arc::new(encryption),
        }
    }

    /// Whether the object at `key` is stored other than the way a write would store it now
    /// (plaintext, or an older provider or key): an update that changes nothing must still
    /// write it, which is how `kubectl replace` re-encrypts after a key rotation.
    pub async fn stale(&self, key: &[u8]) -> bool {
        let Some(t) = self.encryption.for_key(key) else {
            return false;
        };
        match self.inner.get(key).await {
            Ok(Some(kv)) => t.decrypt(key, &kv.value).map_or(true, |(_, stale)| stale),
            _ => false,
        }
    }

    fn seal(&self, put: &mut PutRequest) -> Result<()> {
        if let Some(t) = self.encryption.for_key(&put.key) {
            let sealed = t
                .encrypt(&put.key, &put.value)
                .map_err(|e| skiff_store::Error::InvalidArgument(e.to_string()))?;
            put.value = Bytes::from(sealed);
        }
        Ok(())
    }

    fn open(&self, kv: &mut KeyValue) {
        open_with(&self.encryption, kv);
    }

    fn open_all(&self, kvs: &mut [KeyValue]) {
        for kv in kvs {
            self.open(kv);
        }
    }
}

fn open_with(encryption: &Encryption, kv: &mut KeyValue) {
    if kv.value.is_empty() {
        return;
    }
    let Some(t) = encryption.for_key(&kv.key) else {
        return;
    };
    kv.value = match t.decrypt(&kv.key, &kv.value) {
        Ok((plain, _)) => Bytes::from(plain),
        Err(e) => {
            tracing::warn!(key = %String::from_utf8_lossy(&kv.key), error = %e, "stored value cannot be decrypted");
            Bytes::from(
                [
                    UNREADABLE,
                    format!(
                        "unable to transform key {:?}: {e}",
                        String::from_utf8_lossy(&kv.key)
                    )
                    .as_bytes(),
                ]
                .concat(),
            )
        }
    };
}

#[async_trait]
impl Store for EncryptedStore {
    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let mut resp = self.inner.range(req).await?;
        self.open_all(&mut resp.kvs);
        Ok(resp)
    }

    async fn put(&self, mut req: PutRequest) -> Result<PutResponse> {
        self.seal(&mut req)?;
        let mut resp = self.inner.put(req).await?;
        if let Some(kv) = resp.prev_kv.as_mut() {
            self.open(kv);
        }
        Ok(resp)
    }

    async fn delete(&self, req: DeleteRequest) -> Result<DeleteResponse> {
        let mut resp = self.inner.delete(req).await?;
        self.open_all(&mut resp.prev_kvs);
        Ok(resp)
    }

    async fn txn(&self, mut req: TxnRequest) -> Result<TxnResponse> {
        for op in req.success.iter_mut().chain(req.failure.iter_mut()) {
            if let TxnOp::Put(put) = op {
                self.seal(put)?;
            }
        }
        let mut resp = self.inner.txn(req).await?;
        for r in &mut resp.responses {
            match r {
                TxnOpResponse::Range(r) => self.open_all(&mut r.kvs),
                TxnOpResponse::Put(p) => {
                    if let Some(kv) = p.prev_kv.as_mut() {
                        self.open(kv);
                    }
                }
                TxnOpResponse::Delete(d) => self.open_all(&mut d.prev_kvs),
            }
        }
        Ok(resp)
    }

    async fn watch(&self, req: WatchRequest) -> Result<WatchStream> {
        let stream = self.inner.watch(req).await?;
        let control = stream.control();
        let encryption = self.encryption.clone();
        let opened = stream.map(move |batch| {
            batch.map(|mut batch| {
                for ev in &mut batch.events {
                    open_with(&encryption, &mut ev.kv);
                    if let Some(prev) = ev.prev_kv.as_mut() {
                        open_with(&encryption, prev);
                    }
                }
                batch
            })
        });
        Ok(WatchStream::new(opened, control))
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
    use super::*;
    use skiff_store::{EmbeddedConfig, EmbeddedStore, KeyRange};

    const CONFIG: &str = r#"
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - aesgcm: {keys: [{name: new, secret: "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}]}
  - identity: {}
"#;

    async fn stores(dir: &std::path::Path) -> (Arc<dyn Store>, EncryptedStore) {
        let raw: Arc<dyn Store> = Arc::new(
            EmbeddedStore::open(EmbeddedConfig::new(dir))
                .await
                .expect("store"),
        );
        let enc = EncryptedStore::new(raw.clone(), Encryption::parse(CONFIG).unwrap());
        (raw, enc)
    }

    fn put(key: &str, value: &str) -> PutRequest {
        PutRequest {
            key: Bytes::from(key.to_string()),
            value: Bytes::from(value.to_string()),
            lease: 0,
            prev_kv: false,
        }
    }

    #[tokio::test]
    async fn covered_values_are_ciphertext_in_the_store_and_plaintext_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let (raw, enc) = stores(dir.path()).await;
        let secret = "/registry/core/secrets/ns/s";
        let pod = "/registry/core/pods/ns/p";
        let mut watch = enc
            .watch(WatchRequest {
                range: KeyRange::prefix("/registry/"),
                start_revision: 0,
                prev_kv: true,
                progress_notify: false,
            })
            .await
            .unwrap();
        enc.put(put(secret, r#"{"data":"hunter2"}"#)).await.unwrap();
        enc.txn(TxnRequest {
            compare: vec![],
            success: vec![
                TxnOp::Put(put(pod, "{}")),
                TxnOp::Put(put(secret, r#"{"v":2}"#)),
            ],
            failure: vec![],
        })
        .await
        .unwrap();
        let stored = raw.get(secret.as_bytes()).await.unwrap().unwrap();
        assert!(stored.value.starts_with(b"k8s:enc:aesgcm:v1:new:"));
        assert_eq!(
            &raw.get(pod.as_bytes()).await.unwrap().unwrap().value[..],
            b"{}"
        );
        assert_eq!(
            &enc.get(secret.as_bytes()).await.unwrap().unwrap().value[..],
            br#"{"v":2}"#
        );
        let first = watch.next().await.unwrap().unwrap();
        assert_eq!(&first.events[0].kv.value[..], br#"{"data":"hunter2"}"#);
        let second = watch.next().await.unwrap().unwrap();
        let ev = second
            .events
            .iter()
            .find(|e| &e.kv.key[..] == secret.as_bytes())
            .unwrap();
        assert_eq!(&ev.kv.value[..], br#"{"v":2}"#);
        assert_eq!(
            &ev.prev_kv.as_ref().unwrap().value[..],
            br#"{"data":"hunter2"}"#
        );
        assert!(!enc.stale(secret.as_bytes()).await);
    }

    #[tokio::test]
    async fn plaintext_from_before_is_stale_and_an_unknown_key_is_unreadable_not_fatal() {
        let dir = tempfile::tempdir().unwrap();
        let (raw, enc) = stores(dir.path()).await;
        let old = "/registry/core/secrets/ns/old";
        raw.put(put(old, "{}")).await.unwrap();
        assert!(enc.stale(old.as_bytes()).await);
        let lost = "/registry/core/secrets/ns/lost";
        raw.put(put(lost, "k8s:enc:aesgcm:v1:gone:0123456789abcdef"))
            .await
            .unwrap();
        let all = enc
            .range(RangeRequest {
                range: KeyRange::prefix("/registry/core/secrets/"),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(all.kvs.len(), 2);
        let bad = all
            .kvs
            .iter()
            .find(|kv| &kv.key[..] == lost.as_bytes())
            .unwrap();
        assert!(bad.value.starts_with(UNREADABLE));
        let err = crate::storage::decode(bad).unwrap_err();
        assert_eq!(err.code, 500);
        assert!(
            err.message.contains("unable to transform key"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("/registry/core/secrets/ns/lost"),
            "{}",
            err.message
        );
    }
}
