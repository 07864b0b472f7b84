use std::collections::HashMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;

fn user(name: &str, groups: &[&str]) -> UserInfo {
    UserInfo {
        name: name.into(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..Default::default()
    }
}

fn get_pods(namespace: &str) -> RequestInfo {
    RequestInfo {
        is_resource_request: true,
        verb: "get".into(),
        resource: "pods".into(),
        namespace: namespace.into(),
        ..Default::default()
    }
}

/// The bootstrap configuration as stored (uids added).
fn bootstrap() -> (Vec<Value>, Vec<Value>) {
    let c = crate::bootstrap::apf::configuration();
    let (mut levels, mut schemas) = (Vec::new(), Vec::new());
    for o in c.mandatory.iter().chain(&c.suggested) {
        let mut o = o.clone();
        o["metadata"]["uid"] = json!(format!("uid-{}", o["metadata"]["name"].as_str().unwrap()));
        if o["kind"] == "FlowSchema" {
            schemas.push(o);
        } else {
            levels.push(o);
        }
    }
    (levels, schemas)
}

fn classify(config: &Config, info: &RequestInfo, user: &UserInfo) -> (String, String) {
    let s = config.classify(info, user);
    (
        s.name.clone(),
        s.spec.priority_level_configuration.name.clone(),
    )
}

#[test]
fn the_bootstrap_configuration_classifies_as_upstreams() {
    let (levels, schemas) = bootstrap();
    let config = Config::build(1, &levels, &schemas, &Config::default(), 600);
    let pods = get_pods("default");
    let cases = [
        (user("admin", &["system:masters"]), "exempt", "exempt"),
        (
            user("system:node:n1", &["system:nodes", "system:authenticated"]),
            "system-nodes",
            "system",
        ),
        (
            user(
                "system:serviceaccount:default:app",
                &["system:serviceaccounts", "system:authenticated"],
            ),
            "service-accounts",
            "workload-low",
        ),
        (
            user("alice", &["system:authenticated"]),
            "global-default",
            "global-default",
        ),
        (
            user("system:anonymous", &["system:unauthenticated"]),
            "global-default",
            "global-default",
        ),
        // no one is in neither group; were one, catch-all would take them
        (user("nobody", &[]), "catch-all", "catch-all"),
    ];
    for (u, fs, pl) in cases {
        assert_eq!(
            classify(&config, &pods, &u),
            (fs.to_string(), pl.to_string()),
            "{}",
            u.name
        );
    }
    // the probes go exempt for everyone
    let healthz = RequestInfo {
        verb: "get".into(),
        path: "/healthz".into(),
        ..Default::default()
    };
    let anonymous = user("system:anonymous", &["system:unauthenticated"]);
    assert_eq!(classify(&config, &healthz, &anonymous).0, "probes");
    // nominal limits are the server's 600 seats by shares (exempt 0, catch-all 5 of 245)
    let nominal = |name: &str| config.levels[name].bounds.nominal;
    assert_eq!(nominal("workload-low"), 245);
    assert_eq!(nominal("global-default"), 49);
    assert_eq!(nominal("catch-all"), 13);
    assert_eq!(nominal("exempt"), 0);
    assert_eq!(config.levels["workload-low"].uid, "uid-workload-low");
    // workload-low lends 90% of its seats and may borrow up to the server's; it starts
    // having lent half of what it may
    let low = &config.levels["workload-low"];
    assert_eq!((low.bounds.lower, low.bounds.upper), (24, 845));
    assert_eq!(low.level.usage().limit, 135);
    // a request takes at most 15% of its level's nominal seats, and a hand's share
    let max_seats = |name: &str| config.levels[name].max_seats;
    assert_eq!(max_seats("workload-low"), 10);
    assert_eq!(max_seats("global-default"), 8);
    assert_eq!(max_seats("catch-all"), MAX_SEATS, "it does not queue");
}

#[test]
fn dangling_schemas_are_left_out_and_mandatory_objects_supplied() {
    let level = |name: &str, shares: u32| {
        json!({"kind": "PriorityLevelConfiguration", "metadata": {"name": name, "uid": name},
               "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": shares,
                        "limitResponse": {"type": "Reject"}}}})
    };
    let schema = |name: &str, level: &str, precedence: i32| {
        json!({"kind": "FlowSchema", "metadata": {"name": name, "uid": name},
               "spec": {"priorityLevelConfiguration": {"name": level},
                        "matchingPrecedence": precedence,
                        "rules": [{"subjects": [{"kind": "User", "user": {"name": "*"}}],
                                   "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                                      "resources": ["*"],
                                                      "namespaces": ["*"]}]}]}})
    };
    let config = Config::build(
        1,
        &[level("mine", 95)],
        &[
            schema("dangling", "nowhere", 10),
            schema("mine-b", "mine", 20),
            schema("mine-a", "mine", 20),
        ],
        &Config::default(),
        100,
    );
    let names: Vec<&str> = config.schemas.iter().map(|s| s.name.as_str()).collect();
    // exempt (1) first, the two of equal precedence by name, catch-all (10000) last
    assert_eq!(names, ["exempt", "mine-a", "mine-b", "catch-all"]);
    let alice = user("alice", &["system:authenticated"]);
    assert_eq!(classify(&config, &get_pods("ns"), &alice).0, "mine-a");
    assert_eq!(
        classify(&config, &get_pods("ns"), &user("x", &[])).0,
        "mine-a"
    );
    // shares 95 + catch-all's 5 (+ exempt's 0) of 100 seats
    assert_eq!(config.levels["mine"].level.usage().limit, 95);
    assert_eq!(config.levels["catch-all"].level.usage().limit, 5);
    // a rebuild keeps a level whose queuing did not change (its waiting requests with it);
    // its limit changes at the next rebalance
    let again = Config::build(2, &[level("mine", 45)], &[], &config, 100);
    assert_eq!(again.generation, 2);
    assert!(Arc::ptr_eq(
        &config.levels["mine"].level,
        &again.levels["mine"].level
    ));
    assert_eq!(again.levels["mine"].bounds.nominal, 90);
    assert_eq!(again.levels["mine"].level.usage().limit, 95);
    again.rebalance();
    assert_eq!(again.levels["mine"].level.usage().limit, 90);
}

#[tokio::test]
async fn an_idle_level_lends_its_seats_to_a_busy_one() {
    let (levels, schemas) = bootstrap();
    let config = Config::build(1, &levels, &schemas, &Config::default(), 600);
    let system = config.levels["system"].clone();
    // system: 74 nominal seats, lends a third, starts at 62; a hundred requests want one each
    assert_eq!(
        (
            system.bounds.nominal,
            system.bounds.lower,
            system.level.usage().limit
        ),
        (74, 50, 62)
    );
    let (started, mut starts) = tokio::sync::mpsc::unbounded_channel();
    for flow in 0..100u64 {
        let (level, started) = (system.level.clone(), started.clone());
        tokio::spawn(async move {
            let seats = level
                .admit(
                    flow.wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    1,
                    Duration::from_secs(600),
                )
                .await
                .unwrap();
            started.send(seats).unwrap();
        });
    }
    let mut held = Vec::new();
    while held.len() < 62 || system.level.usage().waiting < 38 {
        tokio::select! {
            Some(seats) = starts.recv() => held.push(seats),
            _ = tokio::task::yield_now() => {}
        }
    }
    assert_eq!(system.level.usage().executing, 62);

    let (adjustments, fair) = config.rebalance();
    let limit = |name: &str| {
        adjustments
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| a.limit)
            .unwrap()
    };
    // system borrows past its nominal limit, and every waiting request starts
    assert!(limit("system") > 100, "system got {}", limit("system"));
    while held.len() < 100 {
        held.push(starts.recv().await.unwrap());
    }
    assert_eq!(system.level.usage().waiting, 0);
    // the idle levels lent: each within its bounds, all together the nominal seats
    for (name, a) in &adjustments {
        let bounds = config.levels[*name].bounds;
        assert!(
            bounds.lower <= a.limit && a.limit <= bounds.upper,
            "{name}: {} outside {bounds:?}",
            a.limit
        );
        assert_eq!(config.levels[*name].level.usage().limit, a.limit);
    }
    assert!(limit("workload-low") < 245, "{}", limit("workload-low"));
    let sum: u32 = adjustments.iter().map(|(_, a)| a.limit).sum();
    let nominal: u32 = config.levels.values().map(|l| l.bounds.nominal).sum();
    assert!(sum.abs_diff(nominal) <= 4, "{sum} of {nominal}");
    assert!(fair > 1.0, "{fair}");
    let demand = &adjustments.iter().find(|(n, _)| *n == "system").unwrap().1;
    assert_eq!(demand.demand.high_watermark, 100.0);
}

#[test]
fn lists_take_a_seat_per_hundred_objects_they_read() {
    let list = |verb: &str, selector: &str| RequestInfo {
        is_resource_request: true,
        verb: verb.into(),
        resource: "pods".into(),
        label_selector: selector.into(),
        ..Default::default()
    };
    let q = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(seats(&get_pods("ns"), &q(&[]), || 100_000), 1);
    // from storage: twice what it returns
    assert_eq!(seats(&list("list", ""), &q(&[]), || 250), 5);
    assert_eq!(
        seats(&list("list", ""), &q(&[("limit", "100")]), || 5000),
        2
    );
    // with a selector: everything, and what it returns
    assert_eq!(
        seats(&list("list", "app=x"), &q(&[("limit", "100")]), || 500),
        6
    );
    // from the cache (a resourceVersion) and watches: what is stored
    assert_eq!(
        seats(&list("list", ""), &q(&[("resourceVersion", "0")]), || 450),
        5
    );
    assert_eq!(seats(&list("watch", ""), &q(&[]), || 30), 1);
    assert_eq!(seats(&list("list", ""), &q(&[]), || 1_000_000), MAX_SEATS);
    assert_eq!(seats(&list("list", ""), &q(&[]), || 0), 1);
}

#[test]
fn a_request_dropped_while_it_waits_counts_as_cancelled() {
    let (levels, schemas) = bootstrap();
    let config = Config::build(1, &levels, &schemas, &Config::default(), 600);
    let metrics = FlowMetrics::register(&crate::metrics::Metrics::default());
    let schema = config.classify(
        &get_pods("default"),
        &user("bob", &["system:authenticated"]),
    );
    let resolved = metrics.resolve(schema, "uid");
    assert_eq!(resolved.class.flow_schema, "global-default");

    Queued::new(&resolved, true).answered();
    assert_eq!((resolved.in_queue.get(), resolved.cancelled.get()), (0, 0));
    let waiting = Queued::new(&resolved, true);
    assert_eq!(resolved.in_queue.get(), 1);
    drop(waiting);
    assert_eq!((resolved.in_queue.get(), resolved.cancelled.get()), (0, 1));
    drop(Queued::new(&resolved, false));
    assert_eq!(
        (resolved.in_queue.get(), resolved.cancelled.get()),
        (0, 1),
        "an unqueued request is never counted"
    );
}
