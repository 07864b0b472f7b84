//! Zone states, rates and the tainting queue, on tokio's paused clock.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;

fn labelled(labels: &[(&str, &str)]) -> Node {
    let mut n = Node::default();
    n.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    );
    n
}

/// Readiness of `ready` Ready and `not` not-Ready nodes.
fn nodes(ready: usize, not: usize) -> Vec<bool> {
    let mut v = vec![true; ready];
    v.extend(vec![false; not]);
    v
}

fn due(zones: &mut Zones) -> Vec<String> {
    let mut names: Vec<String> = zones.take_due().into_iter().map(|(_, n)| n).collect();
    names.sort();
    names
}

#[test]
fn a_zone_is_partially_disrupted_from_three_not_ready_nodes_and_the_threshold() {
    assert_eq!(zone_state(&nodes(1, 1), 0.55), (1, ZoneState::Normal));
    assert_eq!(
        zone_state(&nodes(1, 2), 0.55),
        (2, ZoneState::Normal),
        "two are not enough"
    );
    assert_eq!(
        zone_state(&nodes(2, 3), 0.55),
        (3, ZoneState::PartialDisruption)
    );
    assert_eq!(zone_state(&nodes(3, 3), 0.55), (3, ZoneState::Normal));
    assert_eq!(
        zone_state(&nodes(0, 1), 0.55),
        (1, ZoneState::FullDisruption)
    );
    assert_eq!(zone_state(&[], 0.55), (0, ZoneState::Normal));
}

#[test]
fn the_zone_key_is_region_and_zone_the_beta_labels_first() {
    assert_eq!(zone_key(&Node::default()), "");
    let n = labelled(&[
        ("topology.kubernetes.io/zone", "a"),
        ("topology.kubernetes.io/region", "r"),
    ]);
    assert_eq!(zone_key(&n), "r:\0:a");
    let n = labelled(&[
        ("topology.kubernetes.io/zone", "a"),
        ("failure-domain.beta.kubernetes.io/zone", "b"),
    ]);
    assert_eq!(zone_key(&n), ":\0:b");
    assert!(excluded(&labelled(&[(EXCLUDE_DISRUPTION, "")])));
}

#[tokio::test(start_paused = true)]
async fn a_healthy_zone_taints_one_node_every_ten_seconds() {
    let config = Config::default();
    let mut zones = Zones::default();
    let ready = HashMap::from([("".to_string(), nodes(10, 3))]);
    assert_eq!(
        zones.handle_disruption(&ready, &config),
        Transition::Unchanged
    );
    assert_eq!(zones.state(""), ZoneState::Normal);
    for n in ["a", "b", "c"] {
        zones.enqueue("", n, &config);
    }
    zones.enqueue("", "a", &config);
    assert_eq!(due(&mut zones), vec!["a"], "the burst is one");
    tokio::time::advance(Duration::from_secs(5)).await;
    assert!(due(&mut zones).is_empty());
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(due(&mut zones), vec!["b"]);
    zones.forget("c");
    tokio::time::advance(Duration::from_secs(10)).await;
    assert!(due(&mut zones).is_empty(), "a Ready node leaves the queue");
    assert!(!zones.waiting());
    zones.enqueue("", "a", &config);
    assert!(!zones.waiting(), "a tainted node is not queued again");
}

#[tokio::test(start_paused = true)]
async fn a_partially_disrupted_zone_slows_when_large_and_stops_when_small() {
    let config = Config::default();
    let mut zones = Zones::default();
    // 60 nodes, 40 not Ready: large, partially disrupted
    let ready = HashMap::from([
        ("big".to_string(), nodes(20, 40)),
        ("small".to_string(), nodes(2, 4)),
    ]);
    zones.handle_disruption(&ready, &config);
    assert_eq!(zones.state("big"), ZoneState::PartialDisruption);
    assert_eq!(zones.state("small"), ZoneState::PartialDisruption);
    for n in ["b1", "b2"] {
        zones.enqueue("big", n, &config);
    }
    zones.enqueue("small", "s1", &config);
    assert_eq!(due(&mut zones), vec!["b1"], "the new bucket starts full");
    tokio::time::advance(Duration::from_secs(50)).await;
    assert!(due(&mut zones).is_empty(), "0.01 per second");
    // (0.01 as an f32 is a hair under it)
    tokio::time::advance(Duration::from_secs(51)).await;
    assert_eq!(due(&mut zones), vec!["b2"]);
    tokio::time::advance(Duration::from_secs(1000)).await;
    assert!(due(&mut zones).is_empty(), "the small zone stopped");
    assert!(zones.waiting());
}

#[tokio::test(start_paused = true)]
async fn when_every_zone_is_down_nothing_is_tainted_until_a_node_is_ready_again() {
    let config = Config::default();
    let mut zones = Zones::default();
    let healthy = HashMap::from([
        ("a".to_string(), nodes(3, 0)),
        ("b".to_string(), nodes(3, 0)),
    ]);
    zones.handle_disruption(&healthy, &config);
    // one zone down, the other up: the down zone keeps the normal rate
    let one_down = HashMap::from([
        ("a".to_string(), nodes(0, 3)),
        ("b".to_string(), nodes(3, 0)),
    ]);
    assert_eq!(
        zones.handle_disruption(&one_down, &config),
        Transition::Unchanged
    );
    assert_eq!(zones.state("a"), ZoneState::FullDisruption);
    zones.enqueue("a", "a1", &config);
    assert_eq!(due(&mut zones), vec!["a1"]);
    // every zone down
    zones.enqueue("a", "a2", &config);
    let all_down = HashMap::from([
        ("a".to_string(), nodes(0, 3)),
        ("b".to_string(), nodes(0, 3)),
    ]);
    assert_eq!(
        zones.handle_disruption(&all_down, &config),
        Transition::EnteredFullDisruption
    );
    assert!(!zones.waiting(), "every queue emptied");
    assert_eq!(
        zones.handle_disruption(&all_down, &config),
        Transition::Unchanged
    );
    zones.enqueue("a", "a1", &config);
    zones.enqueue("b", "b1", &config);
    tokio::time::advance(Duration::from_secs(600)).await;
    assert!(due(&mut zones).is_empty(), "stopped");
    // one node back: the rates return, the buckets start empty
    let one_back = HashMap::from([
        ("a".to_string(), nodes(0, 3)),
        ("b".to_string(), nodes(1, 2)),
    ]);
    assert_eq!(
        zones.handle_disruption(&one_back, &config),
        Transition::LeftFullDisruption
    );
    assert_eq!(zones.state("a"), ZoneState::FullDisruption);
    assert_eq!(zones.state("b"), ZoneState::Normal);
    assert!(due(&mut zones).is_empty());
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(due(&mut zones), vec!["a1", "b1"]);
}

#[test]
fn a_zone_no_longer_seen_starts_again_from_initial() {
    let config = Config::default();
    let mut zones = Zones::default();
    zones.handle_disruption(&HashMap::from([("a".to_string(), nodes(2, 0))]), &config);
    assert_eq!(zones.state("a"), ZoneState::Normal);
    zones.handle_disruption(&HashMap::from([("b".to_string(), nodes(2, 0))]), &config);
    assert_eq!(zones.state("a"), ZoneState::Initial);
    assert_eq!(
        zones.handle_disruption(&HashMap::new(), &config),
        Transition::Unchanged,
        "no nodes, no disruption"
    );
}
