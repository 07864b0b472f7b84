//! A smoke run of `skiff bench volumes` at tiny sizes: the hollow part always (claims bound
//! through `WaitForFirstConsumer` on hollow nodes, and pods/s with volumes against without),
//! the StatefulSet on real containerd only as root. Figures are not asserted (they belong in
//! BENCHMARKS.md).

mod support;

#[test]
fn bench_volumes_prints_each_result_with_its_peer_at_tiny_sizes() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status.lines().any(|l| l.starts_with("Uid:\t0"));
    let mut args = vec![
        "volumes",
        "--replicas",
        "2",
        "--claims",
        "10",
        "--hollow-nodes",
        "2",
    ];
    if !root {
        eprintln!("not root: the StatefulSet on containerd is left out");
        args.extend(["--only", "hollow"]);
    }
    let (stdout, lines) = support::bench(&args);
    let find = |bench: &str| {
        lines
            .iter()
            .filter(|l| l["bench"] == bench)
            .collect::<Vec<_>>()
    };
    let scheduling = find("volumes-scheduling");
    assert_eq!(scheduling.len(), 1, "{stdout}");
    assert_eq!(scheduling[0]["pods"], 10);
    assert_eq!(scheduling[0]["peer"], "no volumes");
    assert!(scheduling[0]["pods_per_sec"].as_f64().unwrap() > 0.0);
    assert!(scheduling[0]["ratio"].as_f64().is_some());
    let claims = find("volumes-claims");
    assert_eq!(claims.len(), 1, "{stdout}");
    assert!(claims[0]["claims_bound_per_sec"].as_f64().unwrap() > 0.0);
    let sets = find("volumes-statefulset");
    if root {
        let policies: Vec<&str> = sets.iter().map(|l| l["policy"].as_str().unwrap()).collect();
        assert_eq!(policies, ["OrderedReady", "Parallel"], "{stdout}");
        for set in sets {
            assert_eq!(set["peer"], "no claims");
            assert!(set["ready_s"].as_f64().unwrap() > 0.0);
            assert!(set["ratio"].as_f64().is_some());
        }
    } else {
        assert!(sets.is_empty(), "{stdout}");
    }
}
