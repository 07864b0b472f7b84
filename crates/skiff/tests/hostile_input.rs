//! The HTTP fuzzer's smoke run: `skiff fuzz http` sends the corpus (`fuzz/http`) and mutations
//! of it to a real `skiff apiserver` child while slowloris connections hang on, and must end
//! with `0 violations` (no 5xx, every handler's 4xx a `Status`, no panic, the server alive and
//! its memory bounded, every slowloris connection closed by the read-header timeout). The long
//! run is the same command with `--requests 100000` (BENCHMARKS.md).

use std::process::Command;

#[test]
fn hostile_http_finds_no_violation() {
    let out = Command::new(env!("CARGO_BIN_EXE_skiff"))
        .args([
            "fuzz",
            "http",
            "--requests",
            "1500",
            "--seed",
            "41",
            "--slow",
            "8",
        ])
        .output()
        .expect("run skiff fuzz http");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "skiff fuzz http failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().next().expect("a report line")).expect("JSON report");
    assert_eq!(report["requests"].as_u64(), Some(1500 + corpus_len()));
    assert_eq!(report["violations"], serde_json::json!([]), "{stdout}");
    let answered: u64 = report["answers_by_code"]
        .as_object()
        .expect("answers by code")
        .values()
        .filter_map(serde_json::Value::as_u64)
        .sum();
    assert!(answered > 1000, "most requests are answered: {stdout}");
    assert_eq!(stdout.lines().last(), Some("0 violations"), "{stdout}");
}

fn corpus_len() -> u64 {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/http");
    std::fs::read_dir(dir)
        .expect("the corpus")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "http"))
        })
        .count() as u64
}
