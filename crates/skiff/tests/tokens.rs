//! `kubectl create token` (TokenRequest) against a real `skiff apiserver`, with the newest and
//! the oldest kubectl: the JWT verifies with the public key the server keeps with its PKI files
//! and carries upstream's claims (issuer, subject, audiences, lifetime, the service account and,
//! when bound, the pod and its node); a missing ServiceAccount is 404 and a lifetime under ten
//! minutes is refused with upstream's messages.

mod support;

use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use support::{ApiServer, Backend, KUBECTL_127, KUBECTL_133};

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

fn decode(api: &ApiServer, token: &str, audience: &str) -> Value {
    let public = support::read(&api.data_dir.join("tls/service-account.pub"));
    let key = DecodingKey::from_ec_pem(public.as_bytes()).expect("the public key");
    let mut validation = Validation::new(Algorithm::ES256);
    validation.set_audience(&[audience]);
    validation.set_issuer(&[ISSUER]);
    jsonwebtoken::decode::<Value>(token.trim(), &key, &validation)
        .expect("the token verifies")
        .claims
}

fn objects(api: &ApiServer) {
    api.kubectl_stdin(
        KUBECTL_133,
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: robot, namespace: default}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: default, namespace: default}
---
apiVersion: v1
kind: Node
metadata: {name: n1}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: default}
spec:
  nodeName: n1
  serviceAccountName: robot
  containers: [{name: c, image: busybox}]
"#,
        ),
    );
}

fn uid(api: &ApiServer, what: &str) -> String {
    api.kubectl(
        KUBECTL_133,
        &["get", what, "-o", "jsonpath={.metadata.uid}"],
    )
}

#[test]
fn kubectl_create_token_returns_a_verifiable_jwt_with_upstreams_claims() {
    let api = ApiServer::start(Backend::Embedded);
    objects(&api);
    let sa_uid = uid(&api, "serviceaccount/robot");
    for kubectl in [KUBECTL_133, KUBECTL_127] {
        let token = api.kubectl(kubectl, &["create", "token", "robot"]);
        let claims = decode(&api, &token, ISSUER);
        assert_eq!(claims["iss"], ISSUER, "{kubectl}");
        assert_eq!(claims["sub"], "system:serviceaccount:default:robot");
        assert_eq!(claims["aud"], serde_json::json!([ISSUER]));
        let (iat, nbf, exp) = (&claims["iat"], &claims["nbf"], &claims["exp"]);
        assert_eq!(iat, nbf);
        assert_eq!(exp.as_i64().unwrap() - iat.as_i64().unwrap(), 3600);
        let k8s = &claims["kubernetes.io"];
        assert_eq!(k8s["namespace"], "default");
        assert_eq!(k8s["serviceaccount"]["name"], "robot");
        assert_eq!(k8s["serviceaccount"]["uid"], sa_uid.as_str());
        assert!(k8s.get("pod").is_none());
        assert!(!claims["jti"].as_str().unwrap().is_empty());
    }

    // an audience, a lifetime and a pod to bind to (its node named too)
    let token = api.kubectl(
        KUBECTL_133,
        &[
            "create",
            "token",
            "robot",
            "--audience",
            "vault",
            "--duration",
            "20m",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "web",
        ],
    );
    let claims = decode(&api, &token, "vault");
    let exp = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
    assert_eq!(exp, 1200);
    let k8s = &claims["kubernetes.io"];
    assert_eq!(k8s["pod"]["name"], "web");
    assert_eq!(k8s["pod"]["uid"], uid(&api, "pod/web").as_str());
    assert_eq!(k8s["node"]["name"], "n1");
    assert_eq!(k8s["node"]["uid"], uid(&api, "node/n1").as_str());

    let other = api.kubectl_fails(
        KUBECTL_133,
        &[
            "create",
            "token",
            "default",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "web",
        ],
        None,
    );
    assert!(
        other.contains("to pod running with different serviceaccount name"),
        "{other}"
    );
    let missing = api.kubectl_fails(KUBECTL_133, &["create", "token", "ghost"], None);
    assert!(
        missing.contains("serviceaccounts \"ghost\" not found"),
        "{missing}"
    );
    let short = api.kubectl_fails(
        KUBECTL_127,
        &["create", "token", "robot", "--duration", "5m"],
        None,
    );
    assert!(
        short.contains("may not specify a duration less than 10 minutes"),
        "{short}"
    );
}
