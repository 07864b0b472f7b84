//! `serviceaccount`: every active namespace has a ServiceAccount named `default` (upstream's
//! ServiceAccountsController). It is recreated when deleted, and never created in a namespace
//! that is terminating.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};

use crate::{Context, triggers};

/// The ServiceAccount every namespace gets.
pub const DEFAULT: &str = "default";

/// The writes this controller makes.
#[async_trait]
pub trait ServiceAccounts: Send + Sync {
    /// Whether `namespace/default` exists.
    async fn default_exists(&self, namespace: &str) -> kube::Result<bool>;
    /// Creates `namespace/default`; an existing one is not an error.
    async fn create_default(&self, namespace: &str) -> kube::Result<()>;
}

/// Whether `namespace` should have a `default` ServiceAccount now.
fn wants_default(namespace: &Namespace) -> bool {
    namespace.metadata.deletion_timestamp.is_none()
        && namespace.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Terminating")
}

/// Makes sure `namespace` has its `default` ServiceAccount.
pub async fn reconcile(namespace: &Namespace, api: &dyn ServiceAccounts) -> kube::Result<()> {
    let name = namespace.name_any();
    if !wants_default(namespace) || api.default_exists(&name).await? {
        return Ok(());
    }
    api.create_default(&name).await
}

struct KubeServiceAccounts {
    /// The `default` ServiceAccounts, from the informer upstream reads them from (the
    /// controller's role grants only create).
    accounts: Cache<ServiceAccount>,
    writes: kube::Client,
}

#[async_trait]
impl ServiceAccounts for KubeServiceAccounts {
    async fn default_exists(&self, namespace: &str) -> kube::Result<bool> {
        Ok(self
            .accounts
            .get(&ObjectRef::new(DEFAULT).within(namespace))
            .is_some())
    }

    async fn create_default(&self, namespace: &str) -> kube::Result<()> {
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(DEFAULT.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.writes.clone(), namespace);
        match api.create(&PostParams::default(), &sa).await {
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            other => other.map(|_| ()),
        }
    }
}

/// Runs the controller (upstream's one worker): namespaces are the keys; a `default`
/// ServiceAccount's change (its deletion too) requeues its namespace.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let namespaces = ctx.informers.get::<Namespace>();
    let only_default = watcher::Config::default().fields(&format!("metadata.name={DEFAULT}"));
    let accounts = ctx.informers.filtered::<ServiceAccount>(only_default);
    let controller = Controller::new("serviceaccount").workers(1);
    triggers::queue_mapped_keys(&accounts, controller.queue(), triggers::namespace_key);
    accounts.cache().wait_until_ready().await;
    let api = Arc::new(KubeServiceAccounts {
        accounts: accounts.cache().clone(),
        writes: ctx.client.clone(),
    });
    triggers::run_each(controller, &namespaces, move |ns| {
        let api = api.clone();
        async move {
            reconcile(&ns, api.as_ref()).await?;
            Ok::<_, kube::Error>(Action::AwaitChange)
        }
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    #[derive(Default)]
    struct Recording {
        existing: Vec<&'static str>,
        created: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl ServiceAccounts for Recording {
        async fn default_exists(&self, namespace: &str) -> kube::Result<bool> {
            Ok(self.existing.contains(&namespace))
        }

        async fn create_default(&self, namespace: &str) -> kube::Result<()> {
            self.created.lock().push(namespace.to_string());
            Ok(())
        }
    }

    fn namespace(name: &str, phase: Option<&str>) -> Namespace {
        let mut ns = Namespace::default();
        ns.metadata.name = Some(name.into());
        ns.status = phase.map(|p| k8s_openapi::api::core::v1::NamespaceStatus {
            phase: Some(p.into()),
            ..Default::default()
        });
        ns
    }

    #[tokio::test]
    async fn creates_the_default_account_only_where_missing_and_active() {
        let api = Recording {
            existing: vec!["b"],
            ..Default::default()
        };
        reconcile(&namespace("a", Some("Active")), &api)
            .await
            .unwrap();
        reconcile(&namespace("b", None), &api).await.unwrap();
        reconcile(&namespace("c", Some("Terminating")), &api)
            .await
            .unwrap();
        let mut deleting = namespace("d", Some("Active"));
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()),
        );
        reconcile(&deleting, &api).await.unwrap();
        assert_eq!(*api.created.lock(), vec!["a"]);
    }
}
