//! `watched`: reflector stores of the kinds a controller reads, each also a stream of the objects
//! it changed *after* the store applied the change, so a key queued from it is reconciled against
//! a store that already shows that change (kube-runtime's `Controller::owns` watches separately
//! from any store the reconcile reads, so it cannot promise that). Controllers feed these streams
//! to kube-runtime's [`applier`], which still never hands one key to two workers.

use std::convert::Infallible;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::runtime::controller::{self, Action, ReconcileRequest, applier};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// A store kept up to date by a watch, and the objects it changed (added, modified or deleted),
/// each yielded once the store shows it.
pub struct Watched<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    pub store: Store<K>,
    pub changes: BoxStream<'static, K>,
}

/// Starts watching `api` (retrying with kube-runtime's default backoff) into a store.
pub fn watch<K>(api: Api<K>, config: watcher::Config) -> Watched<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let changes = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .touched_objects()
        .filter_map(|r| async move {
            r.inspect_err(|error| tracing::debug!(%error, "watch error; retrying"))
                .ok()
        })
        .boxed();
    Watched { store, changes }
}

/// Requests for the applier, from any number of key streams.
pub fn requests<K: Resource<DynamicType = ()> + 'static>(
    keys: Vec<BoxStream<'static, ObjectRef<K>>>,
) -> impl Stream<Item = Result<ReconcileRequest<K>, Infallible>> + Send + 'static {
    futures::stream::select_all(keys).map(|key| Ok(ReconcileRequest::from(key)))
}

/// Runs `reconcile` over the objects of `store` as `keys` name them, until the streams end.
pub async fn run<K, Ctx, Fut, E>(
    store: Store<K>,
    keys: Vec<BoxStream<'static, ObjectRef<K>>>,
    context: Arc<Ctx>,
    mut reconcile: impl FnMut(Arc<K>, Arc<Ctx>) -> Fut,
    error_policy: impl Fn(Arc<K>, &E, Arc<Ctx>) -> Action,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    Fut: Future<Output = Result<Action, E>>,
    E: std::error::Error + 'static,
{
    applier(
        move |obj, ctx| Box::pin(reconcile(obj, ctx)),
        error_policy,
        context,
        store,
        requests(keys),
        controller::Config::default(),
    )
    .for_each(|result| async move {
        if let Err(error) = result {
            // an object deleted while queued is not an error worth more than a debug line
            tracing::debug!(%error, "reconcile request not run");
        }
    })
    .await;
}

/// The key of the object of `kind` that controls the object with this metadata (in its
/// namespace), if any.
pub fn controller_key<K>(meta: &kube::api::ObjectMeta, kind: &str) -> Option<ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()>,
{
    let owner = controller_of(meta, kind)?;
    Some(ObjectRef::new(&owner.name).within(meta.namespace.as_deref()?))
}

/// The owner reference of `kind` marked as the controller, if any.
pub fn controller_of<'a>(
    meta: &'a kube::api::ObjectMeta,
    kind: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == kind)
}
