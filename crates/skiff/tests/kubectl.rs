//! Unmodified kubectl (1.33, the newest installed, and 1.27, the oldest) against a real
//! `skiff apiserver` process: discovery, the read verbs and their output formats, the write verbs,
//! watches and errors, as a user types them. The core suite also runs on real etcd.

mod support;

use support::{ApiServer, Backend, KUBECTL_127, KUBECTL_133, expect_line};

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata:
  name: web
  labels: {app: web, tier: front}
spec:
  containers:
  - name: web
    image: nginx:1.25
    ports: [{containerPort: 80}]
"#;

/// Discovery: `kubectl api-resources` lists every resource with its short names, and the
/// categories make `kubectl get all` work.
fn discovery(kubectl: &str) {
    let api = ApiServer::start(Backend::Embedded);
    let out = api.kubectl(kubectl, &["api-resources"]);
    for line in [
        "pods ",
        "deployments ",
        "clusterrolebindings",
        "priorityclasses",
        "endpointslices",
    ] {
        assert!(out.contains(line), "api-resources lists {line}: {out}");
    }
    let pods = out
        .lines()
        .find(|l| l.starts_with("pods "))
        .expect("pods row");
    assert!(
        pods.contains(" po ")
            && pods.contains(" v1 ")
            && pods.contains("true")
            && pods.contains("Pod")
    );
    let deploy = out
        .lines()
        .find(|l| l.starts_with("deployments "))
        .expect("deployments row");
    assert!(deploy.contains(" deploy ") && deploy.contains("apps/v1"));
    // the reviews, create-only, as upstream lists them
    for (name, group_version, namespaced, kind) in [
        (
            "selfsubjectreviews",
            "authentication.k8s.io/v1",
            "false",
            "SelfSubjectReview",
        ),
        (
            "tokenreviews",
            "authentication.k8s.io/v1",
            "false",
            "TokenReview",
        ),
        (
            "localsubjectaccessreviews",
            "authorization.k8s.io/v1",
            "true",
            "LocalSubjectAccessReview",
        ),
        (
            "selfsubjectaccessreviews",
            "authorization.k8s.io/v1",
            "false",
            "SelfSubjectAccessReview",
        ),
        (
            "selfsubjectrulesreviews",
            "authorization.k8s.io/v1",
            "false",
            "SelfSubjectRulesReview",
        ),
        (
            "subjectaccessreviews",
            "authorization.k8s.io/v1",
            "false",
            "SubjectAccessReview",
        ),
    ] {
        let row = out
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("api-resources lists {name}: {out}"));
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells, [name, group_version, namespaced, kind], "{row}");
    }
    let wide = api.kubectl(kubectl, &["api-resources", "-o", "wide"]);
    let pods = wide
        .lines()
        .find(|l| l.starts_with("pods "))
        .expect("pods row");
    assert!(pods.contains("all"), "pods are in category all: {pods}");
    api.kubectl_stdin(kubectl, &["create", "-f", "-"], Some(POD));
    let all = api.kubectl(kubectl, &["get", "all"]);
    assert!(all.contains("pod/web"), "get all shows the pod: {all}");
    assert!(
        all.contains("service/kubernetes"),
        "get all shows services: {all}"
    );
    let metrics = api.kubectl(kubectl, &["get", "--raw", "/metrics"]);
    assert!(
        metrics.contains("apiserver_request_total{verb=\"LIST\""),
        "{metrics}"
    );
    assert!(
        metrics.contains("apiserver_storage_objects{resource=\"namespaces\"} 4"),
        "{metrics}"
    );
    assert_eq!(api.kubectl(kubectl, &["get", "--raw", "/readyz"]), "ok");
    // API Priority and Fairness's bootstrap configuration, in upstream's columns
    let words = |out: &str, first: &str| -> Vec<String> {
        let line = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(first));
        let line = line.unwrap_or_else(|| panic!("a {first} row: {out}"));
        line.split_whitespace().map(str::to_string).collect()
    };
    let schemas = api.kubectl(kubectl, &["get", "flowschemas"]);
    assert_eq!(
        words(&schemas, "NAME"),
        [
            "NAME",
            "PRIORITYLEVEL",
            "MATCHINGPRECEDENCE",
            "DISTINGUISHERMETHOD",
            "AGE",
            "MISSINGPL"
        ]
    );
    assert_eq!(schemas.lines().count(), 1 + 13, "{schemas}");
    assert_eq!(
        words(&schemas, "global-default")[..4],
        ["global-default", "global-default", "9900", "ByUser"]
    );
    assert_eq!(
        words(&schemas, "exempt")[..4],
        ["exempt", "exempt", "1", "<none>"]
    );
    let levels = api.kubectl(kubectl, &["get", "prioritylevelconfigurations"]);
    assert_eq!(
        words(&levels, "NAME"),
        [
            "NAME",
            "TYPE",
            "NOMINALCONCURRENCYSHARES",
            "QUEUES",
            "HANDSIZE",
            "QUEUELENGTHLIMIT",
            "AGE"
        ]
    );
    assert_eq!(
        words(&levels, "workload-low")[..6],
        ["workload-low", "Limited", "100", "128", "6", "50"]
    );
    assert_eq!(
        words(&levels, "catch-all")[..6],
        ["catch-all", "Limited", "5", "<none>", "<none>", "<none>"]
    );
    let version = api.kubectl(kubectl, &["version", "-o", "json"]);
    assert!(
        version.contains("\"serverVersion\"") && version.contains("\"minor\": \"33\""),
        "{version}"
    );
    let info = api.kubectl(kubectl, &["cluster-info"]);
    assert!(
        info.contains("is running at") && info.contains("https://127.0.0.1:"),
        "{info}"
    );
}

/// Create, read in every output format, select, label, annotate, patch, replace, delete.
fn crud(kubectl: &str, backend: Backend) {
    let api = ApiServer::start(backend);
    let created = api.kubectl_stdin(kubectl, &["create", "-f", "-"], Some(POD));
    assert_eq!(created.trim(), "pod/web created");
    let again = api.kubectl_fails(kubectl, &["create", "-f", "-"], Some(POD));
    assert!(
        again.contains("AlreadyExists") && again.contains("pods \"web\" already exists"),
        "{again}"
    );

    let table = api.kubectl(kubectl, &["get", "pods"]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    assert!(table.lines().nth(1).unwrap().starts_with("web "), "{table}");
    assert!(
        table.contains("0/1") && table.contains("Pending"),
        "{table}"
    );
    let wide = api.kubectl(kubectl, &["get", "pods", "-o", "wide"]);
    assert!(
        wide.lines().next().unwrap().contains("NOMINATED NODE"),
        "{wide}"
    );

    let yaml = api.kubectl(kubectl, &["get", "pod", "web", "-o", "yaml"]);
    for want in [
        "restartPolicy: Always",
        "terminationGracePeriodSeconds: 30",
        "phase: Pending",
        "uid: ",
    ] {
        assert!(
            yaml.contains(want),
            "defaults and server fields: {want} in {yaml}"
        );
    }
    let json: serde_json::Value =
        serde_json::from_str(&api.kubectl(kubectl, &["get", "pod", "web", "-o", "json"])).unwrap();
    assert_eq!(
        json["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(json["status"]["qosClass"], "BestEffort");
    let rv = json["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let image = api.kubectl(
        kubectl,
        &[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.spec.containers[0].image}",
        ],
    );
    assert_eq!(image, "nginx:1.25");
    assert_eq!(
        api.kubectl(kubectl, &["get", "pods", "-o", "name"]).trim(),
        "pod/web"
    );

    assert_eq!(
        api.kubectl(kubectl, &["get", "pods", "-l", "app=web", "-o", "name"])
            .trim(),
        "pod/web"
    );
    assert_eq!(
        api.kubectl(
            kubectl,
            &["get", "pods", "-l", "app in (db),tier", "-o", "name"]
        )
        .trim(),
        ""
    );
    assert_eq!(
        api.kubectl(
            kubectl,
            &[
                "get",
                "pods",
                "--field-selector",
                "status.phase=Pending",
                "-o",
                "name"
            ]
        )
        .trim(),
        "pod/web"
    );
    assert_eq!(
        api.kubectl(
            kubectl,
            &[
                "get",
                "pods",
                "--field-selector",
                "spec.nodeName=n1",
                "-o",
                "name"
            ]
        )
        .trim(),
        ""
    );
    let bad = api.kubectl_fails(
        kubectl,
        &["get", "pods", "--field-selector", "spec.bogus=1"],
        None,
    );
    assert!(
        bad.contains("field label not supported: spec.bogus"),
        "{bad}"
    );
    // Paging: kubectl follows `continue` one object at a time.
    api.kubectl_stdin(
        kubectl,
        &["create", "-f", "-"],
        Some(&POD.replacen("name: web", "name: web2", 1)),
    );
    let paged = api.kubectl(kubectl, &["get", "pods", "--chunk-size=1", "-o", "name"]);
    assert_eq!(paged.trim(), "pod/web\npod/web2");
    api.kubectl(kubectl, &["delete", "pod", "web2"]);
    let all_ns = api.kubectl(kubectl, &["get", "pods", "-A"]);
    assert!(
        all_ns.lines().next().unwrap().starts_with("NAMESPACE"),
        "{all_ns}"
    );

    api.kubectl(kubectl, &["label", "pod", "web", "release=1"]);
    api.kubectl(kubectl, &["annotate", "pod", "web", "note=hello"]);
    let labels = api.kubectl(
        kubectl,
        &[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.metadata.labels.release}/{.metadata.annotations.note}",
        ],
    );
    assert_eq!(labels, "1/hello");

    api.kubectl(
        kubectl,
        &[
            "patch",
            "pod",
            "web",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"labels":{"m":"1"}}}"#,
        ],
    );
    api.kubectl(
        kubectl,
        &[
            "patch",
            "pod",
            "web",
            "--type",
            "json",
            "-p",
            r#"[{"op":"add","path":"/metadata/labels/j","value":"2"}]"#,
        ],
    );
    api.kubectl(
        kubectl,
        &[
            "patch",
            "pod",
            "web",
            "--type",
            "strategic",
            "-p",
            r#"{"spec":{"containers":[{"name":"web","image":"nginx:1.26"}]}}"#,
        ],
    );
    let after = api.kubectl(kubectl, &["get", "pod", "web", "-o", "jsonpath={.metadata.labels.m}{.metadata.labels.j} {.spec.containers[0].image} {.spec.containers[0].ports[0].containerPort}"]);
    assert_eq!(
        after, "12 nginx:1.26 80",
        "strategic merge keeps the ports of the merged container"
    );
    let unchanged = api.kubectl(
        kubectl,
        &[
            "patch",
            "pod",
            "web",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"labels":{"m":"1"}}}"#,
        ],
    );
    assert!(unchanged.contains("(no change)"), "{unchanged}");

    let stale = POD.replace(
        "name: web\n  labels",
        &format!("name: web\n  resourceVersion: \"{rv}\"\n  labels"),
    );
    let conflict = api.kubectl_fails(kubectl, &["replace", "-f", "-"], Some(&stale));
    assert!(
        conflict.contains("the object has been modified"),
        "{conflict}"
    );
    // a pod's spec is not the manifest's any more (admission filled it in): replacing it with
    // the bare manifest would change fields no update may change, as upstream
    let bare = api.kubectl_fails(
        kubectl,
        &["replace", "-f", "-"],
        Some(&POD.replace("tier: front", "tier: back")),
    );
    assert!(
        bare.contains("pod updates may not change fields other than")
            && bare.contains("+ spec.serviceAccountName: null"),
        "{bare}"
    );
    let current = api.kubectl(kubectl, &["get", "pod", "web", "-o", "yaml"]);
    let replaced = api.kubectl_stdin(
        kubectl,
        &["replace", "-f", "-"],
        Some(&current.replace("tier: front", "tier: back")),
    );
    assert_eq!(replaced.trim(), "pod/web replaced");

    let deleted = api.kubectl(kubectl, &["delete", "pod", "web"]);
    assert_eq!(deleted.trim(), "pod \"web\" deleted");
    let missing = api.kubectl_fails(kubectl, &["get", "pod", "web"], None);
    assert!(
        missing.contains("NotFound") && missing.contains("pods \"web\" not found"),
        "{missing}"
    );
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports:
        - containerPort: 80
        - containerPort: 443
        env:
        - {name: A, value: "1"}
        - {name: B, value: "2"}
"#;

/// Client-side apply: create, re-apply unchanged, re-apply with a port and an env var removed
/// (the strategic merge patch kubectl computes removes exactly those), `scale`, `explain`, and
/// strict field validation.
fn apply(kubectl: &str) {
    let api = ApiServer::start(Backend::Embedded);
    let out = api.kubectl_stdin(kubectl, &["apply", "-f", "-"], Some(DEPLOYMENT));
    assert_eq!(out.trim(), "deployment.apps/web created");
    let out = api.kubectl_stdin(kubectl, &["apply", "-f", "-"], Some(DEPLOYMENT));
    assert_eq!(out.trim(), "deployment.apps/web unchanged");
    // Another writer adds an env var; apply must keep it.
    api.kubectl(kubectl, &["set", "env", "deployment/web", "C=3"]);
    let trimmed = DEPLOYMENT
        .replace("        - containerPort: 443\n", "")
        .replace("        - {name: B, value: \"2\"}\n", "");
    let out = api.kubectl_stdin(kubectl, &["apply", "-f", "-"], Some(&trimmed));
    assert_eq!(out.trim(), "deployment.apps/web configured");
    let got = api.kubectl(kubectl, &["get", "deploy", "web", "-o",
        "jsonpath={.spec.template.spec.containers[0].ports[*].containerPort} {.spec.template.spec.containers[0].env[*].name} {.metadata.generation}"]);
    assert_eq!(got, "80 A C 3", "ports, env and generation after re-apply");

    let scaled = api.kubectl(kubectl, &["scale", "deployment", "web", "--replicas=5"]);
    assert_eq!(scaled.trim(), "deployment.apps/web scaled");
    assert_eq!(
        api.kubectl(
            kubectl,
            &["get", "deploy", "web", "-o", "jsonpath={.spec.replicas}"]
        ),
        "5"
    );

    let explain = api.kubectl(kubectl, &["explain", "pod.spec.containers"]);
    assert!(
        explain.contains("FIELD") || explain.contains("FIELDS"),
        "{explain}"
    );
    assert!(explain.contains("image"), "{explain}");

    let typo = DEPLOYMENT.replace("image: nginx:1.25", "imagee: nginx:1.25");
    let err = api.kubectl_fails(
        kubectl,
        &["apply", "-f", "-"],
        Some(&typo.replace("name: web\nspec", "name: typo\nspec")),
    );
    assert!(
        err.contains("unknown field \"spec.template.spec.containers[0].imagee\""),
        "{err}"
    );
    // `--validate=warn` (fieldValidation=Warn) creates it and prints the server's warning.
    let warned = api.kubectl_output(
        kubectl,
        &["apply", "--validate=warn", "-f", "-"],
        Some(
            &DEPLOYMENT
                .replace("image: nginx:1.25", "image: nginx:1.25\n        imagee: x")
                .replace("name: web\nspec", "name: warned\nspec"),
        ),
    );
    let stderr = String::from_utf8_lossy(&warned.stderr);
    assert!(warned.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: unknown field \"spec.template.spec.containers[0].imagee\""),
        "{stderr}"
    );
    api.kubectl(kubectl, &["delete", "deployment", "warned"]);

    api.kubectl(kubectl, &["delete", "deployment", "web", "--wait"]);
    let gone = api.kubectl(kubectl, &["get", "deployments", "-o", "name"]);
    assert_eq!(gone.trim(), "");
}

fn service(name: &str, node_port: Option<u16>) -> String {
    let port = match node_port {
        Some(n) => format!("{{port: 80, nodePort: {n}}}"),
        None => "{port: 80}".to_string(),
    };
    format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}}}\nspec:\n  type: NodePort\n  selector: {{app: web}}\n  ports: [{port}]\n"
    )
}

/// Services get a ClusterIP from 10.43.0.0/16 and NodePorts from 30000–32767, never twice, and
/// give them back when deleted.
fn services(kubectl: &str) {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(
        kubectl,
        &["apply", "-f", "-"],
        Some(&service("a", Some(30080))),
    );
    api.kubectl_stdin(kubectl, &["apply", "-f", "-"], Some(&service("b", None)));
    let ips = api.kubectl(
        kubectl,
        &[
            "get",
            "svc",
            "-o",
            "jsonpath={range .items[*]}{.spec.clusterIP} {end}",
        ],
    );
    let ips: Vec<&str> = ips.split_whitespace().collect();
    assert_eq!(ips.len(), 3, "kubernetes, a and b: {ips:?}");
    assert!(ips.iter().all(|ip| ip.starts_with("10.43.")), "{ips:?}");
    let unique: std::collections::HashSet<_> = ips.iter().collect();
    assert_eq!(unique.len(), 3, "no address twice: {ips:?}");
    let taken = api.kubectl_fails(
        kubectl,
        &["apply", "-f", "-"],
        Some(&service("c", Some(30080))),
    );
    assert!(
        taken.contains(
            "spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated"
        ),
        "{taken}"
    );
    let outside = api.kubectl_fails(
        kubectl,
        &["apply", "-f", "-"],
        Some(&service("c", Some(8080))),
    );
    assert!(
        outside.contains("provided port is not in the valid range"),
        "{outside}"
    );
    api.kubectl(kubectl, &["delete", "svc", "a"]);
    let reused = api.kubectl_stdin(
        kubectl,
        &["apply", "-f", "-"],
        Some(&service("c", Some(30080))),
    );
    assert_eq!(
        reused.trim(),
        "service/c created",
        "a deleted Service's port is free again"
    );
}

/// The generators of `kubectl create` (protobuf bodies from kubectl ≥ 1.32, JSON before).
fn create_generators(kubectl: &str) {
    let api = ApiServer::start(Backend::Embedded);
    for (args, want) in [
        (
            &["create", "configmap", "c1", "--from-literal=a=b"][..],
            "configmap/c1 created",
        ),
        (
            &["create", "secret", "generic", "s1", "--from-literal=x=y"][..],
            "secret/s1 created",
        ),
        (
            &[
                "create",
                "deployment",
                "d1",
                "--image=busybox",
                "--replicas=0",
            ][..],
            "deployment.apps/d1 created",
        ),
        (
            &["create", "service", "clusterip", "svc1", "--tcp=80:8080"][..],
            "service/svc1 created",
        ),
        (
            &["create", "namespace", "team-a"][..],
            "namespace/team-a created",
        ),
        (
            &["create", "job", "j1", "--image=busybox"][..],
            "job.batch/j1 created",
        ),
    ] {
        assert_eq!(api.kubectl(kubectl, args).trim(), want);
    }
    let got = api.kubectl(kubectl, &["get", "cm", "c1", "-o", "jsonpath={.data.a}"]);
    assert_eq!(got, "b");
    let got = api.kubectl(
        kubectl,
        &["get", "secret", "s1", "-o", "jsonpath={.data.x}"],
    );
    assert_eq!(got, "eQ==", "base64 of y");
    let got = api.kubectl(
        kubectl,
        &[
            "get",
            "deploy",
            "d1",
            "-o",
            "jsonpath={.spec.replicas} {.spec.template.spec.containers[0].image}",
        ],
    );
    assert_eq!(got, "0 busybox");
    let got = api.kubectl(
        kubectl,
        &[
            "get",
            "svc",
            "svc1",
            "-o",
            "jsonpath={.spec.ports[0].targetPort}",
        ],
    );
    assert_eq!(got, "8080");
}

/// Binding, graceful deletion of a bound pod, finalizers, namespace termination, `wait` and
/// `describe`.
fn lifecycle(kubectl: &str) {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(kubectl, &["create", "-f", "-"], Some(POD));
    let binding = r#"{"apiVersion":"v1","kind":"Binding","metadata":{"name":"web"},"target":{"kind":"Node","name":"n1"}}"#;
    let raw = [
        "create",
        "--raw",
        "/api/v1/namespaces/default/pods/web/binding",
        "-f",
        "-",
    ];
    api.kubectl_stdin(kubectl, &raw, Some(binding));
    let node = api.kubectl(
        kubectl,
        &[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.spec.nodeName} {.status.conditions[0].type}",
        ],
    );
    assert_eq!(node, "n1 PodScheduled");
    let again = api.kubectl_fails(kubectl, &raw, Some(binding));
    assert!(again.contains("already assigned to node"), "{again}");
    let waited = api.kubectl(
        kubectl,
        &[
            "wait",
            "--for=condition=PodScheduled",
            "pod/web",
            "--timeout=30s",
        ],
    );
    assert_eq!(waited.trim(), "pod/web condition met");
    let described = api.kubectl(kubectl, &["describe", "pod", "web"]);
    assert!(
        described.contains("Node:") && described.contains("n1"),
        "{described}"
    );

    // A bound pod is deleted gracefully: it stays, marked, until its kubelet (or a force delete)
    // finishes the job.
    api.kubectl(kubectl, &["delete", "pod", "web", "--wait=false"]);
    let marked = api.kubectl(
        kubectl,
        &[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.metadata.deletionGracePeriodSeconds}",
        ],
    );
    assert_eq!(marked, "30");
    let table = api.kubectl(kubectl, &["get", "pod", "web"]);
    assert!(table.contains("Terminating"), "{table}");
    api.kubectl(
        kubectl,
        &["delete", "pod", "web", "--grace-period=0", "--force"],
    );
    assert_eq!(
        api.kubectl(kubectl, &["get", "pods", "-o", "name"]).trim(),
        ""
    );

    // A finalizer holds a deleted object until it is removed.
    let cm =
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: held, finalizers: [example.com/hold]}\n";
    api.kubectl_stdin(kubectl, &["create", "-f", "-"], Some(cm));
    api.kubectl(kubectl, &["delete", "cm", "held", "--wait=false"]);
    let ts = api.kubectl(
        kubectl,
        &[
            "get",
            "cm",
            "held",
            "-o",
            "jsonpath={.metadata.deletionTimestamp}",
        ],
    );
    assert!(!ts.is_empty(), "deletionTimestamp set");
    api.kubectl(
        kubectl,
        &[
            "patch",
            "cm",
            "held",
            "--type",
            "merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
    );
    api.kubectl(
        kubectl,
        &["wait", "--for=delete", "cm/held", "--timeout=30s"],
    );

    // A terminating namespace refuses new content.
    api.kubectl(kubectl, &["create", "namespace", "going"]);
    api.kubectl(kubectl, &["delete", "namespace", "going", "--wait=false"]);
    let phase = api.kubectl(
        kubectl,
        &["get", "ns", "going", "-o", "jsonpath={.status.phase}"],
    );
    assert_eq!(phase, "Terminating");
    let refused = api.kubectl_fails(kubectl, &["create", "-n", "going", "-f", "-"], Some(POD));
    assert!(
        refused.contains("because it is being terminated"),
        "{refused}"
    );
    let immortal = api.kubectl_fails(kubectl, &["delete", "namespace", "kube-system"], None);
    assert!(
        immortal.contains("this namespace may not be deleted"),
        "{immortal}"
    );
}

/// Bad input is a 4xx Status with upstream's message, and nothing is written.
fn errors(kubectl: &str) {
    let api = ApiServer::start(Backend::Embedded);
    let no_image = POD.replace("    image: nginx:1.25\n", "");
    let invalid = api.kubectl_fails(
        kubectl,
        &["create", "--validate=false", "-f", "-"],
        Some(&no_image),
    );
    assert!(
        invalid.contains("spec.containers[0].image: Required value"),
        "{invalid}"
    );
    let bad_name = POD.replace("name: web\n  labels", "name: Web_1\n  labels");
    let invalid = api.kubectl_fails(
        kubectl,
        &["create", "--validate=false", "-f", "-"],
        Some(&bad_name),
    );
    assert!(
        invalid.contains("metadata.name: Invalid value: \"Web_1\""),
        "{invalid}"
    );
    let wrong_ns = api.kubectl_fails(
        kubectl,
        &["create", "-n", "default", "-f", "-"],
        Some(&POD.replacen("name: web\n", "name: web\n  namespace: other\n", 1)),
    );
    assert!(wrong_ns.contains("namespace"), "{wrong_ns}");
    let missing_ns = api.kubectl_fails(kubectl, &["create", "-n", "nope", "-f", "-"], Some(POD));
    assert!(
        missing_ns.contains("namespaces \"nope\" not found"),
        "{missing_ns}"
    );
    assert_eq!(
        api.kubectl(kubectl, &["get", "pods", "-A", "-o", "name"])
            .trim(),
        ""
    );
}

/// `kubectl get --watch` sees a create, a change and a delete as they happen.
fn watch(kubectl: &str) {
    let api = ApiServer::start(Backend::Embedded);
    let (mut child, lines) = api.kubectl_stream(
        kubectl,
        &["get", "pods", "--watch", "--output-watch-events"],
    );
    api.kubectl_stdin(kubectl, &["create", "-f", "-"], Some(POD));
    expect_line(&lines, |l| l.starts_with("ADDED") && l.contains("web"));
    api.kubectl(kubectl, &["label", "pod", "web", "x=1"]);
    expect_line(&lines, |l| l.starts_with("MODIFIED") && l.contains("web"));
    api.kubectl(kubectl, &["delete", "pod", "web"]);
    expect_line(&lines, |l| l.starts_with("DELETED") && l.contains("web"));
    let _ = child.kill();
    let _ = child.wait();
}

/// Requests without valid credentials get 401 (a bearer token no authenticator accepts; with no
/// credentials at all kubectl would prompt for a password).
fn unauthenticated(kubectl: &str) {
    let api = ApiServer::start(Backend::Embedded);
    let config = std::fs::read_to_string(api.kubeconfig()).unwrap();
    let anonymous: String = config
        .lines()
        .filter(|l| !l.contains("client-certificate-data") && !l.contains("client-key-data"))
        .map(|l| {
            if l.trim() == "user:" {
                "  user: {token: not-a-valid-token}\n".to_string()
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let path = api.data_dir.join("anonymous.yaml");
    std::fs::write(&path, anonymous).unwrap();
    let out = std::process::Command::new(kubectl)
        .arg("--kubeconfig")
        .arg(&path)
        .args(["get", "pods"])
        .env("HOME", api.data_dir.join("home"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("You must be logged in to the server"),
        "{stderr}"
    );
}

macro_rules! for_kubectl {
    ($($name:ident => $body:expr;)*) => {
        mod kubectl_1_33 {
            use super::*;
            $(#[test] fn $name() { let kubectl = KUBECTL_133; $body(kubectl) })*
        }
        mod kubectl_1_27 {
            use super::*;
            $(#[test] fn $name() { let kubectl = KUBECTL_127; $body(kubectl) })*
        }
    };
}

for_kubectl! {
    discovery_lists_every_resource_and_get_all_works => discovery;
    create_read_select_change_and_delete_a_pod => |k| crud(k, Backend::Embedded);
    bad_input_is_refused_with_upstreams_messages => errors;
    get_watch_sees_adds_changes_and_deletes => watch;
    apply_reapply_scale_and_explain => apply;
    services_get_unique_cluster_ips_and_node_ports => services;
    create_generators_work_with_protobuf_and_json_bodies => create_generators;
    binding_graceful_deletion_finalizers_and_namespaces => lifecycle;
    requests_without_credentials_are_unauthorized => unauthenticated;
}

/// A pod's container resources change only through `pods/resize` (kubectl 1.32 and later
/// patch it), held to upstream's rules; an ordinary update of them is refused.
#[test]
fn pods_are_resized_only_through_the_resize_subresource() {
    let kubectl = KUBECTL_133;
    let api = ApiServer::start(Backend::Embedded);
    let burstable = POD.replace(
        "    ports: [{containerPort: 80}]\n",
        "    resources:\n      requests: {cpu: 100m, memory: 64Mi}\n      limits: {cpu: 200m, memory: 128Mi}\n",
    );
    api.kubectl_stdin(kubectl, &["create", "-f", "-"], Some(&burstable));
    let discovery = api.kubectl(kubectl, &["get", "--raw", "/api/v1"]);
    assert!(discovery.contains("\"pods/resize\""), "{discovery}");

    let cpu_limit = |cpu: &str| {
        format!(
            r#"{{"spec":{{"containers":[{{"name":"web","resources":{{"limits":{{"cpu":"{cpu}"}}}}}}]}}}}"#
        )
    };
    let refused = api.kubectl_fails(
        kubectl,
        &["patch", "pod", "web", "-p", &cpu_limit("400m")],
        None,
    );
    assert!(
        refused.contains("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`"),
        "{refused}"
    );
    let resize = |patch: &str| {
        api.kubectl_output(
            kubectl,
            &[
                "patch",
                "pod",
                "web",
                "--subresource",
                "resize",
                "-p",
                patch,
            ],
            None,
        )
    };
    let out = resize(&cpu_limit("400m"));
    assert!(out.status.success(), "{:?}", out);
    let limits = api.kubectl(
        kubectl,
        &[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.spec.containers[0].resources.limits}",
        ],
    );
    assert_eq!(limits, r#"{"cpu":"400m","memory":"128Mi"}"#);

    let stderr = |out: std::process::Output| {
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let guaranteed = r#"{"spec":{"containers":[{"name":"web","resources":{"requests":{"cpu":"400m","memory":"128Mi"}}}]}}"#;
    let err = stderr(resize(guaranteed));
    assert!(
        err.contains(r#"spec: Invalid value: "Burstable": Pod QOS Class may not change as a result of resizing"#),
        "{err}"
    );
    let smaller =
        r#"{"spec":{"containers":[{"name":"web","resources":{"limits":{"memory":"100Mi"}}}]}}"#;
    let err = stderr(resize(smaller));
    assert!(
        err.contains("spec.containers[0].resources.limits[memory]: Forbidden: memory limits cannot be decreased unless resizePolicy is RestartContainer"),
        "{err}"
    );
    let over =
        r#"{"spec":{"containers":[{"name":"web","resources":{"requests":{"cpu":"500m"}}}]}}"#;
    let err = stderr(resize(over));
    assert!(
        err.contains(r#"spec.containers[0].resources.requests: Invalid value: "500m": must be less than or equal to cpu limit of 400m"#),
        "{err}"
    );
}

#[test]
fn the_crud_suite_passes_on_real_etcd() {
    crud(KUBECTL_133, Backend::Etcd);
}
