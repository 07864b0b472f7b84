//! Unit tests of [`super::PodCgroups`] and the cgroupfs driver against a fake cgroup filesystem.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use skiff_apimachinery::quantity::Quantity;

use super::fs::{FakeCgroupFs, FsCall};
use super::resources::{node_allocatable_config, shares_to_weight};
use super::*;

const GIB: i64 = 1 << 30;

fn allocatable() -> ResourceConfig {
    let capacity = BTreeMap::from([
        ("cpu".to_string(), 2000),
        ("memory".to_string(), 4 * GIB),
        ("pid".to_string(), 32768),
    ]);
    let reserved = BTreeMap::from([
        ("cpu".to_string(), Quantity::parse("500m").unwrap()),
        ("memory".to_string(), Quantity::parse("1Gi").unwrap()),
        ("pid".to_string(), Quantity::parse("768").unwrap()),
    ]);
    node_allocatable_config(&capacity, &reserved)
}

fn start(fs: &Arc<FakeCgroupFs>, pids: i64) -> PodCgroups {
    PodCgroups::start(fs.clone(), "/", pids, &allocatable()).unwrap()
}

fn pod(uid: &str, qos: &str, containers: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": uid, "namespace": "default", "uid": uid},
        "spec": {"containers": containers},
        "status": {"qosClass": qos},
    }))
    .unwrap()
}

fn container(requests: Value, limits: Value) -> Value {
    json!({"name": "c", "resources": {"requests": requests, "limits": limits}})
}

fn file(fs: &FakeCgroupFs, path: &str) -> Option<String> {
    fs.file(Path::new("/sys/fs/cgroup").join(path))
}

#[test]
fn kubepods_and_the_qos_classes_are_made_in_every_v1_hierarchy_with_the_allocatable() {
    let fs = Arc::new(FakeCgroupFs::v1());
    start(&fs, -1);
    for hierarchy in ["cpu", "cpuacct", "cpuset", "memory", "pids", "systemd"] {
        for cgroup in ["kubepods", "kubepods/burstable", "kubepods/besteffort"] {
            let dir = Path::new("/sys/fs/cgroup").join(hierarchy).join(cgroup);
            assert!(fs.has_dir(&dir), "{}", dir.display());
        }
    }
    // capacity less kubeReserved and systemReserved
    assert_eq!(
        file(&fs, "cpu/kubepods/cpu.shares").as_deref(),
        Some("1536")
    );
    assert_eq!(
        file(&fs, "memory/kubepods/memory.limit_in_bytes"),
        Some((3 * GIB).to_string())
    );
    assert_eq!(
        file(&fs, "pids/kubepods/pids.max").as_deref(),
        Some("32000")
    );
    assert_eq!(
        file(&fs, "cpu/kubepods/besteffort/cpu.shares").as_deref(),
        Some("2")
    );
    assert_eq!(
        file(&fs, "cpu/kubepods/burstable/cpu.shares").as_deref(),
        Some("2")
    );
    // a new cpuset takes its parent's CPUs and memory nodes
    assert_eq!(
        file(&fs, "cpuset/kubepods/burstable/cpuset.cpus").as_deref(),
        Some("0-1")
    );
    assert_eq!(
        file(&fs, "cpuset/kubepods/cpuset.mems").as_deref(),
        Some("0")
    );
}

#[test]
fn a_missing_cgroup_root_is_refused_as_upstream_does() {
    let fs = Arc::new(FakeCgroupFs::v1());
    let err = PodCgroups::start(fs.clone(), "/skiff-test", -1, &allocatable())
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with("invalid configuration: cgroup \"/skiff-test\" has some missing paths: "),
        "{err}"
    );
    assert!(err.contains("/sys/fs/cgroup/memory/skiff-test"), "{err}");
    fs.create_dir(Path::new("/sys/fs/cgroup/memory/skiff-test"))
        .unwrap();
    for h in ["cpu", "cpuacct", "cpuset", "pids", "systemd"] {
        fs.create_dir(&Path::new("/sys/fs/cgroup").join(h).join("skiff-test"))
            .unwrap();
    }
    let cgroups = PodCgroups::start(fs.clone(), "/skiff-test", -1, &allocatable()).unwrap();
    let p = pod("u1", "BestEffort", json!([{"name": "c"}]));
    assert_eq!(
        cgroups.cgroup_parent(&p),
        "/skiff-test/kubepods/besteffort/podu1"
    );
}

#[test]
fn a_guaranteed_pod_sits_in_kubepods_with_its_shares_quota_and_memory_limit() {
    let fs = Arc::new(FakeCgroupFs::v1());
    let cgroups = start(&fs, -1);
    let limits = json!({"cpu": "500m", "memory": "128Mi"});
    let p = pod(
        "g1",
        "Guaranteed",
        json!([container(limits.clone(), limits)]),
    );
    cgroups.ensure_pod(&p).unwrap();
    assert_eq!(cgroups.cgroup_parent(&p), "/kubepods/podg1");
    assert_eq!(
        file(&fs, "cpu/kubepods/podg1/cpu.shares").as_deref(),
        Some("512")
    );
    assert_eq!(
        file(&fs, "cpu/kubepods/podg1/cpu.cfs_period_us").as_deref(),
        Some("100000")
    );
    assert_eq!(
        file(&fs, "cpu/kubepods/podg1/cpu.cfs_quota_us").as_deref(),
        Some("50000")
    );
    assert_eq!(
        file(&fs, "memory/kubepods/podg1/memory.limit_in_bytes").as_deref(),
        Some("134217728")
    );
    assert!(fs.has_dir("/sys/fs/cgroup/systemd/kubepods/podg1"));
    // a Guaranteed pod leaves the Burstable class's shares alone
    assert_eq!(
        file(&fs, "cpu/kubepods/burstable/cpu.shares").as_deref(),
        Some("2")
    );
}

#[test]
fn burstable_pods_get_only_the_limits_every_container_declares_and_the_class_their_requests() {
    let fs = Arc::new(FakeCgroupFs::v1());
    let cgroups = start(&fs, -1);
    let p1 = pod(
        "b1",
        "Burstable",
        json!([
            container(json!({"cpu": "250m", "memory": "64Mi"}), json!({"memory": "128Mi"})),
            {"name": "d", "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}},
        ]),
    );
    cgroups.ensure_pod(&p1).unwrap();
    assert_eq!(cgroups.cgroup_parent(&p1), "/kubepods/burstable/podb1");
    let dir = "cpu/kubepods/burstable/podb1";
    // requests 250m + 1 (the limit standing for the missing request)
    assert_eq!(
        file(&fs, &format!("{dir}/cpu.shares")).as_deref(),
        Some("1280")
    );
    // one container has no CPU limit: no quota
    assert_eq!(file(&fs, &format!("{dir}/cpu.cfs_quota_us")), None);
    assert_eq!(
        file(&fs, "memory/kubepods/burstable/podb1/memory.limit_in_bytes"),
        Some((192 << 20).to_string())
    );
    assert_eq!(
        file(&fs, "cpu/kubepods/burstable/cpu.shares").as_deref(),
        Some("1280")
    );

    let p2 = pod(
        "b2",
        "Burstable",
        json!([container(json!({"cpu": "100m"}), json!({}))]),
    );
    cgroups.ensure_pod(&p2).unwrap();
    assert_eq!(
        file(&fs, "cpu/kubepods/burstable/cpu.shares").as_deref(),
        Some("1382")
    );
    assert_eq!(
        file(&fs, "memory/kubepods/burstable/podb2/memory.limit_in_bytes"),
        None
    );
    // a second sync of an unchanged pod writes nothing
    let writes = fs.writes().len();
    cgroups.ensure_pod(&p2).unwrap();
    assert_eq!(fs.writes().len(), writes);
}

#[test]
fn best_effort_pods_get_the_minimum_shares_and_nothing_else() {
    let fs = Arc::new(FakeCgroupFs::v1());
    let cgroups = start(&fs, -1);
    let p = pod("e1", "BestEffort", json!([{"name": "c"}]));
    cgroups.ensure_pod(&p).unwrap();
    let written: Vec<String> = fs
        .writes()
        .into_iter()
        .filter(|(path, _)| path.to_string_lossy().contains("pode1"))
        .filter(|(path, _)| !path.to_string_lossy().contains("cpuset"))
        .map(|(path, value)| format!("{}={value}", path.display()))
        .collect();
    assert_eq!(
        written,
        ["/sys/fs/cgroup/cpu/kubepods/besteffort/pode1/cpu.shares=2"]
    );
}

#[test]
fn the_pod_overhead_adds_to_the_requests_and_to_the_limits_that_exist() {
    let fs = Arc::new(FakeCgroupFs::v1());
    let cgroups = start(&fs, -1);
    let mut p = pod(
        "o1",
        "Burstable",
        json!([container(
            json!({"cpu": "100m"}),
            json!({"memory": "100Mi"})
        )]),
    );
    p.spec.as_mut().unwrap().overhead =
        Some(serde_json::from_value(json!({"cpu": "250m", "memory": "20Mi"})).unwrap());
    cgroups.ensure_pod(&p).unwrap();
    assert_eq!(
        file(&fs, "cpu/kubepods/burstable/podo1/cpu.shares").as_deref(),
        Some("358")
    );
    assert_eq!(
        file(&fs, "memory/kubepods/burstable/podo1/memory.limit_in_bytes"),
        Some((120 << 20).to_string())
    );
    // no CPU limit: the overhead's CPU gives none
    assert_eq!(
        file(&fs, "cpu/kubepods/burstable/podo1/cpu.cfs_quota_us"),
        None
    );
}

#[test]
fn the_pod_pids_limit_is_set_on_every_pod() {
    let fs = Arc::new(FakeCgroupFs::v1());
    let cgroups = start(&fs, 100);
    cgroups
        .ensure_pod(&pod("p1", "BestEffort", json!([{"name": "c"}])))
        .unwrap();
    assert_eq!(
        file(&fs, "pids/kubepods/besteffort/podp1/pids.max").as_deref(),
        Some("100")
    );
}

#[tokio::test]
async fn a_removed_pod_has_its_processes_killed_its_cgroup_removed_and_its_request_given_back() {
    let fs = Arc::new(FakeCgroupFs::v1());
    let cgroups = start(&fs, -1);
    let p = pod(
        "b1",
        "Burstable",
        json!([container(json!({"cpu": "500m"}), json!({}))]),
    );
    cgroups.ensure_pod(&p).unwrap();
    assert_eq!(
        file(&fs, "cpu/kubepods/burstable/cpu.shares").as_deref(),
        Some("512")
    );
    // a container's cgroup the runtime left, with a process in it
    let leftover = Path::new("/sys/fs/cgroup/memory/kubepods/burstable/podb1/abc");
    fs.create_dir(leftover).unwrap();
    fs.set_file(leftover.join("cgroup.procs"), "4242\n");

    cgroups.remove_pod("b1").await.unwrap();
    let calls = fs.calls.lock().clone();
    let killed = calls.iter().position(|c| *c == FsCall::Kill(4242)).unwrap();
    let child = calls
        .iter()
        .position(|c| *c == FsCall::RemoveDir(leftover.into()))
        .unwrap();
    let pod_dir = calls
        .iter()
        .position(|c| {
            *c == FsCall::RemoveDir("/sys/fs/cgroup/memory/kubepods/burstable/podb1".into())
        })
        .unwrap();
    assert!(killed < child && child < pod_dir, "{calls:?}");
    for h in ["cpu", "cpuacct", "cpuset", "memory", "pids", "systemd"] {
        let dir = Path::new("/sys/fs/cgroup")
            .join(h)
            .join("kubepods/burstable/podb1");
        assert!(!fs.has_dir(&dir), "{}", dir.display());
    }
    assert_eq!(
        file(&fs, "cpu/kubepods/burstable/cpu.shares").as_deref(),
        Some("2")
    );
    // a pod without a cgroup is removed already
    cgroups.remove_pod("none").await.unwrap();
}

#[test]
fn on_cgroup_v2_the_unified_files_are_written_and_controllers_enabled_for_children() {
    let fs = Arc::new(FakeCgroupFs::v2());
    let cgroups = start(&fs, 50);
    assert_eq!(
        fs.file("/sys/fs/cgroup/cgroup.subtree_control").as_deref(),
        Some("+cpuset +cpu +io +memory +pids")
    );
    assert_eq!(
        fs.file("/sys/fs/cgroup/kubepods/cpu.weight"),
        Some(shares_to_weight(1536).to_string())
    );
    assert_eq!(
        fs.file("/sys/fs/cgroup/kubepods/memory.max"),
        Some((3 * GIB).to_string())
    );
    assert_eq!(
        fs.file("/sys/fs/cgroup/kubepods/besteffort/cpu.weight")
            .as_deref(),
        Some("1")
    );
    let limits = json!({"cpu": "250m", "memory": "64Mi"});
    let g = pod(
        "g1",
        "Guaranteed",
        json!([container(limits.clone(), limits)]),
    );
    cgroups.ensure_pod(&g).unwrap();
    let dir = Path::new("/sys/fs/cgroup/kubepods/podg1");
    assert_eq!(
        fs.file(dir.join("cpu.max")).as_deref(),
        Some("25000 100000")
    );
    assert_eq!(fs.file(dir.join("memory.max")).as_deref(), Some("67108864"));
    assert_eq!(fs.file(dir.join("pids.max")).as_deref(), Some("50"));
    assert_eq!(
        fs.file(dir.join("cpu.weight")),
        Some(shares_to_weight(256).to_string())
    );
    assert_eq!(shares_to_weight(2), 1);
    assert_eq!(shares_to_weight(262_144), 10_000);
}

#[test]
fn a_write_that_fails_names_the_cgroup() {
    let fs = Arc::new(FakeCgroupFs::v1());
    let cgroups = start(&fs, -1);
    fs.fail_writes.lock().insert(
        "memory.limit_in_bytes".into(),
        "device or resource busy".into(),
    );
    let limits = json!({"cpu": "1", "memory": "1Mi"});
    let err = cgroups
        .ensure_pod(&pod(
            "g1",
            "Guaranteed",
            json!([container(limits.clone(), limits)]),
        ))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "failed to create container for /kubepods/podg1: device or resource busy"
    );
}

#[test]
fn a_pods_usage_is_read_from_its_cgroup_in_v1_and_v2() {
    let pod = pod(
        "u1",
        "burstable",
        json!([container(json!({"cpu": "100m"}), json!({}))]),
    );
    // v1: cpuacct's nanoseconds, the memory hierarchy's subtree totals
    let fs = Arc::new(FakeCgroupFs::v1());
    let cgroups = start(&fs, 0);
    cgroups.ensure_pod(&pod).unwrap();
    let dir = |h: &str| format!("/sys/fs/cgroup/{h}/kubepods/burstable/podu1");
    fs.set_file(format!("{}/cpuacct.usage", dir("cpuacct")), "2500000000\n");
    fs.set_file(format!("{}/memory.usage_in_bytes", dir("memory")), "1000\n");
    fs.set_file(
        format!("{}/memory.limit_in_bytes", dir("memory")),
        "9223372036854771712\n",
    );
    fs.set_file(
        format!("{}/memory.stat", dir("memory")),
        "inactive_file 1\nrss 2\ntotal_inactive_file 300\ntotal_rss 600\ntotal_pgfault 7\ntotal_pgmajfault 1\n",
    );
    fs.set_file(format!("{}/pids.current", dir("pids")), "3\n");
    assert_eq!(
        cgroups.usage(&pod),
        CgroupUsage {
            cpu_ns: Some(2_500_000_000),
            memory: Some(driver::CgroupMemory {
                usage: 1000,
                working_set: 700,
                rss: Some(600),
                page_faults: Some(7),
                major_page_faults: Some(1),
                // the unlimited value is no limit
                limit: None,
            }),
            tasks: Some(3),
        }
    );
    // the pod's processes are in its containers' cgroups below it
    fs.set_file(format!("{}/cgroup.procs", dir("memory")), "");
    let pause = format!("{}/abc", dir("memory"));
    fs.create_dir(Path::new(&pause)).unwrap();
    fs.set_file(format!("{pause}/cgroup.procs"), "4242\n4243\n");
    assert_eq!(cgroups.first_process(&pod), Some(4242));

    // v2: cpu.stat's microseconds, memory.current and memory.max
    let fs = Arc::new(FakeCgroupFs::v2());
    let cgroups = start(&fs, 0);
    cgroups.ensure_pod(&pod).unwrap();
    let dir = "/sys/fs/cgroup/kubepods/burstable/podu1";
    fs.set_file(
        format!("{dir}/cpu.stat"),
        "usage_usec 1500\nuser_usec 1000\n",
    );
    fs.set_file(format!("{dir}/memory.current"), "1000\n");
    fs.set_file(format!("{dir}/memory.max"), "4096\n");
    fs.set_file(
        format!("{dir}/memory.stat"),
        "anon 500\ninactive_file 100\npgfault 9\npgmajfault 2\n",
    );
    let usage = cgroups.usage(&pod);
    assert_eq!(usage.cpu_ns, Some(1_500_000));
    let memory = usage.memory.unwrap();
    assert_eq!(
        (memory.working_set, memory.rss, memory.limit),
        (900, Some(500), Some(4096))
    );
    // an unreadable figure is left out, not zero
    assert_eq!(usage.tasks, None);
    fs.set_file(format!("{dir}/memory.max"), "max\n");
    assert_eq!(cgroups.usage(&pod).memory.unwrap().limit, None);
}
