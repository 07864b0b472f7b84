//! `skiff trace KIND NAME [-n NS]`: an object's lifecycle as the API server recorded it
//! (`GET /debug/trace/{resource}/[{ns}/]{name}`), printed as a timeline — every write with who
//! made it, the requests made on its behalf, and for a pod every watch delivery with whose inbox
//! it reached and through which selectors and the watches that filtered the change out — with
//! each step's time since the first and since the previous step; then a pod's startup breakdown
//! (see `skiff_apiserver::trace::stages` for exactly how each stage is measured), and the
//! object's descendants as its controller chain recorded them (a Deployment's ReplicaSets and
//! their pods). `KIND` is resolved as kubectl resolves it, through discovery: a plural,
//! singular, kind or short name, optionally qualified by its group (`deployments.apps`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use serde_json::Value;

#[derive(Debug, Args)]
pub struct TraceCommand {
    /// The kind of object: `pod`, `deployment`, `deploy`, `hpa`, `widgets.example.com`, …
    pub kind: String,

    /// The object's name.
    pub name: String,

    /// The object's namespace (ignored for a cluster-scoped kind).
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,

    /// The kubeconfig to reach the API server with (default: $KUBECONFIG, ~/.kube/config,
    /// then /var/lib/skiff/kubeconfig.yaml).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

pub async fn run(args: TraceCommand) -> anyhow::Result<()> {
    let path = kubeconfig_path(
        args.kubeconfig,
        std::env::var_os("KUBECONFIG"),
        std::env::var_os("HOME"),
        |p| p.exists(),
    );
    let client = kube::Client::try_from(super::kube_config(&path).await?)
        .context("building the API client")?;
    let served = served(&client).await?;
    let kind = resolve(&served, &args.kind)
        .with_context(|| format!("the server doesn't have a resource type \"{}\"", args.kind))?;
    let resource = if kind.group.is_empty() {
        kind.plural.clone()
    } else {
        format!("{}.{}", kind.plural, kind.group)
    };
    let path = if kind.namespaced {
        format!("/debug/trace/{resource}/{}/{}", args.namespace, args.name)
    } else {
        format!("/debug/trace/{resource}/{}", args.name)
    };
    let request = http::Request::get(&path)
        .body(Vec::new())
        .context("building the request")?;
    let text = client
        .request_text(request)
        .await
        .with_context(|| format!("reading the trace of {} {}", kind.kind, args.name))?;
    let doc: Value = serde_json::from_str(&text).context("decoding the trace")?;
    print!("{}", format(&kind.kind, &doc));
    Ok(())
}

/// A resource type as discovery lists it.
#[derive(Debug, Clone, PartialEq)]
struct Served {
    group: String,
    plural: String,
    singular: String,
    kind: String,
    short_names: Vec<String>,
    namespaced: bool,
}

/// Every resource type the server lists, core first, each group at its preferred version. A
/// group whose list fails (an aggregated API that is down) is left out.
async fn served(client: &kube::Client) -> anyhow::Result<Vec<Served>> {
    let core = client
        .list_core_api_resources("v1")
        .await
        .context("reading the API's resource types")?;
    let mut lists = vec![(String::new(), core)];
    let groups = client
        .list_api_groups()
        .await
        .context("reading the API's groups")?;
    for group in groups.groups {
        let Some(version) = group
            .preferred_version
            .or_else(|| group.versions.first().cloned())
        else {
            continue;
        };
        if let Ok(list) = client
            .list_api_group_resources(&version.group_version)
            .await
        {
            lists.push((group.name, list));
        }
    }
    Ok(lists
        .into_iter()
        .flat_map(|(group, list)| {
            list.resources
                .into_iter()
                .filter(|r| !r.name.contains('/'))
                .map(move |r| Served {
                    group: group.clone(),
                    plural: r.name,
                    singular: r.singular_name,
                    kind: r.kind,
                    short_names: r.short_names.unwrap_or_default(),
                    namespaced: r.namespaced,
                })
        })
        .collect())
}

/// The type `arg` names, as kubectl finds it: a plural, singular, kind or short name,
/// optionally followed by `.group`; the first match in discovery order.
fn resolve<'a>(served: &'a [Served], arg: &str) -> Option<&'a Served> {
    let arg = arg.to_lowercase();
    let (name, group) = match arg.split_once('.') {
        Some((name, group)) => (name, Some(group)),
        None => (arg.as_str(), None),
    };
    served.iter().find(|s| {
        group.is_none_or(|g| s.group == g)
            && (s.plural == name
                || s.singular == name
                || s.kind.to_lowercase() == name
                || s.short_names.iter().any(|n| n == name))
    })
}

/// `--kubeconfig`, else the first of `$KUBECONFIG`, else `~/.kube/config` if it exists, else
/// the file `skiff server` writes.
fn kubeconfig_path(
    flag: Option<PathBuf>,
    env: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
    exists: impl Fn(&Path) -> bool,
) -> PathBuf {
    if let Some(p) = flag {
        return p;
    }
    if let Some(first) = env.as_ref().and_then(|e| std::env::split_paths(e).next())
        && !first.as_os_str().is_empty()
    {
        return first;
    }
    if let Some(home) = home {
        let p = Path::new(&home).join(".kube/config");
        if exists(&p) {
            return p;
        }
    }
    PathBuf::from("/var/lib/skiff/kubeconfig.yaml")
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn micros(v: &Value) -> Option<i64> {
    s(v, "time")
        .parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_microsecond())
}

/// Where a step of `doc`'s timeline happens (its lane) and what it says.
fn step(doc: &Value, e: &Value) -> (String, String) {
    match s(e, "kind") {
        "write" => {
            let client = &e["client"];
            let own = s(e, "resource") == s(doc, "resource") && s(e, "name") == s(doc, "name");
            let what = match (own, s(e, "resource"), s(e, "subresource")) {
                (true, resource, "") => resource.to_string(),
                (true, resource, sub) => format!("{resource}/{sub}"),
                (false, resource, _) => format!("{resource} {}", s(e, "name")),
            };
            let summary: Vec<&str> = e["summary"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            (
                s(client, "component").to_string(),
                format!(
                    "{} {what} rv={} by {}{}: {}",
                    s(e, "verb"),
                    e["resourceVersion"],
                    s(client, "user"),
                    agent(client),
                    summary.join(", ")
                ),
            )
        }
        "request" => {
            let client = &e["client"];
            (
                s(client, "component").to_string(),
                format!(
                    "{} {} → {} in {:.1} ms by {}{}",
                    s(e, "verb"),
                    s(e, "path"),
                    e["code"],
                    e["seconds"].as_f64().unwrap_or(0.0) * 1000.0,
                    s(client, "user"),
                    agent(client)
                ),
            )
        }
        "delivery" => {
            let w = &e["watch"];
            (
                format!("{} inbox", s(w, "component")),
                format!(
                    "{} rv={} delivered to the watch of {}{} {}",
                    s(e, "event"),
                    e["resourceVersion"],
                    s(w, "user"),
                    agent(w),
                    selectors(w)
                ),
            )
        }
        _ => {
            let watches: Vec<&Value> = e["watches"].as_array().into_iter().flatten().collect();
            let lanes: Vec<String> = watches
                .iter()
                .map(|w| format!("{} inbox", s(w, "component")))
                .collect();
            let who: Vec<String> = watches
                .iter()
                .map(|w| format!("{} {}", s(w, "user"), selectors(w)))
                .collect();
            let more = e["more"].as_u64().unwrap_or(0);
            let mut text = format!(
                "filtered out rv={}: not sent to {}",
                e["resourceVersion"],
                who.join(", ")
            );
            if more > 0 {
                text.push_str(&format!(" and {more} more"));
            }
            (lanes.join(", "), text)
        }
    }
}

/// ` (<user agent>)`, or nothing when the client sent none.
fn agent(client: &Value) -> String {
    match s(client, "userAgent") {
        "" => String::new(),
        ua => format!(" ({ua})"),
    }
}

fn selectors(w: &Value) -> String {
    let parts: Vec<String> = [("labelSelector", "labels"), ("fieldSelector", "fields")]
        .iter()
        .filter(|(k, _)| !s(w, k).is_empty())
        .map(|(k, name)| format!("{name}: {}", s(w, k)))
        .collect();
    if parts.is_empty() {
        "[all pods]".to_string()
    } else {
        format!("[{}]", parts.join("; "))
    }
}

/// Milliseconds from `b` to `a`, or `?` when either is unknown.
fn since(a: Option<i64>, b: Option<i64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.1}", (a - b) as f64 / 1000.0),
        _ => "?".into(),
    }
}

/// The timeline, a pod's startup breakdown and the descendants of `doc` (an object of `kind`),
/// as printed.
pub fn format(kind: &str, doc: &Value) -> String {
    let entries: Vec<&Value> = doc["entries"].as_array().into_iter().flatten().collect();
    let at = match s(doc, "namespace") {
        "" => s(doc, "name").to_string(),
        ns => format!("{ns}/{}", s(doc, "name")),
    };
    let mut out = format!("{kind} {at}: {} steps", entries.len());
    if let Some(n) = doc["dropped"].as_u64().filter(|n| *n > 0) {
        out.push_str(&format!(" ({n} older steps dropped)"));
    }
    out.push_str("\n\n      at ms     +ms  where                      what\n");
    let start = entries.first().and_then(|e| micros(e));
    let mut previous = start;
    for e in &entries {
        let t = micros(e);
        let (lane, text) = step(doc, e);
        out.push_str(&format!(
            "{:>11} {:>7}  {:<26} {text}\n",
            since(t, start),
            since(t, previous),
            lane
        ));
        previous = t;
    }
    if let Some(stages) = doc["stages"].as_array() {
        out.push_str("\nStartup (as the API server saw it):\n");
        for stage in stages {
            let ms = match stage["seconds"].as_f64() {
                Some(sec) => format!("{:.1} ms", sec * 1000.0),
                None => "—".to_string(),
            };
            out.push_str(&format!(
                "  {:<16} {:>10}  {}\n",
                s(stage, "name"),
                ms,
                s(stage, "note")
            ));
        }
    }
    let children = doc["children"].as_array().filter(|c| !c.is_empty());
    if let Some(children) = children {
        out.push_str("\nDescendants (as their controllers' writes recorded them):\n");
        descendants(&mut out, children, doc["moreChildren"].as_u64(), start, 1);
    }
    out
}

/// One line per descendant, indented by generation: where it is, how many steps were recorded,
/// when its last one was (ms after the traced object's first) and its last own write.
fn descendants(
    out: &mut String,
    children: &[Value],
    more: Option<u64>,
    start: Option<i64>,
    depth: usize,
) {
    let indent = "  ".repeat(depth);
    for c in children {
        let at = match s(c, "namespace") {
            "" => s(c, "name").to_string(),
            ns => format!("{ns}/{}", s(c, "name")),
        };
        let last = s(c, "last")
            .parse::<jiff::Timestamp>()
            .ok()
            .map(|t| t.as_microsecond());
        out.push_str(&format!(
            "{indent}{} {at}: {} steps, last at {} ms: {}\n",
            s(c, "resource"),
            c["steps"],
            since(last, start),
            s(c, "state")
        ));
        let grandchildren: Vec<Value> = c["children"].as_array().cloned().unwrap_or_default();
        descendants(
            out,
            &grandchildren,
            c["moreChildren"].as_u64(),
            start,
            depth + 1,
        );
    }
    if let Some(n) = more.filter(|n| *n > 0) {
        out.push_str(&format!("{indent}… and {n} more\n"));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn doc() -> Value {
        json!({"kind": "Trace", "resource": "pods", "namespace": "default", "name": "web", "dropped": 0,
          "entries": [
            {"seq": 1, "time": "2026-12-01T00:00:00.000Z", "kind": "write", "verb": "create",
             "resource": "pods", "name": "web", "subresource": "", "resourceVersion": 10,
             "summary": ["created"],
             "client": {"user": "admin", "userAgent": "kubectl/v1.33", "component": "kubectl"}},
            {"seq": 2, "time": "2026-12-01T00:00:00.0015Z", "kind": "delivery", "event": "ADDED",
             "resourceVersion": 10,
             "watch": {"user": "system:kube-scheduler", "userAgent": "skiff-scheduler",
                       "component": "scheduler", "labelSelector": "", "fieldSelector": ""}},
            {"seq": 3, "time": "2026-12-01T00:00:00.002Z", "kind": "filtered", "resourceVersion": 10,
             "more": 2,
             "watches": [{"user": "system:node:n1", "component": "kubelet n1",
                          "labelSelector": "", "fieldSelector": "spec.nodeName=n1"}]},
            {"seq": 4, "time": "2026-12-01T00:00:00.010Z", "kind": "write", "verb": "create",
             "resource": "pods", "name": "web", "subresource": "binding", "resourceVersion": 11,
             "summary": ["spec.nodeName=n1", "PodScheduled=True"],
             "client": {"user": "system:kube-scheduler", "userAgent": "skiff-scheduler",
                        "component": "scheduler"}}],
          "stages": [
            {"name": "queue_wait", "seconds": null, "note": "not reported by the scheduler"},
            {"name": "binding", "seconds": 0.0025, "note": "until the binding write"}]})
    }

    #[test]
    fn the_timeline_shows_each_step_with_its_lane_and_latencies() {
        let text = format("Pod", &doc());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Pod default/web: 4 steps");
        assert!(
            lines[3].contains("0.0")
                && lines[3].contains("kubectl")
                && lines[3].ends_with("create pods rv=10 by admin (kubectl/v1.33): created"),
            "{text}"
        );
        assert!(lines[4].contains("1.5") && lines[4].contains("scheduler inbox") && lines[4].contains("ADDED rv=10 delivered to the watch of system:kube-scheduler (skiff-scheduler) [all pods]"), "{text}");
        assert!(lines[5].contains("kubelet n1 inbox") && lines[5].contains("filtered out rv=10: not sent to system:node:n1 [fields: spec.nodeName=n1] and 2 more"), "{text}");
        assert!(lines[6].trim_start().starts_with("10.0     8.0"), "{text}");
        assert!(
            lines[6].contains("create pods/binding rv=11 by system:kube-scheduler"),
            "{text}"
        );
    }

    #[test]
    fn stages_without_a_measure_say_why() {
        let text = format("Pod", &doc());
        assert!(
            text.contains("queue_wait                —  not reported by the scheduler"),
            "{text}"
        );
        assert!(
            text.contains("binding              2.5 ms  until the binding write"),
            "{text}"
        );
    }

    #[test]
    fn the_kubeconfig_is_the_flag_then_kubeconfig_then_the_home_one_then_skiffs() {
        let flag = Some(PathBuf::from("/f"));
        assert_eq!(
            kubeconfig_path(flag, Some("/e".into()), None, |_| true),
            Path::new("/f")
        );
        assert_eq!(
            kubeconfig_path(None, Some("/e:/g".into()), Some("/h".into()), |_| true),
            Path::new("/e")
        );
        assert_eq!(
            kubeconfig_path(None, None, Some("/h".into()), |_| true),
            Path::new("/h/.kube/config")
        );
        assert_eq!(
            kubeconfig_path(None, None, Some("/h".into()), |_| false),
            Path::new("/var/lib/skiff/kubeconfig.yaml")
        );
    }

    #[test]
    fn another_kind_shows_its_requests_and_descendants_by_generation() {
        let doc = json!({"kind": "Trace", "resource": "deployments.apps", "namespace": "default",
          "name": "web", "dropped": 0, "moreChildren": 0,
          "entries": [
            {"seq": 1, "time": "2026-12-01T00:00:00.000Z", "kind": "write", "verb": "create",
             "resource": "deployments.apps", "name": "web", "subresource": "", "resourceVersion": 10,
             "summary": ["created"], "client": {"user": "admin", "component": "kubectl"}},
            {"seq": 2, "time": "2026-12-01T00:00:00.004Z", "kind": "write", "verb": "create",
             "resource": "replicasets.apps", "name": "web-1", "subresource": "", "resourceVersion": 11,
             "summary": ["ReplicaSet web-1 created"],
             "client": {"user": "system:serviceaccount:kube-system:deployment-controller",
                        "component": "deployment-controller"}},
            {"seq": 3, "time": "2026-12-01T00:00:00.010Z", "kind": "request", "verb": "get",
             "path": "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb",
             "code": 200, "seconds": 0.0031,
             "client": {"user": "system:serviceaccount:kube-system:horizontal-pod-autoscaler",
                        "component": "horizontal-pod-autoscaler"}}],
          "children": [{"resource": "replicasets.apps", "namespace": "default", "name": "web-1",
                        "steps": 4, "last": "2026-12-01T00:00:01.000Z", "state": "status.readyReplicas 0→1",
                        "moreChildren": 2,
                        "children": [{"resource": "pods", "namespace": "default", "name": "web-1-a",
                                      "steps": 0, "state": "(no timeline kept)", "children": []}]}]});
        let text = format("Deployment", &doc);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Deployment default/web: 3 steps");
        assert!(
            lines[3].ends_with("create deployments.apps rv=10 by admin: created"),
            "{text}"
        );
        assert!(lines[4].contains("deployment-controller") && lines[4].ends_with("create replicasets.apps web-1 rv=11 by system:serviceaccount:kube-system:deployment-controller: ReplicaSet web-1 created"), "{text}");
        assert!(lines[5].contains("horizontal-pod-autoscaler") && lines[5].contains("get /apis/metrics.k8s.io/v1beta1/namespaces/default/pods?labelSelector=app%3Dweb → 200 in 3.1 ms"), "{text}");
        assert!(!text.contains("Startup"), "only pods have stages:\n{text}");
        let tree = &text[text.find("Descendants").expect("descendants")..];
        let rows: Vec<&str> = tree.lines().skip(1).collect();
        assert_eq!(
            rows,
            [
                "  replicasets.apps default/web-1: 4 steps, last at 1000.0 ms: status.readyReplicas 0→1",
                "    pods default/web-1-a: 0 steps, last at ? ms: (no timeline kept)",
                "    … and 2 more",
            ]
        );
    }

    #[test]
    fn a_kind_is_found_as_kubectl_finds_it() {
        let served =
            |group: &str, plural: &str, singular: &str, kind: &str, short: &[&str]| Served {
                group: group.into(),
                plural: plural.into(),
                singular: singular.into(),
                kind: kind.into(),
                short_names: short.iter().map(|s| s.to_string()).collect(),
                namespaced: true,
            };
        let all = [
            served("", "events", "event", "Event", &["ev"]),
            served(
                "apps",
                "deployments",
                "deployment",
                "Deployment",
                &["deploy"],
            ),
            served("events.k8s.io", "events", "event", "Event", &["ev"]),
            served("example.com", "widgets", "widget", "Widget", &[]),
        ];
        for arg in [
            "deployments",
            "deployment",
            "Deployment",
            "deploy",
            "deployments.apps",
        ] {
            assert_eq!(
                resolve(&all, arg).map(|s| s.plural.as_str()),
                Some("deployments"),
                "{arg}"
            );
        }
        assert_eq!(resolve(&all, "ev").map(|s| s.group.as_str()), Some(""));
        assert_eq!(
            resolve(&all, "events.events.k8s.io").map(|s| s.group.as_str()),
            Some("events.k8s.io")
        );
        assert_eq!(
            resolve(&all, "widget").map(|s| s.group.as_str()),
            Some("example.com")
        );
        assert_eq!(resolve(&all, "deployments.example.com"), None);
        assert_eq!(resolve(&all, "gadgets"), None);
    }
}
