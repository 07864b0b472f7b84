//! `skiff killall` and `skiff uninstall` against what a real kubelet leaves when it is killed:
//! its containerd, and a pod (with a memory-backed emptyDir) running in its shim, in a network
//! namespace with a veth on the CNI bridge. `killall --data-dir` stops them all and removes the
//! pod's network namespace, veth and every mount under the data dir; a second run finds nothing
//! left; `uninstall` removes the data dir. Needs root (containerd, CNI); skips otherwise.

mod support;

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use serde_json::json;
use support::node::{KubeletProcess, in_phase, unsupported};
use support::{ApiServer, Backend, eventually, kube_client, output_text, run, run_guarded};

const NODE: &str = "killall-e2e";

/// `skiff <args>`: whether it succeeded, and its stdout and stderr.
fn skiff(args: &[&str]) -> (bool, String) {
    let out = run_guarded(Command::new(env!("CARGO_BIN_EXE_skiff")).args(args));
    let (stdout, stderr) = output_text(&out);
    (out.status.success(), format!("{stdout}{stderr}"))
}

/// Whether the process has exited (gone, or a zombie no one has reaped yet).
fn exited(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            stat.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
        .unwrap_or(true)
}

/// The parent of a process.
fn parent(pid: &str) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("a live process");
    stat.rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_string()
}

/// The name of the `ip netns` pin of a process's network namespace.
fn netns_of(pid: &str) -> String {
    let out = run_guarded(Command::new("ip").args(["netns", "identify", pid]));
    output_text(&out).0.trim().to_string()
}

/// The host's end of a network namespace's `eth0` (the veth on the bridge).
fn host_veth(netns: &str) -> String {
    let link = |args: &[&str]| -> serde_json::Value {
        let out = run_guarded(Command::new("ip").args(args));
        serde_json::from_str(&output_text(&out).0).expect("ip -j output")
    };
    let peer = link(&["-j", "-n", netns, "link", "show", "eth0"])[0]["link_index"].clone();
    let host = link(&["-j", "link", "show"]);
    host.as_array()
        .unwrap()
        .iter()
        .find(|l| l["ifindex"] == peer)
        .and_then(|l| l["ifname"].as_str())
        .unwrap_or_else(|| panic!("no host link with index {peer}"))
        .to_string()
}

fn mounts_under(dir: &Path) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| Path::new(m).starts_with(dir))
        .map(String::from)
        .collect()
}

#[test]
fn killall_removes_a_killed_kubelets_pods_network_and_mounts_and_uninstall_its_data_dir() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let mut kubelet = KubeletProcess::start(&api, NODE);
    run(async {
        let pods: Api<Pod> = Api::default_namespaced(kube_client(&api).await);
        support::create(
            &pods,
            json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "left-behind"},
                "spec": {
                    "nodeName": NODE,
                    "containers": [{"name": "c", "image": "busybox",
                                    "command": ["sleep", "3600"],
                                    "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]}],
                    "volumes": [{"name": "cache", "emptyDir": {"medium": "Memory"}}],
                },
            }),
        )
        .await;
        eventually("the pod running", || {
            in_phase(&pods, "left-behind", "Running")
        })
        .await;
    });
    let data = kubelet.data();
    // what the pod holds on the host: its sandbox's and container's processes under their
    // shim, the sandbox's network namespace and the veth on the bridge
    let tasks: Vec<String> = kubelet
        .ctr(&["tasks", "ls"])
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1).map(String::from))
        .collect();
    assert_eq!(tasks.len(), 2, "the sandbox and the container: {tasks:?}");
    let shim = parent(&tasks[0]);
    let netns = netns_of(&tasks[0]);
    assert!(netns.starts_with("cni-"), "{netns:?}");
    let veth = host_veth(&netns);
    assert!(!mounts_under(&data).is_empty());

    // a crash: containerd and the pod run on
    kubelet.kill();
    assert!(!exited(&tasks[0]) && !exited(&shim));

    let data_arg = data.to_str().unwrap();
    let (ok, out) = skiff(&["killall", "--data-dir", data_arg]);
    eprintln!("{out}");
    assert!(ok, "{out}");
    for line in [
        "stopped 0 Skiff processes and 1 containerd",
        "killed 2 container processes under 1 shim",
        "removed 1 network namespace, 1 veth, ",
        "1 pod IP lease",
        "unmounted ",
    ] {
        assert!(out.contains(line), "{line:?} missing from:\n{out}");
    }
    assert!(!out.contains("removed 0 network namespaces"), "{out}");
    run(async {
        for pid in tasks.iter().chain([&shim]) {
            eventually("the pod's processes gone", || async {
                exited(pid).then_some(())
            })
            .await;
        }
    });
    assert!(!Path::new("/var/run/netns").join(&netns).exists());
    assert!(!Path::new("/sys/class/net").join(&veth).exists());
    assert_eq!(mounts_under(&data), Vec::<String>::new());

    let (ok, again) = skiff(&["killall", "--data-dir", data_arg]);
    assert!(ok, "{again}");
    assert!(again.contains("nothing left"), "{again}");

    let (ok, out) = skiff(&["uninstall", "--data-dir", data_arg]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("removed {data_arg}")), "{out}");
    assert!(!data.exists());
}
