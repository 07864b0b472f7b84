//! The lifecycle controllers of `skiff controller-manager` against a real `skiff apiserver`:
//! namespace deletion, the garbage collector's cascades, node lifecycle and taint eviction,
//! node-ipam, root-ca-cert-publisher and pod-garbage-collector, each seen through the API
//! (and kubectl where users drive it).

mod support;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use support::cluster::controller_manager;
use support::{ApiServer, Backend, eventually, kube_client as client, run};

/// Prints the controller manager's log if the test fails, for diagnosis.
struct LogOnPanic<'a>(&'a ApiServer);

impl Drop for LogOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.0.data_dir.join("controller-manager.log");
            eprintln!("--- controller-manager log ---\n{}", support::read(&log));
        }
    }
}

fn from<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

async fn create<T>(api: &Api<T>, v: Value) -> T
where
    T: kube::Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    api.create(&PostParams::default(), &from::<T>(v))
        .await
        .expect("create")
}

async fn namespace(client: &kube::Client, name: &str) -> Api<Namespace> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    create(&namespaces, json!({"metadata": {"name": name}})).await;
    namespaces
}

fn pod(name: &str) -> Value {
    json!({"metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}})
}

/// The API server's part: `namespaces/{name}/finalize` changes spec.finalizers (and nothing
/// else), and a terminating namespace without finalizers is deleted.
#[test]
fn the_finalize_subresource_lets_a_terminating_namespace_go() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let client = client(&api).await;
        let namespaces = namespace(&client, "fin").await;
        let mut ns = namespaces.get("fin").await.unwrap();
        ns.spec.as_mut().unwrap().finalizers = Some(vec!["example.com/x".into()]);
        ns.metadata.labels = None;
        let written = namespaces
            .replace_subresource("finalize", "fin", &PostParams::default(), &ns)
            .await
            .unwrap();
        assert_eq!(
            written.spec.unwrap().finalizers,
            Some(vec!["example.com/x".to_string()])
        );
        assert!(
            written
                .metadata
                .labels
                .unwrap()
                .contains_key("kubernetes.io/metadata.name")
        );
        namespaces
            .delete("fin", &DeleteParams::default())
            .await
            .unwrap();
        let mut ns = namespaces.get("fin").await.unwrap();
        ns.spec.as_mut().unwrap().finalizers = Some(vec![]);
        namespaces
            .replace_subresource("finalize", "fin", &PostParams::default(), &ns)
            .await
            .unwrap();
        assert!(namespaces.get_opt("fin").await.unwrap().is_none());
    });
}

#[test]
fn deleting_a_namespace_empties_it_and_it_goes_away() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _cm = controller_manager(&api, &["--controllers", "namespace"]);
        let _log = LogOnPanic(&api);
        let client = client(&api).await;
        let namespaces = namespace(&client, "doomed").await;
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
        let held = json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}});
        create(&configmaps, held).await;
        create(&configmaps, json!({"metadata": {"name": "plain"}})).await;
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "doomed");
        create(
            &secrets,
            json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}),
        )
        .await;
        let services: Api<Service> = Api::namespaced(client.clone(), "doomed");
        create(
            &services,
            json!({"metadata": {"name": "svc"}, "spec": {"ports": [{"port": 80}]}}),
        )
        .await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "doomed");
        create(&pods, pod("p")).await;

        namespaces
            .delete("doomed", &DeleteParams::default())
            .await
            .unwrap();
        // Everything without a finalizer goes; the held configmap keeps the namespace, and the
        // status says why.
        let message = eventually("the finalizers-remaining condition", || async {
            let ns = namespaces.get_opt("doomed").await.ok()??;
            let conditions = ns.status?.conditions?;
            let c = conditions
                .iter()
                .find(|c| c.type_ == "NamespaceFinalizersRemaining" && c.status == "True")?;
            c.message.clone()
        })
        .await;
        assert!(
            message.contains("example.com/hold in 1 resource instances"),
            "{message}"
        );
        assert!(pods.get_opt("p").await.unwrap().is_none());
        assert!(secrets.get_opt("s").await.unwrap().is_none());
        assert!(services.get_opt("svc").await.unwrap().is_none());
        assert!(configmaps.get_opt("plain").await.unwrap().is_none());
        let ns = namespaces.get("doomed").await.unwrap();
        assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));

        configmaps
            .patch(
                "held",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await
            .unwrap();
        eventually("the namespace is gone", || async {
            namespaces
                .get_opt("doomed")
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
    });
}
