//! The in-process test harness: an [`ApiServer`] over a temporary embedded store, served on a
//! free loopback port inside the test (API aggregation on, with the front-proxy certificate of
//! its PKI), with a kube-rs client from the admin kubeconfig.

use std::net::SocketAddr;
use std::sync::Arc;

use skiff_apiserver::aggregator;
use skiff_apiserver::authz::Mode;
use skiff_apiserver::kubelet_client::KubeletClient;
use skiff_apiserver::server::Gates;
use skiff_apiserver::{ApiServer, Config, Listener};
use skiff_store::{EmbeddedConfig, EmbeddedStore, Store};

/// Asserts that `api`'s resource is not served: a list is a 404 `Status`, and discovery does
/// not name `group`.
#[allow(dead_code)] // not every test binary removes types
pub async fn assert_unserved<K>(client: &kube::Client, api: &kube::Api<K>, group: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let err = api
        .list(&kube::api::ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 404),
        "{err:?}"
    );
    let discovery = kube::discovery::Discovery::new(client.clone())
        .run()
        .await
        .unwrap();
    assert!(!discovery.groups().any(|g| g.name() == group));
}

/// A running server: its state (to install types), a client, and what to stop.
pub struct Running {
    /// Not every test installs types by hand.
    #[allow(dead_code)]
    pub server: Arc<ApiServer>,
    pub client: kube::Client,
    stop: tokio::sync::oneshot::Sender<()>,
    store: EmbeddedStore,
    _dir: tempfile::TempDir,
}

#[allow(dead_code)] // the aggregation tests start with tuned gates
pub async fn start() -> Running {
    start_with(|_| {}).await
}

#[allow(dead_code)] // only some test binaries tune the gates
/// [`start`] with the gates `tune` changes (aggregation is on, with the listener's PKI).
pub async fn start_with(tune: impl FnOnce(&mut Gates)) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(EmbeddedConfig::new(dir.path().join("store")))
        .await
        .unwrap();
    let shared: Arc<dyn Store> = Arc::new(store.clone());
    let config = Config {
        data_dir: dir.path().to_path_buf(),
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        tls_sans: vec![],
    };
    let listener = Listener::bind(&config).await.unwrap();
    skiff_apiserver::bootstrap::run(&shared, listener.local_addr())
        .await
        .unwrap();
    let (cert, key) = listener.pki.kubelet_client().unwrap();
    let kubelet = KubeletClient::new(&cert, &key).unwrap();
    let mut gates = Gates {
        aggregation: Some(aggregator::Options {
            client_ca_pem: listener.pki.ca_cert_pem.clone(),
            front_proxy: listener.pki.front_proxy().unwrap(),
            recheck: aggregator::DEFAULT_RECHECK,
        }),
        ..Gates::default()
    };
    tune(&mut gates);
    let server = ApiServer::with_gates(
        shared,
        kubelet,
        None,
        &[Mode::AlwaysAllow],
        Default::default(),
        gates,
    )
    .await
    .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(listener.serve(server.clone(), async {
        let _ = stopped.await;
    }));
    let kubeconfig =
        kube::config::Kubeconfig::read_from(dir.path().join("kubeconfig.yaml")).unwrap();
    let client_config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(client_config).unwrap();
    Running {
        server,
        client,
        stop,
        store,
        _dir: dir,
    }
}

impl Running {
    /// A client sending `headers`, presenting the front-proxy client certificate (as an
    /// aggregator in front of this server would) when `front_proxy`, else the admin's.
    #[allow(dead_code)] // not every test binary needs it
    pub async fn client_with_headers(
        &self,
        front_proxy: bool,
        headers: &[(&'static str, &str)],
    ) -> kube::Client {
        use base64::Engine;
        let kubeconfig =
            kube::config::Kubeconfig::read_from(self._dir.path().join("kubeconfig.yaml")).unwrap();
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        if front_proxy {
            let pki = skiff_apiserver::pki::Pki::load(&self._dir.path().join("tls")).unwrap();
            let proxy = pki.front_proxy().unwrap();
            let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
            config.auth_info = serde_json::from_value(serde_json::json!({
                "client-certificate-data": b64(&proxy.client_cert_pem),
                "client-key-data": b64(&proxy.client_key_pem),
            }))
            .unwrap();
        }
        config.headers = headers
            .iter()
            .map(|(k, v)| (http::HeaderName::from_static(k), v.parse().unwrap()))
            .collect();
        kube::Client::try_from(config).unwrap()
    }

    /// A client that never retries (kube-rs retries 429, 503 and 504 by default), for tests
    /// that assert those codes.
    #[allow(dead_code)] // not every test binary needs it
    pub async fn client_without_retries(&self) -> kube::Client {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(self._dir.path().join("kubeconfig.yaml")).unwrap();
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        config.default_retry = false;
        kube::Client::try_from(config).unwrap()
    }

    /// Writes `object` (of the built-in `group`/`plural`) straight to the store, past
    /// validation and admission: for what the API rightly refuses but a test needs, such as an
    /// EndpointSlice address on loopback, where the test's own servers listen.
    #[allow(dead_code)] // not every test binary needs it
    pub async fn put_unvalidated(&self, group: &str, plural: &str, object: serde_json::Value) {
        let rt = skiff_apimachinery::catalog::builtins()
            .iter()
            .find(|r| r.group == group && r.plural == plural)
            .unwrap();
        let text = |k: &str| object["metadata"][k].as_str().unwrap_or("").to_string();
        let key = skiff_apiserver::storage::key(rt, &text("namespace"), &text("name"));
        self.store
            .put(skiff_store::PutRequest {
                key: key.into(),
                value: skiff_apiserver::storage::encode(&object),
                lease: 0,
                prev_kv: false,
            })
            .await
            .unwrap();
    }

    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.store.close().await;
    }
}

/// Sends `req` and reads the whole answer, whatever its status: code, headers, body.
#[allow(dead_code)] // not every test binary sends raw requests
pub async fn send_raw(
    client: &kube::Client,
    req: http::Request<Vec<u8>>,
) -> (u16, http::HeaderMap, bytes::Bytes) {
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    (code, headers, body)
}
