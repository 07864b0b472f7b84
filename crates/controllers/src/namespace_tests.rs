//! Unit tests of the namespace controller against a recording fake.

use super::*;
use kube::discovery::ApiResource;
use parking_lot::Mutex;

fn served(group: &str, plural: &str, namespaced: bool, verbs: &[&str]) -> Served {
    Served {
        resource: ApiResource {
            group: group.into(),
            version: "v1".into(),
            api_version: if group.is_empty() {
                "v1".into()
            } else {
                format!("{group}/v1")
            },
            kind: plural.into(),
            plural: plural.into(),
        },
        namespaced,
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
    }
}

const ALL: &[&str] = &["list", "watch", "delete", "deletecollection", "get"];

#[derive(Default)]
struct Recording {
    served: Vec<Served>,
    discovery_fails: bool,
    /// What `remaining` reports per plural.
    left: BTreeMap<String, Vec<Remaining>>,
    calls: Mutex<Vec<String>>,
    conditions: Mutex<Vec<Vec<NamespaceCondition>>>,
    finalized: Mutex<Vec<Vec<String>>>,
}

#[async_trait]
impl NamespaceContent for Recording {
    async fn discover(&self) -> kube::Result<Vec<Served>> {
        if self.discovery_fails {
            return Err(kube::Error::LinesCodecMaxLineLengthExceeded);
        }
        Ok(self.served.clone())
    }
    async fn delete_collection(&self, namespace: &str, resource: &Served) -> kube::Result<()> {
        let p = &resource.resource.plural;
        self.calls
            .lock()
            .push(format!("deletecollection {namespace}/{p}"));
        Ok(())
    }
    async fn delete_each(&self, namespace: &str, resource: &Served) -> kube::Result<()> {
        let p = &resource.resource.plural;
        self.calls
            .lock()
            .push(format!("delete-each {namespace}/{p}"));
        Ok(())
    }
    async fn remaining(&self, _: &str, resource: &Served) -> kube::Result<Vec<Remaining>> {
        Ok(self
            .left
            .get(&resource.resource.plural)
            .cloned()
            .unwrap_or_default())
    }
    async fn set_conditions(&self, _: &str, conditions: &[NamespaceCondition]) -> kube::Result<()> {
        self.conditions.lock().push(conditions.to_vec());
        Ok(())
    }
    async fn finalize(&self, _: &Namespace, finalizers: Vec<String>) -> kube::Result<()> {
        self.finalized.lock().push(finalizers);
        Ok(())
    }
}

fn terminating(name: &str, finalizers: &[&str]) -> Namespace {
    let mut ns = Namespace::default();
    ns.metadata.name = Some(name.into());
    ns.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
    ns.spec = Some(k8s_openapi::api::core::v1::NamespaceSpec {
        finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
    });
    ns
}

fn find<'a>(cs: &'a [NamespaceCondition], kind: &str) -> &'a NamespaceCondition {
    cs.iter().find(|c| c.type_ == kind).expect(kind)
}

#[tokio::test]
async fn an_active_namespace_is_left_alone() {
    let api = Recording::default();
    let mut ns = terminating("a", &["kubernetes"]);
    ns.metadata.deletion_timestamp = None;
    assert_eq!(
        reconcile(&ns, &api, Timestamp::UNIX_EPOCH).await.unwrap(),
        Outcome::Untouched
    );
    assert!(api.calls.lock().is_empty());
}

#[tokio::test]
async fn an_empty_terminating_namespace_loses_only_the_kubernetes_finalizer() {
    let api = Recording {
        served: vec![
            served("", "configmaps", true, ALL),
            served("", "nodes", false, ALL),
            served("example.com", "widgets", true, &["list", "delete"]),
            served("", "bindings", true, &["create"]),
        ],
        ..Default::default()
    };
    let ns = terminating("a", &["kubernetes", "example.com/other"]);
    assert_eq!(
        reconcile(&ns, &api, Timestamp::UNIX_EPOCH).await.unwrap(),
        Outcome::Finalized
    );
    assert_eq!(
        *api.calls.lock(),
        vec!["deletecollection a/configmaps", "delete-each a/widgets"],
        "only namespaced resources that can be deleted, one by one without deletecollection"
    );
    assert_eq!(*api.finalized.lock(), vec![vec!["example.com/other"]]);
    let written = api.conditions.lock()[0].clone();
    let remaining = find(&written, "NamespaceContentRemaining");
    assert_eq!(
        (remaining.status.as_str(), remaining.reason.as_deref()),
        ("False", Some("ContentRemoved"))
    );
    assert!(remaining.last_transition_time.is_some());
}

#[tokio::test]
async fn remaining_content_is_reported_and_the_finalizer_kept() {
    let mut left = BTreeMap::new();
    left.insert(
        "pods".to_string(),
        vec![
            Remaining::default(),
            Remaining {
                finalizers: vec!["example.com/hold".into()],
            },
        ],
    );
    let api = Recording {
        served: vec![
            served("", "pods", true, ALL),
            served("", "secrets", true, ALL),
        ],
        left,
        ..Default::default()
    };
    let ns = terminating("a", &["kubernetes"]);
    assert_eq!(
        reconcile(&ns, &api, Timestamp::UNIX_EPOCH).await.unwrap(),
        Outcome::ContentRemaining
    );
    assert!(api.finalized.lock().is_empty());
    let written = api.conditions.lock()[0].clone();
    let remaining = find(&written, "NamespaceContentRemaining");
    assert_eq!(remaining.reason.as_deref(), Some("SomeResourcesRemain"));
    assert_eq!(
        remaining.message.as_deref(),
        Some("Some resources are remaining: pods. has 2 resource instances")
    );
    let finalizers = find(&written, "NamespaceFinalizersRemaining");
    assert_eq!(
        finalizers.message.as_deref(),
        Some(
            "Some content in the namespace has finalizers remaining: example.com/hold in 1 resource instances"
        )
    );
}

#[tokio::test]
async fn unchanged_conditions_are_not_written_again() {
    let api = Recording {
        served: vec![served("", "pods", true, ALL)],
        left: BTreeMap::from([("pods".to_string(), vec![Remaining::default()])]),
        ..Default::default()
    };
    let mut ns = terminating("a", &["kubernetes"]);
    reconcile(&ns, &api, Timestamp::UNIX_EPOCH).await.unwrap();
    let first = api.conditions.lock()[0].clone();
    ns.status = Some(k8s_openapi::api::core::v1::NamespaceStatus {
        conditions: Some(first),
        phase: Some("Terminating".into()),
    });
    reconcile(&ns, &api, Timestamp::now()).await.unwrap();
    assert_eq!(api.conditions.lock().len(), 1);
}

#[tokio::test]
async fn a_discovery_failure_is_a_condition_and_an_error() {
    let api = Recording {
        discovery_fails: true,
        ..Default::default()
    };
    let err = reconcile(
        &terminating("a", &["kubernetes"]),
        &api,
        Timestamp::UNIX_EPOCH,
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Discovery { .. }), "{err}");
    let written = api.conditions.lock()[0].clone();
    let c = find(&written, "NamespaceDeletionDiscoveryFailure");
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("True", Some("DiscoveryFailed"))
    );
    assert!(api.finalized.lock().is_empty());
}
