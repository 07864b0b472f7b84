//! The in-process test harness: an [`ApiServer`] over a temporary embedded store, served on a
//! free loopback port inside the test, with a kube-rs client from the admin kubeconfig.

use std::net::SocketAddr;
use std::sync::Arc;

use skiff_apiserver::authz::Mode;
use skiff_apiserver::kubelet_client::KubeletClient;
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

pub async fn start() -> Running {
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
    let server = ApiServer::new(shared, kubelet, None, &[Mode::AlwaysAllow])
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
    pub async fn stop(self) {
        let _ = self.stop.send(());
        self.store.close().await;
    }
}
