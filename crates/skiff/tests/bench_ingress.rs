//! A smoke run of `skiff bench ingress` at small sizes: it starts its API server, kubelet,
//! backend pod, `skiff ingress` and nginx, and prints every result line with its peer. Figures
//! are not asserted (they belong in BENCHMARKS.md). Needs root (containerd, CNI) and nginx:
//! fails without them under `CI=true`, skips loudly otherwise.

mod support;

#[test]
fn bench_ingress_prints_skiff_against_nginx_and_the_new_rule_time() {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if !status.lines().any(|l| l.starts_with("Uid:\t0")) {
        return support::skip("not root (the bench runs containerd and CNI)");
    }
    let nginx = std::process::Command::new("sh")
        .args(["-c", "command -v nginx"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !nginx {
        return support::skip("nginx is not installed (apt-get install nginx)");
    }
    let (stdout, lines) = support::bench(&[
        "ingress",
        "--connections",
        "4",
        "--seconds",
        "1",
        "--rule-runs",
        "1",
    ]);
    let find = |bench: &str, proxy: Option<&str>| {
        lines
            .iter()
            .find(|l| l["bench"] == bench && proxy.is_none_or(|p| l["proxy"] == p))
            .unwrap_or_else(|| panic!("no {bench} line for {proxy:?} in {stdout}"))
    };
    for proxy in ["direct", "nginx", "skiff"] {
        let line = find("ingress-rps", Some(proxy));
        assert!(line["rps"].as_f64().unwrap() > 0.0, "{line}");
        assert!(line["p99_ms"].as_f64().unwrap() > 0.0, "{line}");
    }
    let ours = find("ingress-rps", Some("skiff"));
    assert_eq!(ours["peer"], "nginx");
    assert!(ours["ratio_rps"].as_f64().is_some(), "{ours}");
    let rule = find("ingress-new-rule", None);
    assert_eq!(rule["runs"], 1);
    assert!(rule["p50_ms"].as_f64().unwrap() > 0.0, "{rule}");
}
