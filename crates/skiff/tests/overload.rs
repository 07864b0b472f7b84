//! Overload protection against a real `skiff apiserver`.
//!
//! API Priority and Fairness: a FlowSchema sends one user's requests to a priority level of
//! one seat and one queue of one; with a create holding the seat, the next request waits in
//! the queue and the one after is refused (429, `Retry-After`, the `X-Kubernetes-PF-*`
//! headers, the rejection counted); a FlowSchema naming a missing level is `Dangling`.
//!
//! With APF off, the in-flight limits of 1: a create
//! whose body stops half-way holds the one mutating slot for as long as the test wants (no
//! timing), so the next mutating request is refused with upstream's 429 and `Retry-After: 1`,
//! while masters, reads and watches still get through; a request past its deadline
//! (`--request-timeout`, or its own shorter `timeout=`) gets upstream's 504. A server told to
//! stop ends its open watches cleanly rather than leaving them for its clients to close.

mod support;

use http::Request;
use http_body_util::BodyExt;
use hyper::body::Frame;
use serde_json::Value;
use support::https::{self, Client};
use support::{ApiServer, Backend};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

fn configmap(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"k":"v"}}}}"#
    )
}

fn post(path: &str, len: usize, body: https::Body) -> Request<https::Body> {
    Request::post(path)
        .header("host", "127.0.0.1")
        .header("content-type", "application/json")
        .header("content-length", len)
        .body(body)
        .expect("a request")
}

fn get(path: &str) -> Request<https::Body> {
    Request::get(path)
        .header("host", "127.0.0.1")
        .body(https::body(""))
        .expect("a request")
}

fn status(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: not a Status: {body}"))
}

/// The held configmap `held`: its body is sent up to its first 20 bytes.
const HELD: &str =
    r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"held"},"data":{"k":"v"}}"#;

#[test]
fn past_the_in_flight_limit_requests_get_429_but_masters_reads_and_watches_do_not() {
    let api = ApiServer::start_with(
        Backend::Embedded,
        &[
            "--enable-priority-and-fairness=false",
            "--max-mutating-requests-inflight",
            "1",
            "--max-requests-inflight",
            "1",
        ],
    );
    let admin = Client::new(&api, "admin", Some("system:masters"));
    let alice = Client::new(&api, "alice", None);
    support::run(async {
        let (rest, body) = https::held_body(&HELD.as_bytes()[..20]);
        let held = tokio::spawn({
            let admin = admin.clone();
            async move { https::text(admin.send(post(CONFIGMAPS, HELD.len(), body)).await).await }
        });
        // the held create has the slot once upstream's in-flight gauge says so (reads have
        // their own pool, and masters are never refused)
        support::eventually("the held create in flight", || {
            let admin = admin.clone();
            async move {
                let (_, metrics) = https::text(admin.send(get("/metrics")).await).await;
                metrics
                    .contains(r#"apiserver_current_inflight_requests{request_kind="mutating"} 1"#)
                    .then_some(())
            }
        })
        .await;
        // from then on alice is refused for load, before authorization, as upstream
        let cm = configmap("from-alice");
        let resp = alice
            .send(post(CONFIGMAPS, cm.len(), https::body(cm)))
            .await;
        let retry_after = resp
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let audit_id = resp.headers().contains_key("audit-id");
        let (code, body) = https::text(resp).await;
        assert_eq!(code, 429, "{body}");
        assert_eq!(retry_after.as_deref(), Some("1"));
        assert!(audit_id, "every response carries an Audit-Id");
        let s = status(&body);
        assert_eq!(s["kind"], "Status");
        assert_eq!(s["reason"], "TooManyRequests");
        assert_eq!(s["code"], 429);
        assert_eq!(s["message"], "Too many requests, please try again later.");

        // a member of system:masters always gets an answer
        let cm = configmap("from-admin");
        let (code, body) = https::text(
            admin
                .send(post(CONFIGMAPS, cm.len(), https::body(cm)))
                .await,
        )
        .await;
        assert_eq!(code, 201, "{body}");

        // a watch is long-running: it does not take the one read-only slot
        let watch = admin.send(get(&format!("{CONFIGMAPS}?watch=true"))).await;
        assert_eq!(watch.status(), 200);
        let (code, body) = https::text(alice.send(get(CONFIGMAPS)).await).await;
        assert_eq!(
            code, 403,
            "a read is not refused for load while a watch runs: {body}"
        );
        drop(watch);

        // the held create completes once its body does, and frees the slot
        rest.unbounded_send(Ok(Frame::data(bytes::Bytes::from_static(
            &HELD.as_bytes()[20..],
        ))))
        .expect("the held body is open");
        drop(rest);
        let (code, body) = held.await.expect("the held request");
        assert_eq!(code, 201, "{body}");
        let cm = configmap("from-alice");
        let (code, _) = https::text(
            alice
                .send(post(CONFIGMAPS, cm.len(), https::body(cm)))
                .await,
        )
        .await;
        assert_eq!(code, 403);
    });
}

/// The value of a response header.
fn header(resp: &http::Response<hyper::body::Incoming>, name: &str) -> String {
    resp.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

const FLOWCONTROL: &str = "/apis/flowcontrol.apiserver.k8s.io/v1";

#[test]
fn priority_and_fairness_queues_then_refuses_a_flow_past_its_level() {
    // 1 + 1 seats: a level of one share gets one
    let api = ApiServer::start_with(
        Backend::Embedded,
        &[
            "--max-mutating-requests-inflight",
            "1",
            "--max-requests-inflight",
            "1",
        ],
    );
    let admin = Client::new(&api, "admin", Some("system:masters"));
    let bob = Client::new(&api, "bob", None);
    support::run(async {
        let create = |path: String, body: Value| {
            let admin = admin.clone();
            async move {
                let body = body.to_string();
                let (code, body) =
                    https::text(admin.send(post(&path, body.len(), https::body(body))).await).await;
                assert_eq!(code, 201, "{body}");
                status(&body)["metadata"]["uid"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
        };
        let level = |name: &str| {
            serde_json::json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                "kind": "PriorityLevelConfiguration", "metadata": {"name": name},
                "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1,
                    "borrowingLimitPercent": 0,
                    "limitResponse": {"type": "Queue", "queuing":
                        {"queues": 1, "handSize": 1, "queueLengthLimit": 1}}}}})
        };
        let schema = |name: &str, level: &str, user: &str| {
            serde_json::json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1",
                "kind": "FlowSchema", "metadata": {"name": name},
                "spec": {"priorityLevelConfiguration": {"name": level},
                    "matchingPrecedence": 100, "distinguisherMethod": {"type": "ByUser"},
                    "rules": [{"subjects": [{"kind": "User", "user": {"name": user}}],
                        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                            "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
                        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}})
        };
        let tight = create(
            format!("{FLOWCONTROL}/prioritylevelconfigurations"),
            level("tight"),
        )
        .await;
        // bob may do anything, and is not exempt (not in system:masters)
        create(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings".into(),
            serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding", "metadata": {"name": "bob-admin"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": "cluster-admin"},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                              "name": "bob"}]}),
        )
        .await;
        let a_bob = create(
            format!("{FLOWCONTROL}/flowschemas"),
            schema("a-bob", "tight", "bob"),
        )
        .await;

        // an invalid FlowSchema is refused with upstream's 422
        let invalid = schema("z", "tight", "bob").to_string().replace(
            r#""matchingPrecedence":100"#,
            r#""matchingPrecedence":20000"#,
        );
        let (code, body) = https::text(
            admin
                .send(post(
                    &format!("{FLOWCONTROL}/flowschemas"),
                    invalid.len(),
                    https::body(invalid),
                ))
                .await,
        )
        .await;
        assert_eq!(code, 422, "{body}");
        assert_eq!(
            status(&body)["message"],
            r#"FlowSchema.flowcontrol.apiserver.k8s.io "z" is invalid: spec.matchingPrecedence: Invalid value: 20000: must not be greater than 10000"#
        );

        // once the configuration is in use, bob's responses say where he was classified
        support::eventually("bob classified as a-bob", || {
            let bob = bob.clone();
            let a_bob = a_bob.clone();
            async move {
                let resp = bob.send(get(CONFIGMAPS)).await;
                (header(&resp, "x-kubernetes-pf-flowschema-uid") == a_bob).then_some(())
            }
        })
        .await;
        let resp = bob.send(get(CONFIGMAPS)).await;
        assert_eq!(header(&resp, "x-kubernetes-pf-prioritylevel-uid"), tight);
        let resp = admin.send(get(CONFIGMAPS)).await;
        let (_, exempt) = https::text(
            admin
                .send(get(&format!("{FLOWCONTROL}/flowschemas/exempt")))
                .await,
        )
        .await;
        assert_eq!(
            header(&resp, "x-kubernetes-pf-flowschema-uid"),
            status(&exempt)["metadata"]["uid"].as_str().unwrap()
        );

        // a create whose body stops half-way holds tight's one seat
        let (rest, body) = https::held_body(&HELD.as_bytes()[..20]);
        let held = tokio::spawn({
            let bob = bob.clone();
            async move { https::text(bob.send(post(CONFIGMAPS, HELD.len(), body)).await).await }
        });
        let metric = |text: &'static str| {
            let admin = admin.clone();
            move || {
                let admin = admin.clone();
                async move {
                    let (_, metrics) = https::text(admin.send(get("/metrics")).await).await;
                    metrics.contains(text).then_some(())
                }
            }
        };
        support::eventually(
            "the held create executing",
            metric(r#"apiserver_flowcontrol_current_executing_requests{flow_schema="a-bob",priority_level="tight"} 1"#),
        )
        .await;
        // the next request waits in the one queue
        let queued = tokio::spawn({
            let bob = bob.clone();
            async move { https::text(bob.send(get(CONFIGMAPS)).await).await }
        });
        support::eventually(
            "a request in the queue",
            metric(r#"apiserver_flowcontrol_current_inqueue_requests{flow_schema="a-bob",priority_level="tight"} 1"#),
        )
        .await;
        // and the one after finds the queue full
        let resp = bob.send(get(CONFIGMAPS)).await;
        assert_eq!(header(&resp, "retry-after"), "1");
        assert_eq!(header(&resp, "x-kubernetes-pf-flowschema-uid"), a_bob);
        assert_eq!(header(&resp, "x-kubernetes-pf-prioritylevel-uid"), tight);
        let (code, body) = https::text(resp).await;
        assert_eq!(code, 429, "{body}");
        let s = status(&body);
        assert_eq!(s["reason"], "TooManyRequests");
        assert_eq!(s["message"], "Too many requests, please try again later.");
        assert_eq!(s["details"]["retryAfterSeconds"], 1);

        // the held create finishes, and the queued request runs
        rest.unbounded_send(Ok(Frame::data(bytes::Bytes::from_static(
            &HELD.as_bytes()[20..],
        ))))
        .expect("the held body is open");
        drop(rest);
        let (code, body) = held.await.expect("the held request");
        assert_eq!(code, 201, "{body}");
        let (code, body) = queued.await.expect("the queued request");
        assert_eq!(code, 200, "{body}");
        let (_, metrics) = https::text(admin.send(get("/metrics")).await).await;
        assert!(
            metrics.contains(r#"apiserver_flowcontrol_rejected_requests_total{flow_schema="a-bob",priority_level="tight",reason="queue-full"} 1"#),
            "{metrics}"
        );
        // tight neither lends nor borrows: its limit stays its one nominal seat
        for gauge in ["nominal", "lower", "upper", "current"] {
            let line =
                format!(r#"apiserver_flowcontrol_{gauge}_limit_seats{{priority_level="tight"}} 1"#);
            assert!(metrics.contains(&line), "{line}\n{metrics}");
        }

        // a FlowSchema naming a missing level is Dangling until the level exists
        create(
            format!("{FLOWCONTROL}/flowschemas"),
            schema("lost", "nowhere", "carol"),
        )
        .await;
        let dangling = |want: &'static str, reason: &'static str, message: &'static str| {
            let admin = admin.clone();
            move || {
                let admin = admin.clone();
                async move {
                    let (_, body) = https::text(
                        admin
                            .send(get(&format!("{FLOWCONTROL}/flowschemas/lost")))
                            .await,
                    )
                    .await;
                    let fs = status(&body);
                    let c = fs["status"]["conditions"]
                        .as_array()?
                        .iter()
                        .find(|c| c["type"] == "Dangling")?
                        .clone();
                    (c["status"] == want && c["reason"] == reason && c["message"] == message)
                        .then_some(())
                }
            }
        };
        support::eventually(
            "lost is Dangling",
            dangling(
                "True",
                "NotFound",
                r#"This FlowSchema references the PriorityLevelConfiguration object named "nowhere" but there is no such object"#,
            ),
        )
        .await;
        create(
            format!("{FLOWCONTROL}/prioritylevelconfigurations"),
            level("nowhere"),
        )
        .await;
        support::eventually(
            "lost is no longer Dangling",
            dangling(
                "False",
                "Found",
                r#"This FlowSchema references the PriorityLevelConfiguration object named "nowhere" and it exists"#,
            ),
        )
        .await;
    });
}

#[test]
fn a_request_past_its_timeout_gets_504_and_a_bad_timeout_400() {
    let api = ApiServer::start_with(Backend::Embedded, &["--request-timeout", "2s"]);
    let admin = Client::new(&api, "admin", Some("system:masters"));
    support::run(async {
        // the body never completes: the handler waits for it until the deadline, the request's
        // own `timeout=` when shorter than --request-timeout, else the server's
        for query in ["?timeout=1s", "", "?timeout=1h"] {
            let (rest, body) = https::held_body(&HELD.as_bytes()[..20]);
            let resp = admin
                .send(post(&format!("{CONFIGMAPS}{query}"), HELD.len(), body))
                .await;
            let (code, body) = https::text(resp).await;
            drop(rest);
            assert_eq!(code, 504, "{query}: {body}");
            let s = status(&body);
            assert_eq!(s["reason"], "Timeout");
            assert_eq!(
                s["message"],
                "Timeout: request did not complete within requested timeout - context deadline exceeded"
            );
        }
        let (code, body) =
            https::text(admin.send(get(&format!("{CONFIGMAPS}?timeout=soon"))).await).await;
        assert_eq!(code, 400, "{body}");
        assert!(
            status(&body)["message"]
                .as_str()
                .unwrap()
                .starts_with("invalid timeout specified in the request URL"),
            "{body}"
        );
        // the timed-out create stored nothing
        let (code, _) = https::text(admin.send(get(&format!("{CONFIGMAPS}/held"))).await).await;
        assert_eq!(code, 404);
    });
}

#[test]
fn a_stopping_server_ends_its_watches_cleanly_and_exits_0() {
    let mut api = ApiServer::start(Backend::Embedded);
    let admin = Client::new(&api, "admin", Some("system:masters"));
    support::run(async {
        let watch = admin.send(get(&format!("{CONFIGMAPS}?watch=true"))).await;
        assert_eq!(watch.status(), 200);
        let code = tokio::task::block_in_place(|| api.terminate());
        assert_eq!(code, Some(0), "{}", api.log());
        // the body ends with its last chunk: no reset, no truncation
        let body = watch.into_body().collect().await;
        assert!(body.is_ok(), "the watch was cut off: {body:?}");
    });
}
