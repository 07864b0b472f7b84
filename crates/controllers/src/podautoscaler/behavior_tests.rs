use super::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn defaults() -> Behavior {
    Behavior::defaults(SignedDuration::from_mins(5))
}

#[test]
fn a_scale_down_waits_for_the_highest_recommendation_of_its_window() {
    let behavior = defaults();
    let mut h = History::default();
    // recommendations of 8 then 3 while at 8: held at 8 until the 8 leaves the 5 min window
    let d = normalize(&mut h, &behavior, (8, 8), (1, 10), t(0));
    assert_eq!(d.replicas, 8);
    assert_eq!(d.able_to_scale.1, "ReadyForNewScale");
    let d = normalize(&mut h, &behavior, (8, 3), (1, 10), t(60));
    assert_eq!(
        (d.replicas, d.able_to_scale),
        (
            8,
            (
                true,
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation"
            )
        )
    );
    assert!(!d.scaling_limited.0);
    let d = normalize(&mut h, &behavior, (8, 3), (1, 10), t(301));
    assert_eq!((d.replicas, d.able_to_scale.1), (3, "ReadyForNewScale"));
    assert_eq!(
        d.scaling_limited,
        (
            false,
            "DesiredWithinRange",
            "the desired count is within the acceptable range"
        )
    );
}

#[test]
fn a_scale_up_is_limited_by_the_larger_of_100_percent_and_4_pods_per_period() {
    let behavior = defaults();
    let mut h = History::default();
    // from 1: 4 pods beat 100% (2)
    let d = normalize(&mut h, &behavior, (1, 20), (1, 30), t(0));
    assert_eq!(
        (d.replicas, d.scaling_limited),
        (
            5,
            (
                true,
                "ScaleUpLimit",
                "the desired replica count is increasing faster than the maximum scale rate"
            )
        )
    );
    record_scale(&mut h, &behavior, 1, 5, t(0));
    // within the same 15 s period the count started at 1: still at most 5
    let d = normalize(&mut h, &behavior, (5, 20), (1, 30), t(10));
    assert_eq!(d.replicas, 5);
    // a period later, from 5: 100% (10) beats 4 pods (9)
    let d = normalize(&mut h, &behavior, (5, 20), (1, 30), t(16));
    assert_eq!(d.replicas, 10);
    // the maximum, when it is the tighter bound
    let d = normalize(&mut h, &behavior, (5, 20), (1, 8), t(16));
    assert_eq!((d.replicas, d.scaling_limited.1), (8, "TooManyReplicas"));
}

#[test]
fn policies_combine_as_select_policy_says_and_disabled_stops_a_direction() {
    let period = SignedDuration::from_secs(60);
    let rules = |select| Rules {
        window: SignedDuration::ZERO,
        select,
        policies: vec![
            Policy::Pods { value: 1, period },
            Policy::Percent { value: 50, period },
        ],
    };
    let behavior = |select| Behavior {
        up: rules(select),
        down: rules(select),
    };
    let mut h = History::default();
    // down from 10: 1 pod (9) or 50% (5); Max takes the larger change
    let d = normalize(&mut h, &behavior(Select::Max), (10, 1), (1, 20), t(0));
    assert_eq!((d.replicas, d.scaling_limited.1), (5, "ScaleDownLimit"));
    let mut h = History::default();
    let d = normalize(&mut h, &behavior(Select::Min), (10, 1), (1, 20), t(0));
    assert_eq!(d.replicas, 9);
    let mut h = History::default();
    let d = normalize(&mut h, &behavior(Select::Disabled), (10, 1), (1, 20), t(0));
    assert_eq!(d.replicas, 10);
    // the minimum, when it is the tighter bound
    let mut h = History::default();
    let d = normalize(&mut h, &behavior(Select::Max), (10, 1), (7, 20), t(0));
    assert_eq!(
        (d.replicas, d.scaling_limited),
        (
            7,
            (
                true,
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count"
            )
        )
    );
    // replicas removed in the period count: from 10 to 9 already, 1 pod more leaves 8
    let mut h = History::default();
    record_scale(&mut h, &behavior(Select::Min), 10, 9, t(0));
    let d = normalize(&mut h, &behavior(Select::Min), (9, 1), (1, 20), t(30));
    assert_eq!(d.replicas, 9);
    let d = normalize(&mut h, &behavior(Select::Min), (9, 1), (1, 20), t(61));
    assert_eq!(d.replicas, 8);
}

#[test]
fn a_scale_up_window_takes_the_lowest_recent_recommendation() {
    let mut behavior = defaults();
    behavior.up.window = SignedDuration::from_secs(60);
    let mut h = History::default();
    normalize(&mut h, &behavior, (2, 3), (1, 10), t(0));
    let d = normalize(&mut h, &behavior, (2, 6), (1, 10), t(30));
    assert_eq!((d.replicas, d.able_to_scale.1), (3, "ScaleUpStabilized"));
    let d = normalize(&mut h, &behavior, (3, 6), (1, 10), t(91));
    assert_eq!(d.replicas, 6);
}
