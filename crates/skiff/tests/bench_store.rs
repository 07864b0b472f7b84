//! A smoke run of `skiff bench store` at small sizes against both gRPC backends (a `skiff store
//! serve` child and a real etcd from Debian's etcd-server, both started by the bench) with two
//! rounds of puts: every workload prints its line, and the rounds give a `put-ratio` line.
//! Figures are not asserted (they belong in BENCHMARKS.md).

mod support;

use serde_json::Value;

#[test]
fn bench_store_prints_every_workload_and_the_ratio_over_rounds() {
    let (stdout, lines) = support::bench(&[
        "store",
        "--backends",
        "embedded-grpc,etcd",
        "--writers",
        "2",
        "--seconds",
        "1",
        "--rounds",
        "2",
        "--range-keys",
        "100",
        "--history",
        "1000",
        "--watchers",
        "2",
    ]);
    let of = |bench: &str, backend: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["bench"] == bench && l["backend"] == backend)
            .collect()
    };
    for backend in ["embedded-grpc", "etcd"] {
        let puts = of("put", backend);
        let rounds: Vec<&Value> = puts.iter().map(|l| &l["round"]).collect();
        assert_eq!(rounds, [0, 1], "{stdout}");
        for put in puts {
            assert_eq!(put["writers"], 2);
            assert!(put["ops"].as_u64().unwrap() > 0, "{put}");
            assert!(put["p99_ms"].as_f64().unwrap() > 0.0, "{put}");
        }
        for bench in ["range", "put-during-compaction", "watch"] {
            assert_eq!(
                of(bench, backend).len(),
                1,
                "{bench} of {backend}: {stdout}"
            );
        }
    }
    // the second round runs the backends in the other order
    let order: Vec<&Value> = lines
        .iter()
        .filter(|l| l["bench"] == "put")
        .map(|l| &l["backend"])
        .collect();
    assert_eq!(order, ["embedded-grpc", "etcd", "etcd", "embedded-grpc"]);

    let ratio = of("put-ratio", "embedded-grpc/etcd");
    assert_eq!(ratio.len(), 1, "{stdout}");
    let ratio = ratio[0];
    assert_eq!(ratio["writers"], 2);
    assert_eq!(ratio["rounds"], 2);
    let ratios = ratio["ratios"].as_array().unwrap();
    assert_eq!(ratios.len(), 2);
    let ratios: Vec<f64> = ratios.iter().map(|r| r.as_f64().unwrap()).collect();
    assert!(ratios.iter().all(|&r| r > 0.0), "{ratio}");
    // the median of two is their mean (each rounded to two places)
    let median = ratio["ratio_median"].as_f64().unwrap();
    assert!(
        (median - (ratios[0] + ratios[1]) / 2.0).abs() <= 0.011,
        "{ratio}"
    );
    assert!(ratio["p99_ms_median"]["etcd"].as_f64().unwrap() > 0.0);
}
