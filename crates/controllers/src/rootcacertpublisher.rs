//! `root-ca-cert-publisher` (upstream's Publisher): every active namespace has the ConfigMap
//! `kube-root-ca.crt` whose `ca.crt` is the cluster CA bundle (`--root-ca-file`, or the
//! kubeconfig's CA), with upstream's description annotation. It is recreated when deleted and
//! restored when edited.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};

use crate::{Context, triggers};

pub const NAME: &str = "kube-root-ca.crt";
pub const KEY: &str = "ca.crt";
const DESCRIPTION_KEY: &str = "kubernetes.io/description";
const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver \
when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other \
usage is guaranteed across distributions of Kubernetes clusters.";

/// What one namespace needs.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    None,
    Create(ConfigMap),
    /// The existing ConfigMap with its data and annotation put back (an update, as upstream:
    /// its role grants no patch).
    Restore(ConfigMap),
}

/// The ConfigMap as it should be.
pub fn wanted(ca: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(NAME.into()),
            annotations: Some(BTreeMap::from([(
                DESCRIPTION_KEY.to_string(),
                DESCRIPTION.to_string(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(KEY.to_string(), ca.to_string())])),
        ..Default::default()
    }
}

/// Compares the namespace's ConfigMap with the bundle.
pub fn plan(namespace: &Namespace, existing: Option<&ConfigMap>, ca: &str) -> Change {
    let active = namespace.metadata.deletion_timestamp.is_none()
        && namespace.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating");
    if !active {
        return Change::None;
    }
    let want = wanted(ca);
    match existing {
        None => Change::Create(want),
        Some(cm) => {
            let described = cm
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(DESCRIPTION_KEY))
                .is_some_and(|d| d == DESCRIPTION);
            if cm.data == want.data && described && cm.binary_data.is_none() {
                Change::None
            } else {
                let mut restored = cm.clone();
                restored.data = want.data;
                restored.binary_data = None;
                restored
                    .metadata
                    .annotations
                    .get_or_insert_default()
                    .insert(DESCRIPTION_KEY.into(), DESCRIPTION.into());
                Change::Restore(restored)
            }
        }
    }
}

#[async_trait]
pub trait RootCaConfigMaps: Send + Sync {
    async fn get(&self, namespace: &str) -> kube::Result<Option<ConfigMap>>;
    async fn apply(&self, namespace: &str, change: Change) -> kube::Result<()>;
}

pub async fn reconcile(
    namespace: &Namespace,
    ca: &str,
    api: &dyn RootCaConfigMaps,
) -> kube::Result<()> {
    let name = namespace.name_any();
    let existing = api.get(&name).await?;
    match plan(namespace, existing.as_ref(), ca) {
        Change::None => Ok(()),
        change => api.apply(&name, change).await,
    }
}

struct KubeConfigMaps {
    /// The `kube-root-ca.crt` ConfigMaps, from the informer upstream reads them from (the
    /// controller's role grants only create and update).
    configmaps: Cache<ConfigMap>,
    writes: kube::Client,
}

#[async_trait]
impl RootCaConfigMaps for KubeConfigMaps {
    async fn get(&self, namespace: &str) -> kube::Result<Option<ConfigMap>> {
        let key = ObjectRef::new(NAME).within(namespace);
        Ok(self.configmaps.get(&key).map(|cm| cm.as_ref().clone()))
    }

    async fn apply(&self, namespace: &str, change: Change) -> kube::Result<()> {
        let api: Api<ConfigMap> = Api::namespaced(self.writes.clone(), namespace);
        let r = match change {
            Change::None => return Ok(()),
            Change::Create(cm) => api.create(&PostParams::default(), &cm).await.map(|_| ()),
            Change::Restore(cm) => api
                .replace(NAME, &PostParams::default(), &cm)
                .await
                .map(|_| ()),
        };
        match r {
            // Created meanwhile, or the namespace is going: the next event decides.
            Err(kube::Error::Api(s)) if s.code == 409 || s.code == 404 || s.code == 403 => Ok(()),
            other => other,
        }
    }
}

/// Runs the publisher (idle when there is no CA bundle to publish; upstream's one worker):
/// namespaces are the keys; a change of a namespace's `kube-root-ca.crt` (its deletion too)
/// requeues the namespace.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let Some(ca) = ctx.config.root_ca.clone() else {
        tracing::warn!("root-ca-cert-publisher: no CA bundle (--root-ca-file); idle");
        std::future::pending::<()>().await;
        return Ok(());
    };
    let ca: Arc<str> = ca.into();
    let namespaces = ctx.informers.get::<Namespace>();
    let only_ours = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
    let configmaps = ctx.informers.filtered::<ConfigMap>(only_ours);
    let controller = Controller::new("root-ca-cert-publisher").workers(1);
    triggers::queue_mapped_keys(&configmaps, controller.queue(), triggers::namespace_key);
    configmaps.cache().wait_until_ready().await;
    let api = Arc::new(KubeConfigMaps {
        configmaps: configmaps.cache().clone(),
        writes: ctx.client.clone(),
    });
    triggers::run_each(controller, &namespaces, move |ns| {
        let (api, ca) = (api.clone(), ca.clone());
        async move {
            reconcile(&ns, &ca, api.as_ref()).await?;
            Ok::<_, kube::Error>(Action::AwaitChange)
        }
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NamespaceStatus;

    fn namespace(phase: &str) -> Namespace {
        Namespace {
            metadata: ObjectMeta {
                name: Some("a".into()),
                ..Default::default()
            },
            status: Some(NamespaceStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_missing_config_map_is_created_and_an_edited_one_restored() {
        let ns = namespace("Active");
        assert_eq!(plan(&ns, None, "PEM"), Change::Create(wanted("PEM")));
        assert_eq!(plan(&ns, Some(&wanted("PEM")), "PEM"), Change::None);
        let mut edited = wanted("PEM");
        edited.data = Some(BTreeMap::from([(KEY.to_string(), "junk".to_string())]));
        assert_eq!(
            plan(&ns, Some(&edited), "PEM"),
            Change::Restore(wanted("PEM"))
        );
        let mut bare = wanted("PEM");
        bare.metadata.annotations = None;
        assert_eq!(
            plan(&ns, Some(&bare), "PEM"),
            Change::Restore(wanted("PEM"))
        );
        // the update carries what the stored object has besides (its version, labels)
        let mut labelled = edited.clone();
        labelled.metadata.resource_version = Some("7".into());
        labelled.metadata.labels = Some(BTreeMap::from([("x".into(), "y".into())]));
        let Change::Restore(restored) = plan(&ns, Some(&labelled), "PEM") else {
            panic!("restored")
        };
        assert_eq!(restored.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(restored.metadata.labels, labelled.metadata.labels);
        assert_eq!(restored.data, wanted("PEM").data);
    }

    #[test]
    fn a_terminating_namespace_gets_nothing() {
        assert_eq!(plan(&namespace("Terminating"), None, "PEM"), Change::None);
    }
}
