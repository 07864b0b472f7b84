//! A hollow node's Summary: synthetic figures for the pods its hollow runtime runs, so that the
//! metrics pipeline (metrics-server, `kubectl top`, the HPA) can be exercised at the scale only
//! hollow nodes reach (kubemark's hollow kubelet reports a fake cAdvisor's figures the same way).
//!
//! A running container uses, every second of its life, a steady:
//! - CPU: the pod's [`ANN_CPU_USAGE`] annotation (a quantity per container, `250m`), else a tenth
//!   of the container's CPU request, else [`DEFAULT_CPU_MILLIS`];
//! - memory (working set): the pod's [`ANN_MEMORY_USAGE`] annotation, else half the container's
//!   memory request, else [`DEFAULT_MEMORY_BYTES`].
//!
//! The annotations are read from the pod as the node's watch last delivered it, so annotating a
//! running pod changes what it reports from the next look on; a test drives an HPA with them.
//! The cumulative CPU time integrates the usage read at each look over the time since the look
//! before ([`Counters`]), so it never goes back and a rate taken between two looks (what
//! metrics-server takes) is the usage of the later one. The node reports its pods' sum plus a
//! fixed system share.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use parking_lot::Mutex;
use skiff_apimachinery::quantity::Quantity;

use super::{
    ContainerStats, CpuStats, Error, MemoryStats, NodeStats, PodReference, PodStats, Summary,
    SummaryProvider, running_by_pod, sum_cpu, sum_memory,
};
use crate::cri::ContainerRuntime;
use crate::server::pods::PodRegistry;

/// A pod annotation: the CPU each of its containers uses (a quantity).
pub const ANN_CPU_USAGE: &str = "hollow.skiff.io/cpu-usage";
/// A pod annotation: the memory each of its containers uses (a quantity).
pub const ANN_MEMORY_USAGE: &str = "hollow.skiff.io/memory-usage";
/// What a container without an annotation or a CPU request uses.
pub const DEFAULT_CPU_MILLIS: u64 = 5;
/// What a container without an annotation or a memory request uses.
pub const DEFAULT_MEMORY_BYTES: u64 = 8 << 20;
/// What the node uses besides its pods.
const SYSTEM_CPU_MILLIS: u64 = 50;
const SYSTEM_MEMORY_BYTES: u64 = 256 << 20;
/// The node's key among the CPU counters (container ids are hex).
const NODE_KEY: &str = "node";

/// One hollow node's [`SummaryProvider`].
pub struct HollowSummary {
    node_name: String,
    runtime: Arc<dyn ContainerRuntime>,
    pods: PodRegistry,
    /// The node's memory, for `availableBytes`.
    memory_capacity: u64,
    started: Timestamp,
    counters: Counters,
}

/// Cumulative CPU time per key (a container id, `node`): when it was last read and its value.
#[derive(Default)]
struct Counters {
    last: Mutex<HashMap<String, (Timestamp, u64)>>,
}

impl Counters {
    /// CPU figures of `millis` used since the last look at `key` (since `start` at the first),
    /// added to what was used before.
    fn cpu(&self, key: &str, time: &Time, millis: u64, start: Timestamp) -> CpuStats {
        let nano_cores = millis * 1_000_000;
        let mut last = self.last.lock();
        let (since, before) = last.get(key).copied().unwrap_or((start, 0));
        let elapsed = u128::try_from(time.0.duration_since(since).as_nanos()).unwrap_or(0);
        let used = u64::try_from(u128::from(nano_cores) * elapsed / 1_000_000_000).unwrap_or(0);
        let total = before.saturating_add(used);
        last.insert(key.to_string(), (time.0, total));
        CpuStats {
            time: time.clone(),
            usage_nano_cores: Some(nano_cores),
            usage_core_nano_seconds: Some(total),
        }
    }

    /// Forgets the keys not in `alive` (containers gone).
    fn retain(&self, alive: &HashSet<String>) {
        self.last.lock().retain(|k, _| alive.contains(k));
    }
}

impl HollowSummary {
    pub fn new(
        node_name: &str,
        runtime: Arc<dyn ContainerRuntime>,
        pods: PodRegistry,
        memory_capacity: u64,
    ) -> HollowSummary {
        HollowSummary {
            node_name: node_name.into(),
            runtime,
            pods,
            memory_capacity,
            started: Timestamp::now(),
            counters: Counters::default(),
        }
    }
}

/// A quantity annotation of the pod, or a request of the container, in `unit`s (milli-units for
/// CPU, units for memory); `fraction` of the request.
fn usage(
    pod: &Pod,
    container: Option<&Container>,
    annotation: &str,
    resource: &str,
    value: fn(&Quantity) -> i64,
    fraction: u64,
) -> Option<u64> {
    let annotated = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotation))
        .and_then(|q| Quantity::parse(q).ok());
    if let Some(q) = annotated {
        return u64::try_from(value(&q)).ok();
    }
    let request = container?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get(resource)?;
    let q = Quantity::parse(&request.0).ok()?;
    u64::try_from(value(&q)).ok().map(|v| v / fraction)
}

fn memory(time: &Time, bytes: u64, available: Option<u64>) -> MemoryStats {
    MemoryStats {
        time: time.clone(),
        available_bytes: available,
        usage_bytes: Some(bytes),
        working_set_bytes: Some(bytes),
        rss_bytes: Some(bytes),
        page_faults: Some(0),
        major_page_faults: Some(0),
    }
}

impl HollowSummary {
    fn container(
        &self,
        time: &Time,
        pod: &Pod,
        name: &str,
        container: &k8s_cri::v1::Container,
    ) -> ContainerStats {
        let spec = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == name));
        let cpu = usage(pod, spec, ANN_CPU_USAGE, "cpu", Quantity::milli_value, 10)
            .unwrap_or(DEFAULT_CPU_MILLIS);
        let bytes = usage(pod, spec, ANN_MEMORY_USAGE, "memory", Quantity::value, 2)
            .unwrap_or(DEFAULT_MEMORY_BYTES);
        let start =
            Timestamp::from_nanosecond(i128::from(container.created_at)).unwrap_or(self.started);
        ContainerStats {
            name: name.into(),
            start_time: Time(start),
            cpu: Some(self.counters.cpu(&container.id, time, cpu, start)),
            memory: Some(memory(time, bytes, None)),
            rootfs: None,
            logs: None,
        }
    }
}

#[async_trait]
impl SummaryProvider for HollowSummary {
    async fn summary(&self, _cpu_and_memory_only: bool) -> Result<Summary, Error> {
        let time = Time(Timestamp::now());
        let containers = self.runtime.list_containers(Default::default()).await?;
        let running = running_by_pod(&containers);
        let mut pods = Vec::new();
        let mut alive = HashSet::from([NODE_KEY.to_string()]);
        for pod in self.pods.list() {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let Some(of_pod) = running.get(uid.as_str()) else {
                continue;
            };
            let mut containers: Vec<ContainerStats> = of_pod
                .iter()
                .map(|(name, c)| {
                    alive.insert(c.id.clone());
                    self.container(&time, &pod, name, c)
                })
                .collect();
            containers.sort_by(|a, b| a.name.cmp(&b.name));
            pods.push(PodStats {
                pod_ref: PodReference {
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    namespace: pod.metadata.namespace.clone().unwrap_or_default(),
                    uid,
                },
                start_time: pod
                    .status
                    .as_ref()
                    .and_then(|s| s.start_time.clone())
                    .unwrap_or_else(|| time.clone()),
                cpu: sum_cpu(&time, &containers),
                memory: sum_memory(&time, &containers),
                containers,
                network: None,
                volume_stats: Vec::new(),
                ephemeral_storage: None,
                process_stats: None,
            });
        }
        let total = |f: fn(&PodStats) -> Option<u64>| pods.iter().filter_map(f).sum::<u64>();
        let cpu_millis =
            SYSTEM_CPU_MILLIS + total(|p| p.cpu.as_ref()?.usage_nano_cores) / 1_000_000;
        let bytes = SYSTEM_MEMORY_BYTES + total(|p| p.memory.as_ref()?.working_set_bytes);
        let node = NodeStats {
            node_name: self.node_name.clone(),
            system_containers: Vec::new(),
            start_time: Time(self.started),
            cpu: Some(self.counters.cpu(NODE_KEY, &time, cpu_millis, self.started)),
            memory: Some(memory(
                &time,
                bytes,
                Some(self.memory_capacity.saturating_sub(bytes)),
            )),
            network: None,
            fs: None,
            runtime: None,
            rlimit: None,
        };
        self.counters.retain(&alive);
        Ok(Summary { node, pods })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{container_config, sandbox_config};
    use crate::fake::FakeRuntime;

    fn pod(name: &str, cpu_usage: Option<&str>) -> Pod {
        let annotations = cpu_usage.map(|u| serde_json::json!({ANN_CPU_USAGE: u}));
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                         "annotations": annotations},
            "spec": {"containers": [{"name": "app", "image": "busybox",
                "resources": {"requests": {"cpu": "200m", "memory": "64Mi"}}}]}}))
        .unwrap()
    }

    /// Runs the pod's one container in the fake runtime.
    async fn run(runtime: &FakeRuntime, pod: &Pod) {
        let dir = std::path::Path::new("/nonexistent");
        let sandbox = sandbox_config(pod, 0, dir, &[]);
        let sandbox_id = runtime.run_pod_sandbox(sandbox.clone(), "").await.unwrap();
        let container = pod.spec.as_ref().unwrap().containers[0].clone();
        let config = container_config(
            pod,
            &container,
            "busybox",
            0,
            vec![],
            vec![],
            Default::default(),
        );
        let id = runtime
            .create_container(&sandbox_id, config, sandbox)
            .await
            .unwrap();
        runtime.start_container(&id).await.unwrap();
    }

    #[tokio::test]
    async fn running_pods_report_their_annotated_or_requested_usage_and_the_node_the_sum() {
        let runtime = Arc::new(FakeRuntime::new());
        let pods = PodRegistry::default();
        let (busy, idle, pending) = (pod("busy", Some("300m")), pod("idle", None), pod("p", None));
        for p in [&busy, &idle] {
            run(&runtime, p).await;
        }
        for p in [&busy, &idle, &pending] {
            pods.upsert(&Arc::new(p.clone()));
        }
        let summary = HollowSummary::new("n1", runtime.clone(), pods.clone(), 16 << 30);
        let got = summary.summary(true).await.unwrap();
        let cores = |p: &PodStats| p.cpu.as_ref().unwrap().usage_nano_cores.unwrap();
        let names: Vec<&str> = got.pods.iter().map(|p| p.pod_ref.name.as_str()).collect();
        assert_eq!(names, ["busy", "idle"], "the pending pod runs nothing");
        assert_eq!(cores(&got.pods[0]), 300_000_000);
        assert_eq!(cores(&got.pods[1]), 20_000_000, "a tenth of the request");
        assert_eq!(
            got.pods[1].memory.as_ref().unwrap().working_set_bytes,
            Some(32 << 20)
        );
        assert_eq!(got.pods[0].containers[0].name, "app");
        let node_cpu = got.node.cpu.unwrap().usage_nano_cores.unwrap();
        assert_eq!(node_cpu, (SYSTEM_CPU_MILLIS + 320) * 1_000_000);

        // a new annotation counts from the next look
        pods.upsert(&Arc::new(pod("idle", Some("1"))));
        let got = summary.summary(true).await.unwrap();
        assert_eq!(cores(&got.pods[1]), 1_000_000_000);
    }

    #[test]
    fn cpu_time_adds_each_looks_usage_over_the_time_since_the_look_before() {
        let counters = Counters::default();
        let start: Timestamp = "2026-12-04T10:00:00Z".parse().unwrap();
        let at = |t: &str| Time(format!("2026-12-04T10:00:{t}Z").parse().unwrap());
        let first = counters.cpu("c", &at("02.5"), 200, start);
        assert_eq!(first.usage_nano_cores, Some(200_000_000));
        assert_eq!(first.usage_core_nano_seconds, Some(500_000_000));
        // less used now: the counter still grows, by the new usage
        let second = counters.cpu("c", &at("04.5"), 50, start);
        assert_eq!(second.usage_core_nano_seconds, Some(600_000_000));
        // a container gone is forgotten: a new one of that id counts from its start
        counters.retain(&HashSet::new());
        let again = counters.cpu("c", &at("04.5"), 50, start);
        assert_eq!(again.usage_core_nano_seconds, Some(225_000_000));
    }

    #[test]
    fn usage_comes_from_the_annotation_then_the_request() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "annotations": {ANN_CPU_USAGE: "1500m"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests":
                {"cpu": "400m", "memory": "64Mi"}}}]}}))
        .unwrap();
        let c = pod.spec.as_ref().map(|s| &s.containers[0]);
        let cpu = usage(&pod, c, ANN_CPU_USAGE, "cpu", Quantity::milli_value, 10);
        assert_eq!(cpu, Some(1500));
        let bytes = usage(&pod, c, ANN_MEMORY_USAGE, "memory", Quantity::value, 2);
        assert_eq!(bytes, Some(32 << 20));
        assert_eq!(
            usage(&pod, None, ANN_MEMORY_USAGE, "memory", Quantity::value, 2),
            None
        );
    }
}
