//! Admission, the third gate: plugins that may change (mutating) or refuse (validating) a write
//! after authorization and before it is stored. Here: NamespaceLifecycle (nothing is created in a
//! missing or terminating namespace), [`priority`] (pods get their PriorityClass's value),
//! [`tolerations`] (DefaultTolerationSeconds), [`default_storage_class`] (claims naming no class
//! get the default one) and [`storage_protection`] (new volumes and claims get their protection
//! finalizers), [`resource_quota`] (creates, and updates that raise a Service's or claim's
//! usage, are charged against the namespace's ResourceQuotas, or refused) and
//! [`node_restriction`] (kubelets write only their own node and pods), [`service_account`]
//! (pods run as a service account and mount its token), [`limit_ranger`] (LimitRange defaults
//! and bounds), [`pod_security`] (the Pod Security Standards by namespace label), [`webhook`]
//! (MutatingAdmissionWebhook and ValidatingAdmissionWebhook), [`validating_policy`]
//! (ValidatingAdmissionPolicy: CEL validations bound to requests) over the CEL of
//! [`expressions`].
//! The full plugin set plugs in behind the same trait.

pub mod default_storage_class;
pub mod expressions;
pub mod limit_ranger;
pub mod node_restriction;
pub mod pod_security;
pub mod priority;
pub mod resource_quota;
pub mod service_account;
pub mod storage_protection;
pub mod tolerations;
pub mod validating_policy;
pub mod webhook;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;
use skiff_apimachinery::catalog::ResourceType;

use crate::authn::UserInfo;
use crate::error::{ApiError, Result};

/// The operation being admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

/// What a plugin sees.
#[derive(Debug)]
pub struct Attributes<'a> {
    pub operation: Operation,
    pub resource: &'a ResourceType,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub user: &'a UserInfo,
    pub old: Option<&'a Value>,
    /// `?dryRun=All`: plugins must not write anything (ResourceQuota checks but charges
    /// nothing).
    pub dry_run: bool,
    /// Where plugins leave response warnings and audit annotations.
    pub notes: Notes,
}

impl Attributes<'_> {
    /// Upstream's `admission.NewForbidden`: 403 `pods "x" is forbidden: why`.
    pub fn forbidden(&self, why: &str) -> ApiError {
        ApiError::forbidden_target(
            crate::error::Target {
                group: &self.resource.group,
                resource: &self.resource.plural,
                name: self.name,
            },
            why,
        )
    }
}

/// Audit annotations admission adds to a request's audit event (`pod-security.kubernetes.io/…`),
/// shared by the copies of one request's attributes. A plain mutex: set a few times per
/// request, never held across an await.
#[derive(Debug, Clone, Default)]
pub struct AuditAnnotations(Arc<Mutex<BTreeMap<String, String>>>);

impl AuditAnnotations {
    /// Sets `key` (the first value set wins, as upstream's `AddAnnotation` refuses to change
    /// one).
    pub fn add(&self, key: &str, value: String) {
        let mut all = self.0.lock().unwrap_or_else(|e| e.into_inner());
        all.entry(key.to_string()).or_insert(value);
    }

    pub fn all(&self) -> BTreeMap<String, String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// What admission tells beyond allow or refuse: `Warning` headers for the client, annotations
/// for the audit log, and whether a webhook's patch replaced the object.
#[derive(Debug, Clone, Default)]
pub struct Notes {
    pub warnings: crate::handlers::Warnings,
    pub audit: AuditAnnotations,
    /// Set by the mutating webhook plugin when a patch changed the object: the handler then
    /// decodes it again as upstream decodes a patched object (fields the schema does not define
    /// dropped, a custom resource's schema defaults applied). Shared by the copies of one
    /// request's attributes.
    patched: Arc<AtomicBool>,
}

impl Notes {
    /// The notes of a request whose warnings and audit annotations go to these.
    pub fn new(warnings: crate::handlers::Warnings, audit: AuditAnnotations) -> Notes {
        Notes {
            warnings,
            audit,
            patched: Arc::default(),
        }
    }

    /// Records that a webhook's patch changed the object.
    pub fn mark_patched(&self) {
        self.patched.store(true, Ordering::Relaxed);
    }

    /// Whether a webhook's patch changed the object.
    pub fn patched(&self) -> bool {
        self.patched.load(Ordering::Relaxed)
    }
}

/// One admission plugin. Mutating plugins change `object`; validating ones only refuse.
#[async_trait]
pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;
    /// Runs in the mutating phase.
    async fn mutate(&self, _attrs: &Attributes<'_>, _object: Option<&mut Value>) -> Result<()> {
        Ok(())
    }
    /// Runs in the validating phase, after defaulting and validation.
    async fn validate(&self, _attrs: &Attributes<'_>, _object: Option<&Value>) -> Result<()> {
        Ok(())
    }
}

/// Looks up namespaces for NamespaceLifecycle (the cache, falling back to the store).
#[async_trait]
pub trait NamespaceLookup: Send + Sync {
    /// The namespace's phase, `None` when it does not exist.
    async fn phase(&self, name: &str) -> Result<Option<String>>;
}

/// Refuses creates in a namespace that does not exist (404) or is terminating (403), as
/// upstream's NamespaceLifecycle; the immortal namespaces cannot be deleted.
pub struct NamespaceLifecycle<L> {
    pub lookup: L,
}

const IMMORTAL: &[&str] = &["default", "kube-system", "kube-public"];

#[async_trait]
impl<L: NamespaceLookup> Plugin for NamespaceLifecycle<L> {
    fn name(&self) -> &'static str {
        "NamespaceLifecycle"
    }

    async fn validate(&self, attrs: &Attributes<'_>, _object: Option<&Value>) -> Result<()> {
        let is_namespace = attrs.resource.group.is_empty() && attrs.resource.plural == "namespaces";
        if is_namespace {
            if attrs.operation == Operation::Delete && IMMORTAL.contains(&attrs.name) {
                return Err(ApiError::forbidden(format!(
                    "namespaces \"{}\" is forbidden: this namespace may not be deleted",
                    attrs.name
                )));
            }
            return Ok(());
        }
        if attrs.operation != Operation::Create || !attrs.resource.namespaced {
            return Ok(());
        }
        // Events may be recorded in a terminating namespace (upstream's exemption).
        let exempt_when_terminating = attrs.resource.plural == "events"
            || (attrs.resource.group.is_empty() && attrs.subresource == "eviction");
        match self.lookup.phase(attrs.namespace).await? {
            None => Err(ApiError::not_found(crate::error::Target {
                group: "",
                resource: "namespaces",
                name: attrs.namespace,
            })),
            Some(phase) if phase == "Terminating" && !exempt_when_terminating => {
                Err(ApiError::forbidden(format!(
                    "{} \"{}\" is forbidden: unable to create new content in namespace {} because it is being terminated",
                    attrs.resource.plural, attrs.name, attrs.namespace
                )))
            }
            Some(_) => Ok(()),
        }
    }
}

/// A namespace from the watch cache, or from the store when the cache does not have it yet
/// (created a moment ago): plugins that read namespace labels never miss a new namespace's.
pub async fn namespace_object(
    cache: &crate::cache::Cacher,
    store: &dyn skiff_store::Store,
    name: &str,
) -> Result<Option<Value>> {
    use skiff_store::StoreExt;
    let rt = skiff_apimachinery::catalog::lookup("", "v1", "namespaces").expect("namespaces");
    if let Some(ns) = cache.resource(rt).get(name) {
        return ns.object().map(Some);
    }
    match store
        .get(crate::storage::key(rt, "", name).as_bytes())
        .await?
    {
        Some(kv) => crate::storage::decode(&kv).map(Some),
        None => Ok(None),
    }
}

/// The plugins in order.
pub struct Chain {
    pub plugins: Vec<Box<dyn Plugin>>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<_> = self.plugins.iter().map(|p| p.name()).collect();
        f.debug_struct("Chain").field("plugins", &names).finish()
    }
}

impl Chain {
    pub async fn mutate(
        &self,
        attrs: &Attributes<'_>,
        mut object: Option<&mut Value>,
    ) -> Result<()> {
        for p in &self.plugins {
            p.mutate(attrs, object.as_deref_mut()).await?;
        }
        Ok(())
    }

    pub async fn validate(&self, attrs: &Attributes<'_>, object: Option<&Value>) -> Result<()> {
        for p in &self.plugins {
            p.validate(attrs, object).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_apimachinery::catalog::lookup;

    struct Fixed(Option<&'static str>);

    #[async_trait]
    impl NamespaceLookup for Fixed {
        async fn phase(&self, _name: &str) -> Result<Option<String>> {
            Ok(self.0.map(str::to_string))
        }
    }

    fn attrs<'a>(user: &'a UserInfo, plural: &str, op: Operation) -> Attributes<'a> {
        Attributes {
            operation: op,
            resource: lookup("", "v1", plural).unwrap(),
            subresource: "",
            namespace: "team",
            name: "x",
            user,
            old: None,
            dry_run: false,
            notes: Notes::default(),
        }
    }

    #[tokio::test]
    async fn creates_in_missing_or_terminating_namespaces_are_refused() {
        let user = UserInfo::anonymous();
        let missing = NamespaceLifecycle {
            lookup: Fixed(None),
        };
        let err = missing
            .validate(&attrs(&user, "pods", Operation::Create), None)
            .await
            .unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (404, "namespaces \"team\" not found")
        );
        let terminating = NamespaceLifecycle {
            lookup: Fixed(Some("Terminating")),
        };
        let err = terminating
            .validate(&attrs(&user, "pods", Operation::Create), None)
            .await
            .unwrap_err();
        assert_eq!(err.code, 403);
        assert!(
            terminating
                .validate(&attrs(&user, "events", Operation::Create), None)
                .await
                .is_ok()
        );
        let active = NamespaceLifecycle {
            lookup: Fixed(Some("Active")),
        };
        assert!(
            active
                .validate(&attrs(&user, "pods", Operation::Create), None)
                .await
                .is_ok()
        );
    }
}
