//! Unit tests of the eviction manager with fake stats, pods and reclaimer.

use std::collections::HashMap;

use parking_lot::Mutex;
use serde_json::json;

use super::signals::{ContainerUsage, PodUsage};
use super::*;
use crate::api::RecordingPodApi;
use crate::kubelet_config::{parse_pairs_flag, parse_threshold_flag};

const MI: i64 = 1 << 20;
const GI: i64 = 1 << 30;

fn settings(hard: &str, soft: &str, grace: &str, reclaim: &str) -> KubeletConfiguration {
    KubeletConfiguration {
        eviction_hard: parse_threshold_flag(hard).unwrap(),
        eviction_soft: parse_threshold_flag(soft).unwrap(),
        eviction_soft_grace_period: parse_pairs_flag(grace).unwrap(),
        eviction_minimum_reclaim: parse_pairs_flag(reclaim).unwrap(),
        eviction_pressure_transition_period: Duration::from_secs(30),
        eviction_max_pod_grace_period: 20,
        ..Default::default()
    }
}

fn memory(available: i64) -> Observations {
    Observations::from([(
        Signal::MemoryAvailable,
        Observation {
            available,
            capacity: 4 * GI,
        },
    )])
}

fn at(start: Instant, seconds: u64) -> Instant {
    start + Duration::from_secs(seconds)
}

#[test]
fn a_hard_threshold_crossed_is_acted_on_at_once_and_raises_memory_pressure() {
    let pressure = Pressure::default();
    let mut m = Manager::new(
        &settings("memory.available<100Mi", "", "", ""),
        pressure.clone(),
    );
    let t0 = Instant::now();
    assert_eq!(m.look(t0, &memory(GI)), Look::default());
    let look = m.look(at(t0, 10), &memory(80 * MI));
    assert_eq!(
        look.reclaim.map(|t| t.signal),
        Some(Signal::MemoryAvailable)
    );
    assert_eq!(look.transitions, [(Condition::MemoryPressure, true)]);
    assert_eq!(pressure.get(), BTreeSet::from([Condition::MemoryPressure]));
}

#[test]
fn a_soft_threshold_is_acted_on_once_crossed_for_its_grace_period() {
    let s = settings("", "memory.available<1Gi", "memory.available=30s", "");
    let mut m = Manager::new(&s, Pressure::default());
    let t0 = Instant::now();
    let look = m.look(t0, &memory(512 * MI));
    // the condition comes at once, the eviction after the grace period
    assert_eq!(look.reclaim, None);
    assert_eq!(look.transitions, [(Condition::MemoryPressure, true)]);
    assert_eq!(m.next_grace_deadline(), Some(at(t0, 30)));
    assert_eq!(m.look(at(t0, 29), &memory(512 * MI)).reclaim, None);
    assert!(m.look(at(t0, 30), &memory(512 * MI)).reclaim.is_some());

    // a recovery starts the grace period again
    let mut m = Manager::new(&s, Pressure::default());
    m.look(t0, &memory(512 * MI));
    m.look(at(t0, 20), &memory(2 * GI));
    assert_eq!(m.look(at(t0, 40), &memory(512 * MI)).reclaim, None);
    assert!(m.look(at(t0, 70), &memory(512 * MI)).reclaim.is_some());
}

#[test]
fn pressure_is_held_for_the_transition_period_after_the_signal_recovers() {
    let pressure = Pressure::default();
    let mut m = Manager::new(
        &settings("memory.available<100Mi", "", "", ""),
        pressure.clone(),
    );
    let t0 = Instant::now();
    m.look(t0, &memory(50 * MI));
    let look = m.look(at(t0, 10), &memory(GI));
    assert_eq!(look, Look::default(), "held, not acted on");
    assert_eq!(pressure.get(), BTreeSet::from([Condition::MemoryPressure]));
    assert_eq!(m.look(at(t0, 29), &memory(GI)).transitions, []);
    let look = m.look(at(t0, 30), &memory(GI));
    assert_eq!(look.transitions, [(Condition::MemoryPressure, false)]);
    assert!(pressure.get().is_empty());
}

#[test]
fn a_met_threshold_stays_met_until_the_signal_is_past_its_minimum_reclaim() {
    let s = settings("memory.available<100Mi", "", "", "memory.available=400Mi");
    let mut m = Manager::new(&s, Pressure::default());
    let t0 = Instant::now();
    assert!(m.look(t0, &memory(50 * MI)).reclaim.is_some());
    // past the threshold, not past threshold + reclaim
    assert!(m.look(at(t0, 1), &memory(300 * MI)).reclaim.is_some());
    assert!(m.any_crossed_with_reclaim(&memory(300 * MI)));
    assert_eq!(m.look(at(t0, 2), &memory(600 * MI)).reclaim, None);
    // a threshold not met before ignores its minimum reclaim
    assert_eq!(m.look(at(t0, 3), &memory(300 * MI)).reclaim, None);
}

#[test]
fn memory_is_reclaimed_before_disk_and_percentages_are_of_capacity() {
    let s = settings("nodefs.available<10%,memory.available<100Mi", "", "", "");
    let mut m = Manager::new(&s, Pressure::default());
    let mut observations = memory(50 * MI);
    observations.insert(
        Signal::NodeFsAvailable,
        Observation {
            available: 5,
            capacity: 100,
        },
    );
    let look = m.look(Instant::now(), &observations);
    assert_eq!(
        look.reclaim.map(|t| t.signal),
        Some(Signal::MemoryAvailable)
    );
    assert_eq!(
        look.transitions,
        [
            (Condition::MemoryPressure, true),
            (Condition::DiskPressure, true)
        ]
    );
    observations.insert(
        Signal::MemoryAvailable,
        memory(GI)[&Signal::MemoryAvailable],
    );
    let look = m.look(Instant::now(), &observations);
    assert_eq!(
        look.reclaim.map(|t| t.signal),
        Some(Signal::NodeFsAvailable)
    );
}

fn pod(name: &str, priority: i32, requests: serde_json::Value) -> Arc<Pod> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "spec": {"priority": priority, "terminationGracePeriodSeconds": 60,
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": requests}}]},
        }))
        .unwrap(),
    )
}

fn usage(memory: i64, disk: i64, processes: u64) -> PodUsage {
    PodUsage {
        containers: vec![ContainerUsage {
            name: "c".into(),
            memory: Some(memory as u64),
            rootfs: Some(disk as u64),
            logs: Some(0),
        }],
        processes: Some(processes),
    }
}

fn names(pods: &[Arc<Pod>]) -> Vec<&str> {
    pods.iter()
        .map(|p| p.metadata.name.as_deref().unwrap())
        .collect()
}

#[test]
fn memory_ranks_pods_over_their_requests_then_by_priority_then_by_usage_above_requests() {
    let pods = [
        pod("within-low", 0, json!({"memory": "1Gi"})),
        pod("over-high", 100, json!({"memory": "100Mi"})),
        pod("over-low-small", 0, json!({"memory": "100Mi"})),
        pod("over-low-big", 0, json!({})),
        pod("no-stats", 1000, json!({})),
        pod("critical", 2_000_000_000, json!({})),
    ];
    let stats = HashMap::from([
        ("within-low".to_string(), usage(500 * MI, 0, 1)),
        ("over-high".to_string(), usage(900 * MI, 0, 1)),
        ("over-low-small".to_string(), usage(200 * MI, 0, 1)),
        ("over-low-big".to_string(), usage(300 * MI, 0, 1)),
        ("critical".to_string(), usage(3 * GI, 0, 1)),
    ]);
    let ranked = rank::rank(Signal::MemoryAvailable, &pods, &stats);
    assert_eq!(
        names(&ranked),
        [
            "no-stats",
            "over-low-big",
            "over-low-small",
            "over-high",
            "within-low"
        ]
    );
}

#[test]
fn disk_ranks_by_ephemeral_storage_over_requests_and_pids_by_priority_then_processes() {
    let pods = [
        pod("a", 0, json!({"ephemeral-storage": "1Gi"})),
        pod("b", 0, json!({})),
        pod("c", -10, json!({"ephemeral-storage": "10Gi"})),
    ];
    let stats = HashMap::from([
        ("a".to_string(), usage(0, 2 * GI, 5)),
        ("b".to_string(), usage(0, MI, 50)),
        ("c".to_string(), usage(0, GI, 10)),
    ]);
    let ranked = rank::rank(Signal::NodeFsAvailable, &pods, &stats);
    assert_eq!(names(&ranked), ["a", "b", "c"]);
    let ranked = rank::rank(Signal::PidAvailable, &pods, &stats);
    assert_eq!(names(&ranked), ["c", "b", "a"]);
}

#[test]
fn the_message_names_the_threshold_and_each_container_over_its_request() {
    let p = pod("p", 0, json!({}));
    let message = rank::eviction_message(
        "memory",
        &p,
        Some(&usage(200 * MI, 0, 1)),
        Some(("100Mi".into(), rank::format_amount("memory", 80 * MI))),
    );
    assert_eq!(
        message,
        "The node was low on resource: memory. Threshold quantity: 100Mi, available: 80Mi. \
         Container c was using 200Mi, request is 0, has larger consumption of memory. "
    );
    let within = pod("q", 0, json!({"memory": "0.5Gi"}));
    let message = rank::eviction_message("memory", &within, Some(&usage(MI, 0, 1)), None);
    assert_eq!(message, "The node was low on resource: memory. ");
    assert_eq!(rank::format_threshold(500_000_000, false), "500M");
    assert_eq!(rank::format_threshold(GI / 10, true), "107374182");
    assert_eq!(rank::format_amount("inodes", 5000), "5k");
}

/// Stats that say what they are told.
#[derive(Default)]
struct FakeStats {
    observations: Mutex<Observations>,
    /// What the observations become once the reclaimer ran.
    after_reclaim: Mutex<Option<Observations>>,
    usage: Mutex<HashMap<String, PodUsage>>,
}

#[async_trait]
impl StatsProvider for FakeStats {
    async fn observe(&self) -> Observations {
        self.observations.lock().clone()
    }

    fn memory_available(&self) -> Option<Observation> {
        self.observations
            .lock()
            .get(&Signal::MemoryAvailable)
            .copied()
    }

    async fn pod_usage(&self) -> HashMap<String, PodUsage> {
        self.usage.lock().clone()
    }
}

struct FakeReclaimer(Arc<FakeStats>, Mutex<usize>);

#[async_trait]
impl NodeReclaimer for FakeReclaimer {
    async fn reclaim_disk(&self) -> Result<(), String> {
        *self.1.lock() += 1;
        if let Some(o) = self.0.after_reclaim.lock().take() {
            *self.0.observations.lock() = o;
        }
        Ok(())
    }
}

/// Pods that end when told to.
#[derive(Default)]
struct FakePods {
    active: Mutex<Vec<Arc<Pod>>>,
    terminated: Mutex<Vec<(String, Termination)>>,
}

#[async_trait]
impl PodTerminator for FakePods {
    fn active_pods(&self) -> Vec<Arc<Pod>> {
        self.active.lock().clone()
    }

    async fn terminate(&self, pod: &Pod, termination: Termination) -> bool {
        let name = pod.metadata.name.clone().unwrap();
        self.active
            .lock()
            .retain(|p| p.metadata.name.as_deref() != Some(&name));
        self.terminated.lock().push((name, termination));
        true
    }
}

struct Setup {
    manager: EvictionManager,
    stats: Arc<FakeStats>,
    pods: Arc<FakePods>,
    api: Arc<RecordingPodApi>,
    reclaimed: Arc<FakeReclaimer>,
    node_events: Arc<Mutex<Vec<(&'static str, String)>>>,
}

fn setup(s: &KubeletConfiguration) -> Setup {
    let stats = Arc::new(FakeStats::default());
    let pods = Arc::new(FakePods::default());
    let api = Arc::new(RecordingPodApi::default());
    let reclaimed = Arc::new(FakeReclaimer(stats.clone(), Mutex::new(0)));
    let node_events: Arc<Mutex<Vec<(&'static str, String)>>> = Arc::default();
    let recorded = node_events.clone();
    let manager = EvictionManager {
        manager: Manager::new(s, Pressure::default()),
        node: "n1".into(),
        stats: stats.clone(),
        reclaimer: reclaimed.clone(),
        pods: pods.clone(),
        api: api.clone(),
        node_events: Arc::new(move |_, reason, message| recorded.lock().push((reason, message))),
    };
    Setup {
        manager,
        stats,
        pods,
        api,
        reclaimed,
        node_events,
    }
}

#[tokio::test]
async fn one_pod_is_evicted_per_look_with_upstreams_status_event_and_grace() {
    let mut s = setup(&settings("memory.available<100Mi", "", "", ""));
    *s.stats.observations.lock() = memory(80 * MI);
    *s.pods.active.lock() = vec![
        pod("guaranteed", 0, json!({"memory": "1Gi"})),
        pod("best-effort", 0, json!({})),
    ];
    *s.stats.usage.lock() = HashMap::from([
        ("guaranteed".to_string(), usage(100 * MI, 0, 1)),
        ("best-effort".to_string(), usage(200 * MI, 0, 1)),
    ]);
    let evicted = s.manager.synchronize().await.unwrap();
    assert_eq!(evicted.metadata.name.as_deref(), Some("best-effort"));
    let terminated = s.pods.terminated.lock().clone();
    assert_eq!(terminated.len(), 1, "one pod per look");
    let (name, t) = &terminated[0];
    let message = "The node was low on resource: memory. Threshold quantity: 100Mi, available: \
                   80Mi. Container c was using 200Mi, request is 0, has larger consumption of \
                   memory. ";
    assert_eq!(name, "best-effort");
    assert_eq!(
        (t.reason.as_str(), t.message.as_str()),
        ("Evicted", message)
    );
    assert_eq!(t.grace_seconds, IMMEDIATE_GRACE_SECONDS);
    let condition = t.condition.clone().unwrap();
    assert_eq!(
        (condition.type_.as_str(), condition.reason.as_deref()),
        ("DisruptionTarget", Some("TerminationByKubelet"))
    );
    assert_eq!(s.api.event_reasons(), ["Evicted"]);
    let events = s.node_events.lock().clone();
    assert_eq!(
        events,
        [
            (
                "NodeHasInsufficientMemory",
                "Node n1 status is now: NodeHasInsufficientMemory".to_string()
            ),
            (
                "EvictionThresholdMet",
                "Attempting to reclaim memory".into()
            )
        ]
    );

    // the next look evicts the next one
    let evicted = s.manager.synchronize().await.unwrap();
    assert_eq!(evicted.metadata.name.as_deref(), Some("guaranteed"));
    assert_eq!(s.manager.synchronize().await, None, "no pod left");
}

#[tokio::test]
async fn a_soft_eviction_gives_the_smaller_of_the_maximum_and_the_pods_grace_period() {
    let s = settings("", "memory.available<1Gi", "memory.available=0s", "");
    let mut s = setup(&s);
    *s.stats.observations.lock() = memory(512 * MI);
    *s.pods.active.lock() = vec![pod("p", 0, json!({}))];
    s.manager.synchronize().await.unwrap();
    // the pod asks 60 s, evictionMaxPodGracePeriod is 20
    assert_eq!(s.pods.terminated.lock()[0].1.grace_seconds, 20);
}

#[tokio::test]
async fn disk_is_reclaimed_on_the_node_before_any_pod_is_evicted() {
    // a percentage exact in float32, which upstream's threshold quantity goes through
    let mut s = setup(&settings("nodefs.available<25%", "", "", ""));
    let disk = |available| {
        Observations::from([(
            Signal::NodeFsAvailable,
            Observation {
                available,
                capacity: 100 * GI,
            },
        )])
    };
    *s.stats.observations.lock() = disk(5 * GI);
    *s.stats.after_reclaim.lock() = Some(disk(30 * GI));
    *s.pods.active.lock() = vec![pod("p", 0, json!({}))];
    assert_eq!(s.manager.synchronize().await, None);
    assert_eq!(*s.reclaimed.1.lock(), 1);
    assert!(s.pods.terminated.lock().is_empty());

    // not enough freed: a pod goes
    *s.stats.observations.lock() = disk(5 * GI);
    assert!(s.manager.synchronize().await.is_some());
    let message = s.pods.terminated.lock()[0].1.message.clone();
    assert!(
        message.starts_with(
            "The node was low on resource: ephemeral-storage. Threshold quantity: 25Gi, \
             available: 5Gi. "
        ),
        "{message}"
    );
}

#[tokio::test]
async fn critical_pods_are_never_evicted() {
    let mut s = setup(&settings("memory.available<100Mi", "", "", ""));
    *s.stats.observations.lock() = memory(10 * MI);
    let mut mirror = (*pod("static", 0, json!({}))).clone();
    mirror.metadata.annotations = Some(
        [(
            crate::static_pods::MIRROR_ANNOTATION.to_string(),
            "x".to_string(),
        )]
        .into(),
    );
    *s.pods.active.lock() = vec![Arc::new(mirror), pod("critical", 2_000_001_000, json!({}))];
    assert_eq!(s.manager.synchronize().await, None);
    assert!(s.pods.terminated.lock().is_empty());
}
