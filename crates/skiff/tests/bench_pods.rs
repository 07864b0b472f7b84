//! A smoke run of `skiff bench pods` at small sizes: it starts its API server, kubelet and
//! hollow nodes, and prints every result line with its peer. Figures are not asserted (they
//! belong in BENCHMARKS.md). Needs root (containerd, CNI): fails without it under `CI=true`,
//! skips loudly otherwise.

mod support;

#[test]
fn bench_pods_prints_each_result_with_its_peer_at_small_sizes() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !status.lines().any(|l| l.starts_with("Uid:\t0")) {
        return support::skip("not root (the bench runs containerd and CNI)");
    }
    let (stdout, lines) = support::bench(&[
        "pods",
        "--single-runs",
        "1",
        "--pods",
        "2",
        "--rss-pods",
        "3",
        "--hollow-nodes",
        "3",
        "--window-s",
        "1",
    ]);
    let find = |bench: &str, pods: u64| {
        lines
            .iter()
            .find(|l| l["bench"] == bench && (l["pods"] == pods || l["pods"].is_null()))
            .unwrap_or_else(|| panic!("no {bench} line for {pods} pods in {stdout}"))
    };
    for pods in [1, 2] {
        assert!(find("cri-floor", pods)["p50_ms"].as_f64().unwrap() > 0.0);
        let startup = find("pod-startup", pods);
        assert_eq!(startup["peer"], "cri-floor");
        assert!(startup["p50_ms"].as_f64().unwrap() > 0.0);
    }
    assert!(find("pod-startup", 2)["ratio_p99"].as_f64().is_some());
    assert!(find("kubelet-rss", 3)["rss_mb"].as_f64().unwrap() > 0.0);
    let hollow = find("hollow", 0);
    assert_eq!(hollow["nodes"], 3);
    assert!(hollow["rss_mb"].as_f64().unwrap() > 0.0);
    assert!(hollow["lease_writes_per_sec"].as_f64().is_some());
}
