//! Pods grouped by what the affinity and spreading plugins match them on: namespace, labels,
//! whether they are being deleted, and their own pod (anti-)affinity. Pods of one
//! ReplicaSet share a class, so a cycle that asks "does this selector match that pod?" for
//! every pod in the cluster (PodTopologySpread counting per domain, InterPodAffinity's
//! scoring) asks it once per class and multiplies by each node's count of the class
//! ([`NodeInfo::classes`](super::NodeInfo)), instead of comparing every pod's labels.
//!
//! Classes are interned process-wide (one table, like a string interner): equal keys get the
//! same [`PodClass`] and a small id, reused once no pod has the class any more, so a
//! [`ClassMemo`] is a dense vector.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Weak};

use k8s_openapi::api::core::v1::{Affinity, Pod};
use parking_lot::Mutex;

use super::types::{is_terminating, pod_namespace};

/// What makes two pods alike to the plugins that match pods by labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClassKey {
    namespace: String,
    labels: BTreeMap<String, String>,
    terminating: bool,
    /// The pod's `podAffinity` and `podAntiAffinity`, serialized (None without either).
    affinity: Option<String>,
}

impl ClassKey {
    fn of(pod: &Pod) -> ClassKey {
        let affinity = pod_affinity(pod).map(|a| {
            serde_json::to_string(&(&a.pod_affinity, &a.pod_anti_affinity)).unwrap_or_default()
        });
        ClassKey {
            namespace: pod_namespace(pod).to_string(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            terminating: is_terminating(pod),
            affinity,
        }
    }
}

/// The pod's affinity when it has pod affinity or anti-affinity terms of any kind.
fn pod_affinity(pod: &Pod) -> Option<&Affinity> {
    let a = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    a.filter(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
}

/// One class of pods; pods hold it through their `PodInfo`.
#[derive(Debug)]
pub struct PodClass {
    /// Dense among live classes: an index into a [`ClassMemo`].
    pub id: u32,
    /// Whether the pods have pod affinity or anti-affinity terms of any kind.
    pub has_affinity: bool,
    /// Whether the pods have required anti-affinity terms.
    pub has_required_anti_affinity: bool,
    key: ClassKey,
}

#[derive(Default)]
struct Interner {
    classes: HashMap<ClassKey, Weak<PodClass>>,
    free: Vec<u32>,
    next: u32,
}

static INTERNER: LazyLock<Mutex<Interner>> = LazyLock::new(Mutex::default);

impl PodClass {
    /// The class of `pod`, shared with every live pod alike to it.
    pub fn of(pod: &Pod) -> Arc<PodClass> {
        let key = ClassKey::of(pod);
        let mut interner = INTERNER.lock();
        if let Some(class) = interner.classes.get(&key).and_then(Weak::upgrade) {
            return class;
        }
        let id = interner.free.pop().unwrap_or_else(|| {
            interner.next += 1;
            interner.next - 1
        });
        let has_required_anti_affinity = pod_affinity(pod)
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|aa| {
                aa.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .is_some_and(|terms| !terms.is_empty());
        let class = Arc::new(PodClass {
            id,
            has_affinity: key.affinity.is_some(),
            has_required_anti_affinity,
            key: key.clone(),
        });
        interner.classes.insert(key, Arc::downgrade(&class));
        class
    }
}

impl Drop for PodClass {
    fn drop(&mut self) {
        let mut interner = INTERNER.lock();
        // a pod of the same key may have raced in and replaced the entry: remove only ours
        if interner
            .classes
            .get(&self.key)
            .is_some_and(|w| w.strong_count() == 0)
        {
            interner.classes.remove(&self.key);
        }
        interner.free.push(self.id);
    }
}

/// What one cycle worked out per class (whether a selector matches it, what it adds to a
/// score), each computed the first time a class is asked about. It grows to the largest id
/// asked about, so it needs no look at the interner.
pub struct ClassMemo<T> {
    slots: Vec<Option<T>>,
}

impl<T> Default for ClassMemo<T> {
    fn default() -> Self {
        ClassMemo { slots: Vec::new() }
    }
}

impl<T> ClassMemo<T> {
    /// The answer for the class with this id, worked out by `init` the first time.
    pub fn get_or(&mut self, id: u32, init: impl FnOnce() -> T) -> &T {
        let i = id as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i].get_or_insert_with(init)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::testing::PodBuilder;

    #[test]
    fn alike_pods_share_a_class_and_unlike_ones_do_not() {
        let a = PodBuilder::new("a").label("app", "web").info();
        let b = PodBuilder::new("b").label("app", "web").info();
        let c = PodBuilder::new("c").label("app", "db").info();
        let d = PodBuilder::new("d")
            .namespace("other")
            .label("app", "web")
            .info();
        assert!(Arc::ptr_eq(a.class(), b.class()));
        assert_ne!(a.class().id, c.class().id);
        assert_ne!(a.class().id, d.class().id);
    }

    #[test]
    fn a_class_leaves_the_table_with_its_last_pod_and_frees_its_id() {
        let pod = PodBuilder::new("x")
            .label("unique-to-this-test", "1")
            .info();
        let key = ClassKey::of(&pod.pod);
        let id = pod.class().id;
        assert!(INTERNER.lock().classes.contains_key(&key));
        drop(pod);
        let interner = INTERNER.lock();
        assert!(!interner.classes.contains_key(&key));
        assert!(
            interner.free.contains(&id)
                || interner
                    .classes
                    .values()
                    .any(|w| { w.upgrade().is_some_and(|c| c.id == id) })
        );
    }

    #[test]
    fn a_memo_computes_once_per_class() {
        let a = PodBuilder::new("a").label("app", "memo").info();
        let b = PodBuilder::new("b").label("app", "memo").info();
        let mut memo = ClassMemo::default();
        assert_eq!(*memo.get_or(a.class().id, || 7), 7);
        assert_eq!(*memo.get_or(b.class().id, || 8), 7);
    }
}
