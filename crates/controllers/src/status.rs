//! Status writes as upstream's controllers make them: an update of `/status` (what their roles
//! grant; none grants patch on its own kind's status), retried on a conflict with the object
//! read again, as upstream's `updateStatus` loops do.

use kube::api::{Api, PostParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Conflicts retried before the error is returned (the key is then requeued).
const CONFLICT_RETRIES: usize = 3;

/// Writes `object`'s status as `set` makes it: first over the cached copy (its
/// resourceVersion the precondition), then over a fresh read after each conflict, unless the
/// fresh copy already has that status (another write of this controller's got there first).
pub async fn update<K>(api: &Api<K>, object: &K, set: impl Fn(&mut K)) -> kube::Result<K>
where
    K: Resource + Clone + PartialEq + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = object.name_any();
    let mut next = object.clone();
    set(&mut next);
    let mut attempt = 0;
    loop {
        next.meta_mut().managed_fields = None;
        match api
            .replace_status(&name, &PostParams::default(), &next)
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < CONFLICT_RETRIES => {
                attempt += 1;
                let current = api.get(&name).await?;
                next = current.clone();
                set(&mut next);
                if next == current {
                    return Ok(current);
                }
            }
            other => return other,
        }
    }
}
