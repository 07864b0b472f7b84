//! `resourcequota` (upstream's ResourceQuotaController): every ResourceQuota's `status.hard`
//! is its `spec.hard` and `status.used` what its namespace uses now of each of those resources
//! (object counts, compute resources of pods that are not terminal, claimed storage), counting
//! only the pods its scopes (`Terminating`, `NotTerminating`, `BestEffort`, `NotBestEffort`,
//! `scopeSelector` on `PriorityClass`) match; usage is [`skiff_apimachinery::quota`]'s, the
//! same the API server's admission charges. As upstream, a quota is recomputed when first seen,
//! when its `spec.hard` changes, when an object it counts is deleted or stops counting, and
//! every five minutes (`--resource-quota-sync-period`), but not on creates, which admission has
//! already charged (a recount from a cache that lags them would undo the charge and let the
//! next create through); its status is written only when it changed. Deletes of the kinds not
//! watched here with a cache (custom resources among them) reach it as upstream's quota monitor
//! sees them: every quotable resource discovery finds (again every 30 s, so that types added
//! later are followed) is followed through its shared informer (the metadata informer the
//! garbage collector follows too, for a kind no controller reads typed).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolumeClaim, Pod, ReplicationController, ResourceQuota,
    ResourceQuotaStatus, Secret, Service,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{DynamicObject, ListParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde::Serialize;
use serde_json::Value;
use skiff_apimachinery::quota::{self, ResourceList};
use skiff_runtime::cache::Cache;
use skiff_runtime::controller::{Action, Controller};
use skiff_runtime::informer::{Change, Informers};
use skiff_runtime::workqueue::WorkQueue;

use crate::{Context, resources};

/// Upstream's `--resource-quota-sync-period` default: every quota is recomputed this often.
pub const SYNC_PERIOD: Duration = Duration::from_secs(300);

/// The kinds watched (and so counted from a cache, and recounted as soon as they change);
/// other kinds named by `count/<resource>` are listed when a quota is synced.
const WATCHED: &[&str] = &[
    "pods",
    "services",
    "configmaps",
    "secrets",
    "persistentvolumeclaims",
    "replicationcontrollers",
    "resourcequotas",
];

/// How often discovery runs again to follow resources added since (upstream's 30 s quota
/// monitor resync).
const REDISCOVERY: Duration = Duration::from_secs(30);

/// The reads and writes this controller makes.
#[async_trait]
pub trait Quotas: Send + Sync {
    /// Every object of `group/plural` in `namespace`, as JSON; empty for a kind not served.
    async fn list(&self, namespace: &str, group: &str, plural: &str) -> kube::Result<Vec<Value>>;
    async fn update_status(&self, quota: &ResourceQuota) -> kube::Result<()>;
}

/// The kinds whose objects `hard` asks to be counted, as `(group, plural)`.
fn counted_kinds(hard: &ResourceList) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for name in hard.keys() {
        if let Some((group, plural)) = quota::parse_count_name(name) {
            out.insert((group.to_string(), plural.to_string()));
        }
        for plural in WATCHED {
            if quota::charges("", plural, name) {
                out.insert((String::new(), plural.to_string()));
            }
        }
    }
    out
}

fn to_quantities(list: &ResourceList) -> std::collections::BTreeMap<String, Quantity> {
    list.iter()
        .map(|(k, v)| (k.clone(), Quantity(v.to_string())))
        .collect()
}

fn from_quantities(list: Option<&std::collections::BTreeMap<String, Quantity>>) -> ResourceList {
    list.into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), quota::Amount::parse(&v.0)?)))
        .collect()
}

/// The status `quota` should have at `now`, and when to look again because a terminating pod
/// it counts will pass its grace period.
pub async fn status_for(
    rq: &ResourceQuota,
    now: Timestamp,
    api: &dyn Quotas,
) -> kube::Result<(ResourceQuotaStatus, Option<Duration>)> {
    let q = serde_json::to_value(rq).unwrap_or(Value::Null);
    let hard = quota::parse_list(q.pointer("/spec/hard"));
    let names: BTreeSet<String> = hard.keys().cloned().collect();
    let namespace = rq.namespace().unwrap_or_default();
    // every limited resource has a used value, if only 0
    let mut used: ResourceList = names
        .iter()
        .map(|n| (n.clone(), quota::Amount::default()))
        .collect();
    let mut recheck: Option<Timestamp> = None;
    for (group, plural) in counted_kinds(&hard) {
        for obj in api.list(&namespace, &group, &plural).await? {
            if !quota::matches(&q, &hard, &group, &plural, &obj) {
                continue;
            }
            let usage = quota::usage(&group, &plural, &obj, now);
            used = quota::add(&used, &quota::mask(&usage, &names));
            let deadline = obj
                .pointer("/metadata/deletionTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| t.parse::<Timestamp>().ok());
            if let Some(at) = deadline.filter(|at| *at >= now && usage.contains_key("pods")) {
                recheck = Some(recheck.map_or(at, |r| r.min(at)));
            }
        }
    }
    let status = ResourceQuotaStatus {
        hard: Some(to_quantities(&hard)),
        used: Some(to_quantities(&used)),
    };
    let recheck = recheck.map(|at| {
        Duration::try_from(at.duration_since(now)).unwrap_or_default() + Duration::from_secs(1)
    });
    Ok((status, recheck))
}

/// Syncs one quota: writes its status if it changed (compared as quantities, so `1` and
/// `1000m` are the same); returns when to sync it again.
pub async fn reconcile(
    rq: &ResourceQuota,
    now: Timestamp,
    api: &dyn Quotas,
) -> kube::Result<Duration> {
    let (status, recheck) = status_for(rq, now, api).await?;
    let old = rq.status.clone().unwrap_or_default();
    let unchanged = old.hard.is_some()
        && old.used.is_some()
        && quota::equals(
            &from_quantities(old.hard.as_ref()),
            &from_quantities(status.hard.as_ref()),
        )
        && quota::equals(
            &from_quantities(old.used.as_ref()),
            &from_quantities(status.used.as_ref()),
        );
    if !unchanged {
        let mut next = rq.clone();
        next.status = Some(status);
        api.update_status(&next).await?;
    }
    Ok(recheck.map_or(SYNC_PERIOD, |r| r.min(SYNC_PERIOD)))
}

/// Whether a quota's status lags its spec: `status.hard` differs from `spec.hard`, or a limit
/// has no `status.used` yet (upstream's `addQuota` priorities).
fn needs_sync(q: &ResourceQuota, hard: &ResourceList) -> bool {
    let status = q.status.clone().unwrap_or_default();
    !quota::equals(&from_quantities(status.hard.as_ref()), hard)
        || hard
            .keys()
            .any(|k| !status.used.as_ref().is_some_and(|u| u.contains_key(k)))
}

/// A watched kind's cache: its objects of one namespace, as JSON, once it has listed them.
#[async_trait]
trait Snapshot: Send + Sync {
    async fn objects(&self, namespace: &str) -> Vec<Value>;
}

#[async_trait]
impl<K> Snapshot for Cache<K>
where
    K: kube::Resource<DynamicType = ()> + Serialize + Send + Sync + 'static,
{
    async fn objects(&self, namespace: &str) -> Vec<Value> {
        // never count from a cache that has not listed yet (a quota would drop to 0)
        self.wait_until_ready().await;
        self.namespaced(namespace)
            .iter()
            .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
            .collect()
    }
}

struct KubeQuotas {
    client: kube::Client,
    /// The watched kinds by plural (all in the core group).
    stores: Vec<(&'static str, Arc<dyn Snapshot>)>,
}

#[async_trait]
impl Quotas for KubeQuotas {
    async fn list(&self, namespace: &str, group: &str, plural: &str) -> kube::Result<Vec<Value>> {
        if group.is_empty()
            && let Some((_, snap)) = self.stores.iter().find(|(p, _)| *p == plural)
        {
            return Ok(snap.objects(namespace).await);
        }
        let served = resources::discover(&self.client, false).await?;
        let Some(kind) = served
            .into_iter()
            .find(|s| s.resource.group == group && s.resource.plural == plural && s.namespaced)
        else {
            return Ok(Vec::new());
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), namespace, &kind.resource);
        let list = api.list(&ListParams::default()).await?;
        Ok(list
            .items
            .iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .collect())
    }

    async fn update_status(&self, quota: &ResourceQuota) -> kube::Result<()> {
        let api: Api<ResourceQuota> =
            Api::namespaced(self.client.clone(), &quota.namespace().unwrap_or_default());
        api.replace_status(&quota.name_any(), &PostParams::default(), quota)
            .await
            .map(|_| ())
    }
}

/// Whether a counted object's change can lower what quotas count (upstream's replenishment:
/// only deletes, pods that stop counting, services changing type and claims changing size;
/// creates are charged by admission, and a recount racing them could undo a charge).
pub fn replenishes(plural: &str, old: &Value, new: &Value, now: Timestamp) -> bool {
    match plural {
        "pods" => quota::counts_compute(old, now) && !quota::counts_compute(new, now),
        "services" => old.pointer("/spec/type") != new.pointer("/spec/type"),
        "persistentvolumeclaims" => {
            old.pointer("/spec/resources/requests/storage")
                != new.pointer("/spec/resources/requests/storage")
        }
        _ => false,
    }
}

type Queue = WorkQueue<ObjectRef<ResourceQuota>>;

/// Queues every quota of `namespace`.
fn queue_namespace(queue: &Queue, quotas: &Cache<ResourceQuota>, namespace: Option<&str>) {
    for q in quotas.namespaced(namespace.unwrap_or_default()) {
        queue.add(ObjectRef::from_obj(q.as_ref()));
    }
}

/// Follows `K` cluster-wide through the shared informers: its cache as a [`Snapshot`], and the
/// quotas of the namespace of each object deleted or changed so that it may count less
/// ([`replenishes`]) queued.
fn watch_kind<K>(
    ctx: &Context,
    plural: &'static str,
    quotas: &Cache<ResourceQuota>,
    queue: &Queue,
) -> Arc<dyn Snapshot>
where
    K: skiff_runtime::informer::Kind + Serialize,
{
    let informer = ctx.informers.get::<K>();
    informer.add_handler({
        let (quotas, queue) = (quotas.clone(), queue.clone());
        move |change| {
            let namespace = match change {
                Change::Added(_) => return,
                Change::Deleted { last, .. } => last.meta().namespace.as_deref(),
                Change::Updated { old, new } => {
                    let json = |o: &K| serde_json::to_value(o).unwrap_or(Value::Null);
                    if !replenishes(plural, &json(old), &json(new), Timestamp::now()) {
                        return;
                    }
                    new.meta().namespace.as_deref()
                }
            };
            queue_namespace(&queue, &quotas, namespace);
        }
    });
    Arc::new(informer.cache().clone())
}

/// Whether deletes of `s` replenish quotas through a metadata watch (upstream's quotable
/// resources: namespaced, created, listed, watched and deleted, not events), leaving out the
/// kinds watched with a cache.
fn monitored(s: &resources::Served) -> bool {
    s.namespaced
        && ["create", "list", "watch", "delete"]
            .iter()
            .all(|v| s.supports(v))
        && !s.is_event()
        && !(s.resource.group.is_empty() && WATCHED.contains(&s.resource.plural.as_str()))
}

/// Upstream's quota monitor for every other resource: discovers them (every [`REDISCOVERY`])
/// and follows each one through its shared informer while it is served ([`resources::Monitors`]);
/// each object deleted queues the quotas of its namespace.
async fn monitor_discovered(
    informers: Informers,
    client: kube::Client,
    quotas: Cache<ResourceQuota>,
    queue: Queue,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<resources::MetaEvent>();
    tokio::spawn(async move {
        while let Some((_, event)) = rx.recv().await {
            if let watcher::Event::Delete(m) = event {
                queue_namespace(&queue, &quotas, m.metadata.namespace.as_deref());
            }
        }
    });
    let mut monitors = resources::Monitors::new(informers, tx);
    loop {
        match resources::discover(&client, false).await {
            Ok(served) => monitors.sync(served.into_iter().filter(monitored)),
            Err(error) => tracing::warn!(%error, "resourcequota: discovery failed"),
        }
        tokio::time::sleep(REDISCOVERY).await;
    }
}

/// The quota handler, as upstream's: a quota is queued when first seen (and the others of its
/// namespace, which count it), when its spec.hard changes, or when its status does not yet
/// show every limit and its usage; not for admission's charges, which a recount racing
/// creates could undo.
fn quota_handler(
    quotas: Cache<ResourceQuota>,
    queue: Queue,
) -> impl FnMut(&Change<ResourceQuota>) + Send + 'static {
    let mut seen: HashMap<ObjectRef<ResourceQuota>, ResourceList> = HashMap::new();
    move |change| {
        let q = match change {
            Change::Added(q) | Change::Updated { new: q, .. } => q,
            Change::Deleted { last, .. } => {
                seen.remove(&ObjectRef::from_obj(last.as_ref()));
                return;
            }
        };
        let own = ObjectRef::from_obj(q.as_ref());
        let hard = from_quantities(q.spec.as_ref().and_then(|s| s.hard.as_ref()));
        if seen.insert(own.clone(), hard.clone()).is_none() {
            queue_namespace(&queue, &quotas, q.namespace().as_deref());
        } else if needs_sync(q, &hard) {
            queue.add(own);
        }
    }
}

/// Runs the controller: quotas are the keys; a change to a counted object queues the quotas
/// of its namespace.
pub async fn run(ctx: Arc<Context>) -> Result<(), crate::Error> {
    let controller = Controller::new("resourcequota");
    let queue = controller.queue().clone();
    let quotas = ctx.informers.get::<ResourceQuota>();
    let qs = quotas.cache().clone();
    quotas.add_handler(quota_handler(qs.clone(), queue.clone()));
    let mut stores: Vec<(&'static str, Arc<dyn Snapshot>)> = Vec::new();
    macro_rules! watch {
        ($plural:literal, $kind:ty) => {
            stores.push(($plural, watch_kind::<$kind>(&ctx, $plural, &qs, &queue)))
        };
    }
    watch!("pods", Pod);
    watch!("services", Service);
    watch!("configmaps", ConfigMap);
    watch!("secrets", Secret);
    watch!("persistentvolumeclaims", PersistentVolumeClaim);
    watch!("replicationcontrollers", ReplicationController);
    stores.push(("resourcequotas", Arc::new(qs.clone())));
    debug_assert_eq!(stores.len(), WATCHED.len());
    tokio::spawn(monitor_discovered(
        ctx.informers.clone(),
        ctx.informer_client.clone(),
        qs.clone(),
        queue,
    ));
    qs.wait_until_ready().await;
    tracing::info!("resourcequota: caches synced");
    let api = Arc::new(KubeQuotas {
        client: ctx.client.clone(),
        stores,
    });
    controller
        .run(move |key| {
            let api = api.clone();
            let rq = qs.get(&key);
            async move {
                let Some(rq) = rq else {
                    return Ok(Action::AwaitChange);
                };
                let after = reconcile(&rq, Timestamp::now(), api.as_ref()).await?;
                Ok::<_, kube::Error>(Action::RequeueAfter(after))
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
#[path = "resourcequota_tests.rs"]
mod tests;
