//! ResourceQuota end to end against a real `skiff apiserver`: the `resourcequota` controller
//! fills `status.used`, admission refuses creates (and a Service update adding node ports) past
//! `hard` with upstream's 403, and concurrent creates never together exceed a quota; custom
//! resources are counted (`count/widgets.example.com`), charged and given back on delete;
//! claims are charged their requested storage, in all and per storage class.

mod support;

use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, ResourceQuota, Service};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
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

fn from<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("a valid object")
}

async fn namespace(client: &kube::Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &from(json!({"metadata": {"name": name}})),
        )
        .await
        .expect("namespace");
}

fn pod(name: &str) -> Pod {
    from(json!({"metadata": {"name": name},
                "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}}))
}

fn quota(pods: &str) -> ResourceQuota {
    from(json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": pods}}}))
}

async fn used_pods(quotas: &Api<ResourceQuota>) -> Option<String> {
    let q = quotas.get("q").await.ok()?;
    Some(q.status?.used?.get("pods")?.0.clone())
}

#[test]
fn creates_past_the_quota_are_refused_and_the_controller_keeps_used() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _cm = controller_manager(&api, &["--controllers", "resourcequota"]);
        let _log = LogOnPanic(&api);
        let client = client(&api).await;
        namespace(&client, "limited").await;
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "limited");
        quotas
            .create(&PostParams::default(), &quota("2"))
            .await
            .unwrap();
        eventually("the controller to count the quota", || async {
            (used_pods(&quotas).await? == "0").then_some(())
        })
        .await;
        let hard = quotas.get("q").await.unwrap().status.unwrap().hard.unwrap();
        assert_eq!(hard["pods"].0, "2");

        let pods: Api<Pod> = Api::namespaced(client.clone(), "limited");
        let mut created = 0;
        let refusal = loop {
            match pods
                .create(&PostParams::default(), &pod(&format!("p{created}")))
                .await
            {
                Ok(_) => created += 1,
                Err(e) => break e,
            }
            assert!(created <= 2, "more pods than the quota allows");
        };
        assert_eq!(created, 2);
        let kube::Error::Api(status) = refusal else {
            panic!("not an API error: {refusal}")
        };
        assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
        assert_eq!(
            status.message,
            "pods \"p2\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        );
        assert_eq!(used_pods(&quotas).await.as_deref(), Some("2"));

        pods.delete("p0", &DeleteParams::default().grace_period(0))
            .await
            .unwrap();
        eventually("used to go down after a delete", || async {
            (used_pods(&quotas).await? == "1").then_some(())
        })
        .await;
        pods.create(&PostParams::default(), &pod("p3"))
            .await
            .expect("room again after the delete");
    });
}

#[test]
fn concurrent_creates_never_exceed_the_quota() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let client = client(&api).await;
        namespace(&client, "race").await;
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "race");
        let mut q = quotas
            .create(&PostParams::default(), &quota("3"))
            .await
            .unwrap();
        // what the controller would write; without it running nothing lowers `used` meanwhile
        q.status = Some(from(json!({"hard": {"pods": "3"}, "used": {"pods": "0"}})));
        quotas
            .replace_status("q", &PostParams::default(), &q)
            .await
            .unwrap();

        // a consistent list waits for the watch cache, which admission asks first
        assert_eq!(
            quotas.list(&Default::default()).await.unwrap().items.len(),
            1
        );
        let pods: Api<Pod> = Api::namespaced(client.clone(), "race");
        let creates = (0..10).map(|i| {
            let pods = pods.clone();
            tokio::spawn(async move {
                pods.create(&PostParams::default(), &pod(&format!("p{i}")))
                    .await
            })
        });
        let results = futures::future::join_all(creates).await;
        let mut ok = 0;
        for r in results {
            match r.unwrap() {
                Ok(_) => ok += 1,
                Err(kube::Error::Api(s)) => {
                    assert_eq!(s.code, 403, "{}", s.message);
                    assert!(s.message.contains("exceeded quota: q"), "{}", s.message);
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        assert_eq!(ok, 3);
        assert_eq!(used_pods(&quotas).await.as_deref(), Some("3"));
        let listed = pods.list(&Default::default()).await.unwrap();
        assert_eq!(listed.items.len(), 3);
    });
}

#[test]
fn an_update_that_adds_node_ports_is_charged_and_refused_past_the_quota() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _cm = controller_manager(&api, &["--controllers", "resourcequota"]);
        let _log = LogOnPanic(&api);
        let client = client(&api).await;
        namespace(&client, "ports").await;
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "ports");
        let q: ResourceQuota = from(json!({"metadata": {"name": "q"},
            "spec": {"hard": {"services.nodeports": "1"}}}));
        quotas.create(&PostParams::default(), &q).await.unwrap();
        eventually("the controller to count the quota", || async {
            let used = quotas.get("q").await.ok()?.status?.used?;
            (used.get("services.nodeports")?.0 == "0").then_some(())
        })
        .await;
        let services: Api<Service> = Api::namespaced(client.clone(), "ports");
        let svc: Service = from(json!({"metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [
                {"name": "a", "port": 80}, {"name": "b", "port": 81}]}}));
        services.create(&PostParams::default(), &svc).await.unwrap();
        let to_node_port = json!({"spec": {"type": "NodePort"}});
        let refusal = services
            .patch("web", &PatchParams::default(), &Patch::Merge(&to_node_port))
            .await
            .unwrap_err();
        let kube::Error::Api(status) = refusal else {
            panic!("not an API error: {refusal}")
        };
        assert_eq!(
            (status.code, status.message.as_str()),
            (
                403,
                "services \"web\" is forbidden: exceeded quota: q, requested: services.nodeports=2, used: services.nodeports=0, limited: services.nodeports=1"
            )
        );
        let stored = services.get("web").await.unwrap();
        assert_eq!(stored.spec.unwrap().type_.as_deref(), Some("ClusterIP"));
    });
}

#[test]
fn claims_are_charged_their_requested_storage_in_all_and_per_class() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let _cm = controller_manager(&api, &["--controllers", "resourcequota"]);
        let _log = LogOnPanic(&api);
        let client = client(&api).await;
        namespace(&client, "storage").await;
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "storage");
        let per_class = "local-path.storageclass.storage.k8s.io/requests.storage";
        let q: ResourceQuota = from(json!({"metadata": {"name": "q"},
            "spec": {"hard": {"requests.storage": "1Gi", per_class: "500Mi",
                              "persistentvolumeclaims": "2"}}}));
        quotas.create(&PostParams::default(), &q).await.unwrap();
        eventually("the controller to count the quota", || async {
            let used = quotas.get("q").await.ok()?.status?.used?;
            (used.get("requests.storage")?.0 == "0").then_some(())
        })
        .await;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "storage");
        let claim = |name: &str, class: &str, size: &str| -> PersistentVolumeClaim {
            from(json!({"metadata": {"name": name},
                "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"],
                         "resources": {"requests": {"storage": size}}}}))
        };
        let refused = |result: kube::Result<PersistentVolumeClaim>| match result {
            Err(kube::Error::Api(s)) => (s.code, s.message),
            other => panic!("not refused: {other:?}"),
        };
        let create = PostParams::default();
        claims
            .create(&create, &claim("a", "local-path", "400Mi"))
            .await
            .unwrap();
        assert_eq!(
            refused(
                claims
                    .create(&create, &claim("b", "local-path", "200Mi"))
                    .await
            ),
            (
                403,
                format!(
                    "persistentvolumeclaims \"b\" is forbidden: exceeded quota: q, requested: \
                     {per_class}=200Mi, used: {per_class}=400Mi, limited: {per_class}=500Mi"
                )
            ),
            "past the class's share"
        );
        assert_eq!(
            refused(claims.create(&create, &claim("c", "other", "700Mi")).await),
            (
                403,
                "persistentvolumeclaims \"c\" is forbidden: exceeded quota: q, requested: \
                 requests.storage=700Mi, used: requests.storage=400Mi, limited: \
                 requests.storage=1Gi"
                    .to_string()
            ),
            "past the total"
        );
        claims
            .create(&create, &claim("d", "other", "100Mi"))
            .await
            .unwrap();
        assert_eq!(
            refused(claims.create(&create, &claim("e", "other", "1Mi")).await),
            (
                403,
                "persistentvolumeclaims \"e\" is forbidden: exceeded quota: q, requested: \
                 persistentvolumeclaims=1, used: persistentvolumeclaims=2, limited: \
                 persistentvolumeclaims=2"
                    .to_string()
            ),
            "past the count"
        );
        eventually("the controller to sum the claims", || async {
            let used = quotas.get("q").await.ok()?.status?.used?;
            let get = |k: &str| used.get(k).map(|q| q.0.clone()).unwrap_or_default();
            (get("requests.storage") == "500Mi"
                && get(per_class) == "400Mi"
                && get("persistentvolumeclaims") == "2")
                .then_some(())
        })
        .await;
    });
}

#[test]
fn custom_resources_are_counted_charged_and_replenished() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        // served before the controller starts: its first discovery finds the type (one added
        // later is followed from the next discovery, 30 s on, as upstream's quota monitor)
        support::crd::install_widgets(&api);
        let _cm = controller_manager(&api, &["--controllers", "resourcequota"]);
        let _log = LogOnPanic(&api);
        let client = client(&api).await;
        namespace(&client, "widgets").await;
        let widgets: Api<kube::api::DynamicObject> =
            Api::namespaced_with(client.clone(), "widgets", &support::crd::widget_resource());
        let widget = |name: &str| -> kube::api::DynamicObject {
            from(json!({"apiVersion": "example.com/v1", "kind": "Widget",
                        "metadata": {"name": name}, "spec": {"color": "blue"}}))
        };
        widgets
            .create(&PostParams::default(), &widget("w0"))
            .await
            .unwrap();

        // the controller counts what was there before the quota
        let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "widgets");
        let q: ResourceQuota = from(json!({"metadata": {"name": "q"},
            "spec": {"hard": {"count/widgets.example.com": "2"}}}));
        quotas.create(&PostParams::default(), &q).await.unwrap();
        let used = || async {
            let used = quotas.get("q").await.ok()?.status?.used?;
            Some(used.get("count/widgets.example.com")?.0.clone())
        };
        eventually("the controller to count the widget", || async {
            (used().await? == "1").then_some(())
        })
        .await;

        // admission charges the second and refuses the third with upstream's message
        widgets
            .create(&PostParams::default(), &widget("w1"))
            .await
            .unwrap();
        let refusal = widgets
            .create(&PostParams::default(), &widget("w2"))
            .await
            .unwrap_err();
        let kube::Error::Api(status) = refusal else {
            panic!("not an API error: {refusal}")
        };
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (
                403,
                "Forbidden",
                "widgets.example.com \"w2\" is forbidden: exceeded quota: q, requested: \
                 count/widgets.example.com=1, used: count/widgets.example.com=2, limited: \
                 count/widgets.example.com=2"
            )
        );
        assert_eq!(used().await.as_deref(), Some("2"));

        // a delete is given back by the controller, as for built-in kinds, once its quota
        // monitor watches widgets (a delete before that watch starts is not seen, as with
        // upstream's monitor; on a loaded machine it can start after the steps above)
        eventually("the controller's watch of widgets", || async {
            let metrics = client
                .request_text(http::Request::get("/metrics").body(Vec::new()).unwrap())
                .await
                .ok()?;
            metrics
                .lines()
                .any(|l| {
                    l.starts_with("apiserver_longrunning_requests{")
                        && l.contains(r#"resource="widgets""#)
                        && !l.ends_with(" 0")
                })
                .then_some(())
        })
        .await;
        widgets
            .delete("w0", &DeleteParams::default())
            .await
            .unwrap();
        eventually("used to go down after a delete", || async {
            (used().await? == "1").then_some(())
        })
        .await;
        widgets
            .create(&PostParams::default(), &widget("w3"))
            .await
            .expect("room again after the delete");
    });
}
