//! `skiff trace pod NAME [-n NS]`: a pod's lifecycle as the API server recorded it
//! (`GET /debug/trace/pods/{ns}/{name}`), printed as a timeline — every write with who made it,
//! every watch delivery with whose inbox it reached and through which selectors, the watches that
//! filtered the change out — with each step's time since the first and since the previous step,
//! then the startup breakdown the API server derived (see `skiff_apiserver::trace::stages` for
//! exactly how each stage is measured; a stage without a measure says why).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;

#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// A pod's timeline and startup breakdown.
    Pod(PodArgs),
}

#[derive(Debug, Args)]
pub struct PodArgs {
    /// The pod's name.
    pub name: String,

    /// The pod's namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,

    /// The kubeconfig to reach the API server with (default: $KUBECONFIG, ~/.kube/config,
    /// then /var/lib/skiff/kubeconfig.yaml).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
}

pub async fn run(cmd: TraceCommand) -> anyhow::Result<()> {
    let TraceCommand::Pod(args) = cmd;
    let path = kubeconfig_path(
        args.kubeconfig,
        std::env::var_os("KUBECONFIG"),
        std::env::var_os("HOME"),
        |p| p.exists(),
    );
    let client = kube::Client::try_from(super::kube_config(&path).await?)
        .context("building the API client")?;
    let request = http::Request::get(format!(
        "/debug/trace/pods/{}/{}",
        args.namespace, args.name
    ))
    .body(Vec::new())
    .context("building the request")?;
    let text = client
        .request_text(request)
        .await
        .with_context(|| format!("reading the trace of pod {}/{}", args.namespace, args.name))?;
    let doc: Value = serde_json::from_str(&text).context("decoding the trace")?;
    print!("{}", format(&doc));
    Ok(())
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

/// Where a step happens (its lane) and what it says.
fn step(e: &Value) -> (String, String) {
    match s(e, "kind") {
        "write" => {
            let client = &e["client"];
            let what = match (s(e, "resource"), s(e, "subresource")) {
                ("pods", "") => "pods".to_string(),
                ("pods", sub) => format!("pods/{sub}"),
                (resource, _) => format!("{resource} {}", s(e, "name")),
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

/// The timeline and the startup breakdown, as printed.
pub fn format(doc: &Value) -> String {
    let entries: Vec<&Value> = doc["entries"].as_array().into_iter().flatten().collect();
    let mut out = format!(
        "Pod {}/{}: {} steps",
        s(doc, "namespace"),
        s(doc, "name"),
        entries.len()
    );
    if let Some(n) = doc["dropped"].as_u64().filter(|n| *n > 0) {
        out.push_str(&format!(" ({n} older steps dropped)"));
    }
    out.push_str("\n\n      at ms     +ms  where                      what\n");
    let start = entries.first().and_then(|e| micros(e));
    let mut previous = start;
    for e in &entries {
        let t = micros(e);
        let rel = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (Some(a), Some(b)) => format!("{:.1}", (a - b) as f64 / 1000.0),
            _ => "?".into(),
        };
        let (lane, text) = step(e);
        out.push_str(&format!(
            "{:>11} {:>7}  {:<26} {text}\n",
            rel(t, start),
            rel(t, previous),
            lane
        ));
        previous = t;
    }
    out.push_str("\nStartup (as the API server saw it):\n");
    for stage in doc["stages"].as_array().into_iter().flatten() {
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
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn doc() -> Value {
        json!({"kind": "PodTrace", "namespace": "default", "name": "web", "dropped": 0,
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
        let text = format(&doc());
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
        let text = format(&doc());
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
}
