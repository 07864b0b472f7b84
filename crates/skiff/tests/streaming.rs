//! `kubectl logs`, `exec`, `attach` and `port-forward` against a real `skiff apiserver` and a
//! real `skiff kubelet` with the containerd it manages, with the oldest and the newest kubectl
//! installed (1.27 speaks SPDY; 1.33 tries WebSocket first and falls back): logs show a
//! container's output, `--tail` keeps the last lines, `-f` follows lines written afterwards;
//! exec returns a command's output and exit code, and with `-i` feeds it stdin; attach shows
//! what the container writes; port-forward reaches a server in the pod. kube-rs's WebSocket
//! exec works too, and the API server's container checks answer as upstream. Needs root (containerd, CNI); skips otherwise.

mod support;

use std::io::{Read, Write};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{AttachParams, LogParams, PostParams};
use serde_json::json;
use support::node::{KubeletProcess, unsupported};
use support::{
    ApiServer, Backend, KUBECTL_127, KUBECTL_133, eventually, expect_line, kube_client, run,
};
use tokio::io::AsyncReadExt;

const NODE: &str = "streaming-e2e";

/// A pod whose `talk` container writes three lines, a fourth once /tmp/go appears and then,
/// once /tmp/go2 appears, `five` again and again (an attach sees it whenever it connects); its
/// `web` container serves /etc over HTTP on 8080.
async fn create_talker(pods: &Api<Pod>, name: &str) {
    let script = "echo one; echo two; echo three; \
                  until [ -e /tmp/go ]; do sleep 0.2; done; echo four; \
                  until [ -e /tmp/go2 ]; do sleep 0.2; done; \
                  while true; do echo five; sleep 0.2; done";
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {"name": "talk", "image": "busybox", "command": ["sh", "-c", script]},
                {"name": "web", "image": "busybox",
                 "command": ["httpd", "-f", "-p", "8080", "-h", "/etc"]},
            ],
        },
    });
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(pod).unwrap(),
    )
    .await
    .expect("create the pod");
    eventually("the pod running", || async {
        let pod = pods.get(name).await.ok()?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
}

/// `GET /hostname` through a forwarded local port.
fn http_get_hostname(port: u16) -> String {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    conn.set_read_timeout(Some(support::HANG_GUARD)).unwrap();
    conn.write_all(b"GET /hostname HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("read the answer");
    answer
}

/// Logs, exec, attach and port-forward of one pod with one kubectl.
fn exercise(api: &ApiServer, kubectl: &str, pod: &str) {
    // logs: the whole output, then the last line
    let logs = api.kubectl(kubectl, &["logs", pod, "-c", "talk"]);
    assert_eq!(logs, "one\ntwo\nthree\n");
    let tail = api.kubectl(kubectl, &["logs", pod, "-c", "talk", "--tail", "1"]);
    assert_eq!(tail, "three\n");

    // logs -f: a line written after the follow started arrives on it
    let (mut follow, lines) = api.kubectl_stream(kubectl, &["logs", "-f", pod, "-c", "talk"]);
    expect_line(&lines, |l| l == "three");
    api.kubectl(
        kubectl,
        &["exec", pod, "-c", "talk", "--", "touch", "/tmp/go"],
    );
    expect_line(&lines, |l| l == "four");
    let _ = follow.kill();
    let _ = follow.wait();

    // attach: what the container writes while attached
    api.kubectl(
        kubectl,
        &["exec", pod, "-c", "talk", "--", "touch", "/tmp/go2"],
    );
    let (mut attach, attached) = api.kubectl_stream(kubectl, &["attach", pod, "-c", "talk"]);
    expect_line(&attached, |l| l == "five");
    let _ = attach.kill();
    let _ = attach.wait();

    // exec: output and exit code
    let out = api.kubectl_output(
        kubectl,
        &[
            "exec",
            pod,
            "-c",
            "talk",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        None,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("err\n"), "{stderr}");
    assert_eq!(out.status.code(), Some(3), "{stderr}");

    // exec -i: stdin reaches the command
    let echoed = api.kubectl_stdin(
        kubectl,
        &[
            "exec",
            "-i",
            pod,
            "-c",
            "talk",
            "--",
            "sh",
            "-c",
            "cat; echo done",
        ],
        Some("piped input\n"),
    );
    assert_eq!(echoed, "piped input\ndone\n");

    // port-forward: a local port reaches the pod's web server
    let (mut forward, forwarding) = api.kubectl_stream(kubectl, &["port-forward", pod, ":8080"]);
    let line = expect_line(&forwarding, |l| l.starts_with("Forwarding from 127.0.0.1:"));
    let port: u16 = line["Forwarding from 127.0.0.1:".len()..]
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    let answer = http_get_hostname(port);
    assert!(
        answer.starts_with("HTTP/1.") && answer.contains(" 200 "),
        "{answer}"
    );
    assert!(answer.ends_with(&format!("{pod}\n")), "{answer}");
    let _ = forward.kill();
    let _ = forward.wait();
}

#[test]
fn kubectl_logs_exec_attach_and_port_forward_reach_real_containers() {
    if let Some(why) = unsupported() {
        support::skip(&why);
        return;
    }
    let api = ApiServer::start(Backend::Embedded);
    let _kubelet = KubeletProcess::start(&api, NODE);
    for (kubectl, pod) in [(KUBECTL_127, "talker-127"), (KUBECTL_133, "talker-133")] {
        run(async { create_talker(&pods(&api).await, pod).await });
        exercise(&api, kubectl, pod);
    }
    run(async {
        let pods = pods(&api).await;
        // kube-rs execs over WebSocket (offering v5, then v4: containerd picks v4)
        let attach = AttachParams::default().container("talk").stderr(false);
        let mut exec = pods
            .exec("talker-133", ["sh", "-c", "echo from kube-rs"], &attach)
            .await
            .expect("a WebSocket exec");
        let mut out = String::new();
        exec.stdout()
            .expect("stdout")
            .read_to_string(&mut out)
            .await
            .unwrap();
        assert_eq!(out, "from kube-rs\n");
        let status = exec.take_status().expect("a status").await.expect("sent");
        assert_eq!(status.status.as_deref(), Some("Success"), "{status:?}");

        // the API server's checks, as upstream words them
        let params = |container: Option<&str>, previous| LogParams {
            container: container.map(str::to_string),
            previous,
            ..Default::default()
        };
        for (params, expected) in [
            (
                params(None, false),
                "a container name must be specified for pod talker-127, choose one of: [talk web]",
            ),
            (
                params(Some("nope"), false),
                "container nope is not valid for pod talker-127",
            ),
            (
                params(Some("talk"), true),
                r#"previous terminated container "talk" in pod "talker-127" not found"#,
            ),
        ] {
            let err = pods.logs("talker-127", &params).await.unwrap_err();
            assert!(err.to_string().contains(expected), "{err}");
        }
    });
}

async fn pods(api: &ApiServer) -> Api<Pod> {
    Api::namespaced(kube_client(api).await, "default")
}
