//! Pod cgroups on the real containerd (issue 32's resources): a kubelet with its own
//! `--cgroup-root` puts a Burstable pod in `kubepods/burstable/pod<uid>` and a Guaranteed one in
//! `kubepods/pod<uid>`, each with its limits (CPU shares and quota, memory, pids) in the host's
//! hierarchies, and the Burstable class's shares follow its pods; a container's processes are
//! in their pod's cgroup; a container that allocates past its memory limit is OOM-killed and
//! reported `OOMKilled`; a deleted pod's cgroup is removed; the Node's allocatable is its
//! capacity less `--kube-reserved`, `--system-reserved` and the hard eviction thresholds, with
//! `--max-pods` pods. Needs root (containerd, CNI, cgroups); skips otherwise.

mod support;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use skiff_apimachinery::quantity::Quantity;
use support::node::{
    KubeletProcess, cgroup_dir, cgroup_file, in_phase, unsupported_without_cgroup_v1,
};
use support::{ApiServer, Backend, eventually, kube_client, run};

const NODE: &str = "cgroups-e2e";

async fn create(pods: &Api<Pod>, name: &str, resources: serde_json::Value, script: &str) -> Pod {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": "busybox",
                            "command": ["sh", "-c", script],
                            "resources": resources}],
        },
    });
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .expect("create pod")
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap()
}

fn bytes(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> i64 {
    Quantity::parse(&q.0).unwrap().value()
}

#[test]
fn pods_run_in_their_qos_cgroups_with_their_limits_and_the_node_keeps_back_what_is_reserved() {
    if let Some(why) = unsupported_without_cgroup_v1() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let kubelet = KubeletProcess::start_with(
        &api,
        NODE,
        &[
            "--kube-reserved",
            "cpu=100m,memory=100Mi",
            "--system-reserved",
            "memory=156Mi",
            "--max-pods",
            "30",
            "--pod-max-pids",
            "200",
        ],
    );
    let kubepods = format!("{}/kubepods", kubelet.cgroup_root());
    run(async {
        let c = kube_client(&api).await;
        let nodes: Api<Node> = Api::all(c.clone());
        let pods: Api<Pod> = Api::namespaced(c.clone(), "default");

        // allocatable: capacity - kubeReserved - systemReserved - memory.available<100Mi
        let status = nodes.get(NODE).await.unwrap().status.unwrap();
        let (capacity, allocatable) = (status.capacity.unwrap(), status.allocatable.unwrap());
        assert_eq!(capacity["pods"].0, "30");
        assert_eq!(allocatable["pods"].0, "30");
        assert_eq!(
            bytes(&allocatable["memory"]),
            bytes(&capacity["memory"]) - (356 << 20)
        );
        let cpu = |q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
            Quantity::parse(&q.0).unwrap().milli_value()
        };
        assert_eq!(cpu(&allocatable["cpu"]), cpu(&capacity["cpu"]) - 100);
        // kubepods: the capacity less what is reserved (not the eviction threshold)
        assert_eq!(
            cgroup_file("memory", &kubepods, "memory.limit_in_bytes"),
            (bytes(&capacity["memory"]) - (256 << 20)).to_string()
        );
        assert_eq!(
            cgroup_file("cpu", &kubepods, "cpu.shares"),
            ((cpu(&capacity["cpu"]) - 100) * 1024 / 1000).to_string()
        );
        assert_eq!(
            cgroup_file("cpu", &format!("{kubepods}/besteffort"), "cpu.shares"),
            "2"
        );

        let burstable = create(
            &pods,
            "burstable",
            json!({"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}),
            "sleep 3600",
        )
        .await;
        let guaranteed = create(
            &pods,
            "guaranteed",
            json!({"limits": {"cpu": "200m", "memory": "48Mi"}}),
            "sleep 3600",
        )
        .await;
        let burstable_pod = eventually("the burstable pod running", || {
            in_phase(&pods, "burstable", "Running")
        })
        .await;
        eventually("the guaranteed pod running", || {
            in_phase(&pods, "guaranteed", "Running")
        })
        .await;

        let b = format!("{kubepods}/burstable/pod{}", uid(&burstable));
        assert_eq!(
            cgroup_file("memory", &b, "memory.limit_in_bytes"),
            (64 << 20).to_string()
        );
        assert_eq!(cgroup_file("cpu", &b, "cpu.shares"), "102");
        assert_eq!(
            cgroup_file("cpu", &b, "cpu.cfs_quota_us"),
            "-1",
            "no CPU limit, no quota"
        );
        assert_eq!(cgroup_file("pids", &b, "pids.max"), "200");
        for hierarchy in ["cpuacct", "cpuset", "systemd"] {
            assert!(cgroup_dir(hierarchy, &b).is_dir(), "{hierarchy}");
        }
        assert_eq!(
            cgroup_file("cpu", &format!("{kubepods}/burstable"), "cpu.shares"),
            "102"
        );

        let g = format!("{kubepods}/pod{}", uid(&guaranteed));
        assert_eq!(
            cgroup_file("memory", &g, "memory.limit_in_bytes"),
            (48 << 20).to_string()
        );
        assert_eq!(cgroup_file("cpu", &g, "cpu.shares"), "204");
        assert_eq!(cgroup_file("cpu", &g, "cpu.cfs_quota_us"), "20000");
        assert_eq!(cgroup_file("cpu", &g, "cpu.cfs_period_us"), "100000");

        // the container's process is in its pod's cgroup, in its own below it
        let container_id = burstable_pod.status.unwrap().container_statuses.unwrap()[0]
            .container_id
            .clone()
            .unwrap();
        let container_id = container_id.trim_start_matches("containerd://");
        let container = format!("{b}/{container_id}");
        let procs = cgroup_file("memory", &container, "cgroup.procs");
        let pid = procs
            .lines()
            .next()
            .expect("a process in the container's cgroup");
        let proc_cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
        for hierarchy in ["memory", "cpu", "pids"] {
            assert!(
                proc_cgroup
                    .lines()
                    .any(|l| l.ends_with(&format!(":{hierarchy}:{container}"))),
                "{proc_cgroup}"
            );
        }

        // a container that allocates past its limit is killed by the OOM killer, and says so
        create(
            &pods,
            "hog",
            json!({"limits": {"cpu": "100m", "memory": "16Mi"}}),
            "dd if=/dev/zero of=/dev/null bs=64M count=1",
        )
        .await;
        // containerd's CRI gives the reason from the cgroup's OOM event; under load the task's
        // exit can be handled first and the reason is `Error` until the OOM event updates it
        // (or a restart's next kill is reported), as with upstream's kubelet on containerd
        let exit_code = eventually("the hog reported OOMKilled", || async {
            let status = pods.get("hog").await.ok()?.status?;
            let c = status.container_statuses?.into_iter().next()?;
            let terminated = c.last_state?.terminated?;
            (terminated.reason.as_deref() == Some("OOMKilled")).then_some(terminated.exit_code)
        })
        .await;
        assert_eq!(exit_code, 137, "killed by SIGKILL");

        // deleted pods lose their cgroups, and the Burstable class its share
        for name in ["burstable", "guaranteed", "hog"] {
            pods.delete(name, &DeleteParams::default()).await.unwrap();
        }
        eventually("the pods gone", || async {
            pods.list(&Default::default())
                .await
                .ok()
                .filter(|l| l.items.is_empty())
        })
        .await;
        for cgroup in [&b, &g] {
            for hierarchy in ["memory", "cpu", "cpuacct", "cpuset", "pids", "systemd"] {
                let dir = cgroup_dir(hierarchy, cgroup);
                assert!(!dir.exists(), "{} is left", dir.display());
            }
        }
        assert_eq!(
            cgroup_file("cpu", &format!("{kubepods}/burstable"), "cpu.shares"),
            "2"
        );
    });
    drop(kubelet);
}
