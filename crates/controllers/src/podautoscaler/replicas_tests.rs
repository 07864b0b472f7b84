use super::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

/// A running pod, ready since long before, requesting `request` millicores.
fn running(name: &str, request: i64) -> PodInfo {
    PodInfo {
        name: name.into(),
        phase: "Running".into(),
        deleting: false,
        ready: Some((true, t(-3600))),
        start_time: Some(t(-3600)),
        request: Ok(request),
    }
}

fn metrics(values: &[(&str, i64)]) -> BTreeMap<String, Sample> {
    values
        .iter()
        .map(|(name, value)| {
            (
                name.to_string(),
                Sample {
                    value: *value,
                    timestamp: t(-5),
                    window: SignedDuration::from_secs(15),
                },
            )
        })
        .collect()
}

fn calc() -> Calculator {
    Calculator::default()
}

#[test]
fn ready_pods_scale_by_their_utilization_against_the_target() {
    let pods = [running("a", 500), running("b", 500)];
    // 900m of 1000m requested: 90% against 50%
    let p = calc()
        .resource_replicas(
            2,
            Target::Utilization(50),
            true,
            &pods,
            &metrics(&[("a", 400), ("b", 500)]),
            t(0),
        )
        .unwrap();
    assert_eq!(
        p,
        Proposal {
            replicas: 4,
            utilization: Some(90),
            average_value: 450
        }
    );
    // within the 10% tolerance: no change
    let p = calc()
        .resource_replicas(
            2,
            Target::Utilization(50),
            true,
            &pods,
            &metrics(&[("a", 260), ("b", 260)]),
            t(0),
        )
        .unwrap();
    assert_eq!((p.replicas, p.utilization), (2, Some(52)));
    // down: 10% of 50%
    let p = calc()
        .resource_replicas(
            2,
            Target::Utilization(50),
            true,
            &pods,
            &metrics(&[("a", 50), ("b", 50)]),
            t(0),
        )
        .unwrap();
    assert_eq!(p.replicas, 1);
}

#[test]
fn missing_pods_are_assumed_at_their_request_down_and_at_nothing_up() {
    let pods = [running("a", 1000), running("b", 1000), running("c", 1000)];
    // up: a and b at 100% against 50%, c missing
    let p = calc()
        .resource_replicas(
            3,
            Target::Utilization(50),
            true,
            &pods,
            &metrics(&[("a", 1000), ("b", 1000)]),
            t(0),
        )
        .unwrap();
    // first ratio 100/50 = 2; with c at 0: 2000/3000 = 66% → 1.32 → ceil(1.32 * 3) = 4
    assert_eq!((p.replicas, p.utilization), (4, Some(100)));
    // down: 10% measured; c assumed at 100% of its request: (100+100+1000)/3000 = 40% → 0.8 → 3
    let p = calc()
        .resource_replicas(
            3,
            Target::Utilization(50),
            true,
            &pods,
            &metrics(&[("a", 100), ("b", 100)]),
            t(0),
        )
        .unwrap();
    assert_eq!(p.replicas, 3);
}

#[test]
fn unready_and_starting_pods_do_not_count_toward_a_cpu_scale_up() {
    let mut pending = running("p", 1000);
    pending.phase = "Pending".into();
    let mut starting = running("s", 1000);
    // started a minute ago, ready for 10 s: its 15 s sample began before it was ready
    starting.start_time = Some(t(-60));
    starting.ready = Some((true, t(-10)));
    let mut failed = running("f", 1000);
    failed.phase = "Failed".into();
    let pods = [running("a", 1000), pending, starting, failed];
    let samples = metrics(&[("a", 2000), ("s", 2000), ("f", 5000)]);
    // a alone (f ignored, p pending, s unready) is at 200%, but with p and s at 0 the ratio
    // is 2000/3000: the direction would turn, so no change
    let p = calc()
        .resource_replicas(4, Target::Utilization(100), true, &pods, &samples, t(0))
        .unwrap();
    assert_eq!((p.replicas, p.utilization), (4, Some(200)));
    // memory is not held back by readiness: a and s count
    let p = calc()
        .resource_replicas(3, Target::Utilization(100), false, &pods, &samples, t(0))
        .unwrap();
    assert_eq!((p.replicas, p.utilization), (4, Some(200)));
}

#[test]
fn an_average_value_target_divides_the_pods_average_usage() {
    let pods = [running("a", 0), running("b", 0)];
    let p = calc()
        .resource_replicas(
            2,
            Target::AverageValue(100),
            true,
            &pods,
            &metrics(&[("a", 300), ("b", 100)]),
            t(0),
        )
        .unwrap();
    assert_eq!(
        p,
        Proposal {
            replicas: 4,
            utilization: None,
            average_value: 200
        }
    );
}

#[test]
fn errors_are_upstreams() {
    let calc = calc();
    let none = calc.resource_replicas(1, Target::Utilization(50), true, &[], &metrics(&[]), t(0));
    assert_eq!(
        none.unwrap_err(),
        "no pods returned by selector while calculating replica count"
    );
    let mut no_request = running("a", 0);
    no_request.request = Err("missing request for cpu in container c of Pod a".into());
    let e = calc
        .resource_replicas(
            1,
            Target::Utilization(50),
            true,
            &[no_request],
            &metrics(&[("a", 1)]),
            t(0),
        )
        .unwrap_err();
    assert_eq!(e, "missing request for cpu in container c of Pod a");
    let e = calc
        .resource_replicas(
            1,
            Target::Utilization(50),
            true,
            &[running("a", 100)],
            &metrics(&[]),
            t(0),
        )
        .unwrap_err();
    assert_eq!(
        e,
        "did not receive metrics for targeted pods (pods might be unready)"
    );
}

#[test]
fn one_value_against_a_value_target_scales_the_ready_pods_or_from_zero_the_ratio() {
    let mut pending = running("c", 100);
    pending.phase = "Pending".into();
    let pods = [running("a", 100), running("b", 100), pending];
    // 2.5 times the target on 2 ready pods (the pending one does not count)
    assert_eq!(calc().usage_ratio_replicas(3, 2.5, &pods), Ok(5));
    // within the tolerance: as is
    assert_eq!(calc().usage_ratio_replicas(3, 1.05, &pods), Ok(3));
    // from zero replicas: the ratio alone
    assert_eq!(calc().usage_ratio_replicas(0, 1.5, &[]), Ok(2));
    assert_eq!(
        calc().usage_ratio_replicas(3, 2.0, &[]),
        Err("unable to calculate ready pods: no pods returned by selector while calculating replica count".into())
    );
}

#[test]
fn one_value_against_an_average_target_gives_the_replicas_and_the_average_per_replica() {
    // 900 against 300 per replica on 2 replicas: 3, and 450 each now
    assert_eq!(calc().per_pod_replicas(2, 900, 300), (3, 450));
    // 610 against 300 on 2 replicas is within the tolerance: still 2
    assert_eq!(calc().per_pod_replicas(2, 610, 300), (2, 305));
}
