//! ConfigMap writers that remember what the API server acknowledged, and watchers that
//! remember every event they were sent; after the run both are held against each other and
//! against what the store reads back.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use futures::TryStreamExt as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::watch;

/// One writer's history: `w-{i}` holds `data.v`, written 1, 2, 3, … in turn.
#[derive(Debug, Default, Clone)]
pub struct Writer {
    /// Acknowledged writes: value and the resourceVersion the answer carried.
    pub acked: Vec<(u64, i64)>,
    /// Writes whose outcome is unknown (the connection broke, or the server answered 5xx):
    /// they may or may not have happened.
    pub unknown: HashSet<u64>,
    /// Answers that were errors, by status code (0: no answer).
    pub errors: BTreeMap<u16, u64>,
}

impl Writer {
    fn record(&mut self, value: u64, outcome: Result<i64, u16>) {
        match outcome {
            Ok(rv) => self.acked.push((value, rv)),
            Err(code) => {
                *self.errors.entry(code).or_default() += 1;
                // a 4xx is an answer: the write did not happen
                if !(400..500).contains(&code) {
                    self.unknown.insert(value);
                }
            }
        }
    }
}

pub type Writers = Arc<Vec<Mutex<Writer>>>;

/// The writers' histories as they are now, while the writers go on: a read that starts after
/// this must hold every write acknowledged in it, but not the ones acknowledged meanwhile.
pub fn acknowledged_so_far(writers: &Writers) -> Writers {
    Arc::new(
        writers
            .iter()
            .map(|w| Mutex::new(w.lock().clone()))
            .collect(),
    )
}

/// Runs `count` writers in namespace `ns` until `stop` says so.
pub fn spawn_writers(
    client: &kube::Client,
    ns: &str,
    count: usize,
    stop: watch::Receiver<bool>,
) -> (Writers, Vec<tokio::task::JoinHandle<()>>) {
    let writers: Writers = Arc::new((0..count).map(|_| Mutex::default()).collect());
    let tasks = (0..count)
        .map(|i| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let (writers, mut stop) = (writers.clone(), stop.clone());
            tokio::spawn(async move {
                let name = format!("w-{i}");
                let (mut value, mut exists) = (0, false);
                loop {
                    if *stop.borrow_and_update() {
                        return;
                    }
                    value += 1;
                    let outcome = write(&api, &name, value, &mut exists).await;
                    writers[i].lock().record(value, outcome);
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(50)) => {}
                        _ = stop.changed() => {}
                    }
                }
            })
        })
        .collect();
    (writers, tasks)
}

/// Writes `value` to `name`, creating it unless it `exists` (which a 404 or 409 corrects):
/// the resourceVersion acknowledged, or the status code of the failure (0 for no answer).
async fn write(
    api: &Api<ConfigMap>,
    name: &str,
    value: u64,
    exists: &mut bool,
) -> Result<i64, u16> {
    let data = json!({"v": value.to_string()});
    let written = if *exists {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"data": data})),
        )
        .await
    } else {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name}, "data": data}))
                .expect("a ConfigMap");
        api.create(&PostParams::default(), &cm).await
    };
    match written {
        Ok(cm) => {
            *exists = true;
            Ok(resource_version(&cm.metadata))
        }
        Err(kube::Error::Api(s)) => {
            match s.code {
                404 => *exists = false,
                409 => *exists = true,
                _ => {}
            }
            Err(s.code)
        }
        Err(_) => Err(0),
    }
}

fn resource_version(meta: &kube::api::ObjectMeta) -> i64 {
    meta.resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

/// What one watcher saw.
#[derive(Debug, Default)]
pub struct Watcher {
    /// (name, resourceVersion) of every object event.
    pub seen: HashSet<(String, i64)>,
    /// The resourceVersion of its first list: what came before is not an event to it.
    pub first: i64,
    /// The last resourceVersion it reached.
    pub last: i64,
    /// Events whose resourceVersion did not follow the one before (out of order, or twice).
    pub disorder: Vec<String>,
    /// Revisions it may have missed legitimately: it got 410 Gone at `.0` and listed again at
    /// `.1`.
    pub relisted: Vec<(i64, i64)>,
    /// Watches it opened again after their connection broke.
    pub reconnects: u64,
}

pub type Watchers = Arc<Vec<Mutex<Watcher>>>;

/// Runs `count` watchers of namespace `ns`'s ConfigMaps until `stop`; each lists, then watches
/// from the list's resourceVersion, resuming from the last one it saw when a watch ends.
pub fn spawn_watchers(
    client: &kube::Client,
    ns: &str,
    count: usize,
    stop: watch::Receiver<bool>,
) -> (Watchers, Vec<tokio::task::JoinHandle<()>>) {
    let watchers: Watchers = Arc::new((0..count).map(|_| Mutex::default()).collect());
    let tasks = (0..count)
        .map(|i| {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
            let (watchers, mut stop) = (watchers.clone(), stop.clone());
            tokio::spawn(async move {
                let watching = async {
                    let mut from = list_rv(&api).await;
                    {
                        let mut w = watchers[i].lock();
                        (w.first, w.last) = (from, from);
                    }
                    loop {
                        from = match watch_from(&api, from, &watchers[i]).await {
                            Some(rv) => rv,
                            None => {
                                // 410: list again; what changed between is not seen
                                let listed = list_rv(&api).await;
                                let mut w = watchers[i].lock();
                                w.relisted.push((from, listed));
                                w.last = listed;
                                listed
                            }
                        };
                        watchers[i].lock().reconnects += 1;
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                };
                tokio::select! {
                    () = watching => {}
                    _ = stop.wait_for(|s| *s) => {}
                }
            })
        })
        .collect();
    (watchers, tasks)
}

/// The resourceVersion of a list of `api`, retried until the server answers.
async fn list_rv(api: &Api<ConfigMap>) -> i64 {
    loop {
        if let Ok(list) = api.list_metadata(&ListParams::default()).await {
            return list
                .metadata
                .resource_version
                .and_then(|rv| rv.parse().ok())
                .unwrap_or(0);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Watches from `from` until the watch ends: the resourceVersion to resume from, or `None`
/// after 410 Gone.
async fn watch_from(api: &Api<ConfigMap>, from: i64, seen: &Mutex<Watcher>) -> Option<i64> {
    let params = WatchParams::default().timeout(60);
    let Ok(stream) = api.watch(&params, &from.to_string()).await else {
        return Some(from);
    };
    futures::pin_mut!(stream);
    let mut at = from;
    while let Ok(Some(event)) = stream.try_next().await {
        let object = match event {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => o,
            WatchEvent::Bookmark(b) => {
                at = b.metadata.resource_version.parse().unwrap_or(at);
                continue;
            }
            WatchEvent::Error(e) if e.code == 410 => return None,
            WatchEvent::Error(_) => return Some(at),
        };
        let rv = resource_version(&object.metadata);
        let name = object.metadata.name.unwrap_or_default();
        let mut w = seen.lock();
        if rv <= w.last {
            let why = format!("{name} at {rv} after {}", w.last);
            w.disorder.push(why);
        }
        w.last = w.last.max(rv);
        w.seen.insert((name, rv));
        at = rv;
    }
    Some(at)
}

/// The invariants over writers and watchers, given each writer's object as read at the end
/// (`final_values`, by name): every acknowledged write is in the store or was overwritten by
/// a later write (and, once the writers have `settled`, the store holds nothing they did not
/// try), and every watcher saw every acknowledged write once, in order, or relisted over it.
pub fn violations(
    writers: &Writers,
    watchers: &Watchers,
    final_values: &HashMap<String, u64>,
    settled: bool,
) -> Vec<String> {
    let mut out = Vec::new();
    for (i, w) in writers.iter().enumerate() {
        let w = w.lock();
        let name = format!("w-{i}");
        let Some(&(last_acked, _)) = w.acked.last() else {
            continue;
        };
        match final_values.get(&name) {
            None => out.push(format!("{name}: acknowledged up to {last_acked} but gone")),
            Some(&v) if v < last_acked => out.push(format!(
                "{name}: acknowledged {last_acked} but the store has {v} (a lost write)"
            )),
            // while the writers run, the next write may be applied but not yet acknowledged
            Some(&v) if settled && v > last_acked && !w.unknown.contains(&v) => out.push(format!(
                "{name}: the store has {v}, never written (last acknowledged {last_acked})"
            )),
            Some(_) => {}
        }
        for (j, watcher) in watchers.iter().enumerate() {
            let watcher = watcher.lock();
            let missed: Vec<_> = w
                .acked
                .iter()
                .filter(|(_, rv)| *rv > watcher.first)
                .filter(|(_, rv)| !watcher.seen.contains(&(name.clone(), *rv)))
                .filter(|(_, rv)| !watcher.relisted.iter().any(|(a, b)| a < rv && rv <= b))
                .collect();
            if let Some((value, rv)) = missed.first() {
                out.push(format!(
                    "watcher {j} missed {} acknowledged writes of {name}, the first {value} at {rv}",
                    missed.len()
                ));
            }
        }
    }
    for (j, watcher) in watchers.iter().enumerate() {
        let watcher = watcher.lock();
        if let Some(first) = watcher.disorder.first() {
            out.push(format!(
                "watcher {j} got {} events out of order or twice, the first {first}",
                watcher.disorder.len()
            ));
        }
    }
    out
}
