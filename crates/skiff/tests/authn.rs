//! Authentication against a real `skiff apiserver` with real kubectl: bearer tokens from a
//! `--token-auth-file`, from TokenRequest (`kubectl create token`), from a bootstrap token
//! Secret and from an OIDC issuer (a test key in a JWKS file, or keys served by a test issuer
//! over HTTPS, rotated while the server runs) each show their identity in
//! `kubectl auth whoami`; forged, expired and unbound tokens are 401 (`You must be logged in`);
//! TokenReview answers through `kubectl create -f`; pods get the `kube-api-access-…` volume of
//! the ServiceAccount admission plugin, and pods naming a missing account are refused;
//! anonymous requests see only the public info paths.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use base64::Engine;
use serde_json::{Value, json};
use support::{ApiServer, Backend, KUBECTL_127, KUBECTL_133};

const UNAUTHORIZED: &str = "error: You must be logged in to the server (Unauthorized)";
/// A 401, also when it answered kubectl's discovery (no cached discovery yet).
const LOGGED_OUT: &str = "error: You must be logged in to the server";

/// A kubeconfig for the server with `user` (a YAML mapping: `{token: …}` or `{}`) and no client
/// certificate.
fn kubeconfig_with(api: &ApiServer, name: &str, user: &str) -> PathBuf {
    let admin = std::fs::read_to_string(api.kubeconfig()).expect("admin kubeconfig");
    let config: String = admin
        .lines()
        .filter(|l| !l.contains("client-certificate-data") && !l.contains("client-key-data"))
        .map(|l| {
            if l.trim() == "user:" {
                format!("  user: {user}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let path = api.data_dir.join(format!("{name}.kubeconfig"));
    std::fs::write(&path, config).expect("write kubeconfig");
    path
}

fn token_kubeconfig(api: &ApiServer, name: &str, token: &str) -> PathBuf {
    kubeconfig_with(api, name, &format!("{{token: \"{token}\"}}"))
}

fn kubectl_with(api: &ApiServer, kubectl: &str, kubeconfig: &Path, args: &[&str]) -> Output {
    support::run_guarded(
        Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(args)
            .env("HOME", api.data_dir.join("home")),
    )
}

/// `kubectl auth whoami -o json`'s `status.userInfo` for a token.
fn whoami(api: &ApiServer, token: &str) -> Value {
    let config = token_kubeconfig(api, "whoami", token);
    let out = kubectl_with(api, KUBECTL_133, &config, &["auth", "whoami", "-o", "json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "whoami failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        support::read(&api.data_dir.join("../apiserver.log"))
    );
    let review: Value = serde_json::from_str(&stdout).expect("whoami json");
    review["status"]["userInfo"].clone()
}

/// The stderr of a request with `token`, which must fail.
fn refused(api: &ApiServer, kubectl: &str, token: &str) -> String {
    let config = token_kubeconfig(api, "refused", token);
    let out = kubectl_with(api, kubectl, &config, &["get", "pods"]);
    assert!(!out.status.success(), "a request with {token:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// `whoami` once the server accepts the token (it fetches the OIDC issuer's keys in the
/// background).
fn whoami_eventually(api: &ApiServer, token: &str) -> Value {
    let config = token_kubeconfig(api, "eventually", token);
    let mut last = String::new();
    for _ in 0..150 {
        let out = kubectl_with(api, KUBECTL_133, &config, &["auth", "whoami", "-o", "json"]);
        if out.status.success() {
            let review: Value = serde_json::from_slice(&out.stdout).expect("whoami json");
            return review["status"]["userInfo"].clone();
        }
        last = String::from_utf8_lossy(&out.stderr).into_owned();
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    panic!(
        "the token was never accepted: {last}\n{}",
        support::read(&api.data_dir.join("../apiserver.log"))
    );
}

/// An ES256 key (made by the API server's own key code), as a signing key and a JWKS.
fn oidc_key(dir: &Path) -> (jsonwebtoken::EncodingKey, Value) {
    oidc_key_with_id(dir, "test")
}

fn oidc_key_with_id(dir: &Path, kid: &str) -> (jsonwebtoken::EncodingKey, Value) {
    skiff_apiserver::tokens::TokenIssuer::ensure(dir, "https://unused").expect("key");
    let private = std::fs::read_to_string(dir.join("service-account.key")).unwrap();
    let public = std::fs::read_to_string(dir.join("service-account.pub")).unwrap();
    let der = base64::engine::general_purpose::STANDARD
        .decode(
            public
                .lines()
                .filter(|l| !l.starts_with("-----"))
                .collect::<String>(),
        )
        .unwrap();
    // a P-256 SubjectPublicKeyInfo ends with the point 0x04 || x || y
    let point = &der[der.len() - 65..];
    assert_eq!(point[0], 4);
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let jwks = json!({"keys": [{"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
        "alg": "ES256", "x": b64(&point[1..33]), "y": b64(&point[33..])}]});
    (
        jsonwebtoken::EncodingKey::from_ec_pem(private.as_bytes()).unwrap(),
        jwks,
    )
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

#[test]
fn tokens_from_the_token_file_and_an_oidc_issuer_show_their_identity() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "tok-alice,alice,uid-alice,\"devs,ops\"\n").unwrap();
    let (key, jwks) = oidc_key(&dir.path().join("idp"));
    let jwks_file = dir.path().join("jwks.json");
    std::fs::write(&jwks_file, jwks.to_string()).unwrap();
    let api = ApiServer::start_with(
        Backend::Embedded,
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--oidc-issuer-url",
            "https://idp.example",
            "--oidc-client-id",
            "skiff",
            "--oidc-groups-claim",
            "groups",
            "--oidc-groups-prefix",
            "oidc:",
            "--oidc-jwks-file",
            jwks_file.to_str().unwrap(),
        ],
    );

    let alice = whoami(&api, "tok-alice");
    assert_eq!(alice["username"], "alice");
    assert_eq!(alice["uid"], "uid-alice");
    assert_eq!(
        strings(&alice["groups"]),
        vec!["devs", "ops", "system:authenticated"]
    );
    // the human-readable table of both kubectl generations
    let config = token_kubeconfig(&api, "alice", "tok-alice");
    let out = kubectl_with(&api, KUBECTL_133, &config, &["auth", "whoami"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("Groups") && table.contains("[devs ops system:authenticated]"),
        "{table}"
    );
    let out = kubectl_with(&api, KUBECTL_127, &config, &["auth", "whoami"]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("alice"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // alice has no roles: authenticated, then refused by RBAC
    let out = kubectl_with(&api, KUBECTL_133, &config, &["get", "pods"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("User \"alice\" cannot list resource \"pods\""),
        "{stderr}"
    );

    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.kid = Some("test".into());
    let id_token = |claims: Value| jsonwebtoken::encode(&header, &claims, &key).unwrap();
    let claims = json!({"iss": "https://idp.example", "aud": "skiff", "sub": "jane",
                        "groups": ["eng"], "exp": now() + 600, "iat": now()});
    let jane = whoami(&api, &id_token(claims.clone()));
    assert_eq!(jane["username"], "https://idp.example#jane");
    assert_eq!(
        strings(&jane["groups"]),
        vec!["oidc:eng", "system:authenticated"]
    );
    let mut expired = claims.clone();
    expired["exp"] = json!(now() - 600);
    assert!(refused(&api, KUBECTL_133, &id_token(expired)).contains(UNAUTHORIZED));
    let mut other_client = claims;
    other_client["aud"] = json!("another-client");
    assert!(refused(&api, KUBECTL_133, &id_token(other_client)).contains(UNAUTHORIZED));
    assert!(refused(&api, KUBECTL_127, "not-in-the-file").contains(UNAUTHORIZED));
}

/// An OpenID Connect issuer on loopback in the test process, serving HTTPS with a certificate
/// of its own CA (rcgen, through the API server's PKI code): its discovery document, and at
/// `/keys` the key set it is told to serve (503 while it has none).
struct Issuer {
    url: String,
    ca_file: PathBuf,
    keys: Arc<Mutex<Option<Value>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Issuer {
    fn start(dir: &Path) -> Issuer {
        let pki = skiff_apiserver::pki::Pki::ensure(dir, &["127.0.0.1".to_string()])
            .expect("issuer certificates");
        let ca_file = dir.join("issuer-ca.crt");
        std::fs::write(&ca_file, &pki.ca_cert_pem).unwrap();
        let acceptor = support::https::loopback_acceptor(&pki);
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!(
            "https://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let keys: Arc<Mutex<Option<Value>>> = Arc::default();
        let discovery = json!({"issuer": url, "jwks_uri": format!("{url}/keys"),
                               "id_token_signing_alg_values_supported": ["ES256"]});
        let served = keys.clone();
        runtime.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, keys, discovery) =
                    (acceptor.clone(), served.clone(), discovery.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(move |req: hyper::Request<_>| {
                        let answer = match req.uri().path() {
                            "/.well-known/openid-configuration" => Some(discovery.clone()),
                            "/keys" => keys.lock().unwrap().clone(),
                            _ => None,
                        };
                        let status = match answer {
                            Some(_) => hyper::StatusCode::OK,
                            None => hyper::StatusCode::SERVICE_UNAVAILABLE,
                        };
                        let body = answer.map(|a| a.to_string()).unwrap_or_default();
                        let mut response = hyper::Response::new(http_body_util::Full::new(
                            bytes::Bytes::from(body),
                        ));
                        *response.status_mut() = status;
                        std::future::ready(Ok::<_, hyper::Error>(response))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        Issuer {
            url,
            ca_file,
            keys,
            _runtime: runtime,
        }
    }

    fn serve_keys(&self, jwks: Value) {
        *self.keys.lock().unwrap() = Some(jwks);
    }
}

#[test]
fn oidc_keys_come_from_the_issuer_over_https_and_follow_its_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let issuer = Issuer::start(dir.path());
    let (one, jwks_one) = oidc_key_with_id(&dir.path().join("one"), "one");
    let (two, jwks_two) = oidc_key_with_id(&dir.path().join("two"), "two");
    // the issuer has no keys yet: the server starts all the same
    let api = ApiServer::start_with(
        Backend::Embedded,
        &[
            "--oidc-issuer-url",
            &issuer.url,
            "--oidc-client-id",
            "skiff",
            "--oidc-ca-file",
            issuer.ca_file.to_str().unwrap(),
        ],
    );
    let token = |kid: &str, key: &jsonwebtoken::EncodingKey, iss: &str| {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(kid.into());
        let claims = json!({"iss": iss, "aud": "skiff", "sub": "jane", "exp": now() + 600});
        jsonwebtoken::encode(&header, &claims, key).unwrap()
    };
    let first = token("one", &one, &issuer.url);
    let stderr = refused(&api, KUBECTL_133, &first);
    assert!(stderr.contains(LOGGED_OUT), "{stderr}");

    // the keys appear: the server's retry picks them up
    issuer.serve_keys(jwks_one);
    let jane = whoami_eventually(&api, &first);
    assert_eq!(jane["username"], format!("{}#jane", issuer.url));
    assert_eq!(strings(&jane["groups"]), vec!["system:authenticated"]);
    // another issuer's token is no one's
    let stranger = token("one", &one, "https://other.example");
    assert!(refused(&api, KUBECTL_133, &stranger).contains(LOGGED_OUT));

    // the issuer rotates to a new key: a token naming it has the keys refetched
    issuer.serve_keys(jwks_two);
    let rotated = token("two", &two, &issuer.url);
    assert_eq!(
        whoami_eventually(&api, &rotated)["username"],
        format!("{}#jane", issuer.url)
    );
    // the old key went with the old set, and a key the issuer never published is refused
    assert!(refused(&api, KUBECTL_133, &first).contains(LOGGED_OUT));
    let unknown = token("three", &two, &issuer.url);
    assert!(refused(&api, KUBECTL_133, &unknown).contains(LOGGED_OUT));
}

const ACCOUNTS: &str = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: robot}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: quiet}
automountServiceAccountToken: false
---
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  serviceAccountName: robot
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: silent}
spec:
  serviceAccountName: quiet
  containers: [{name: c, image: busybox}]
"#;

#[test]
fn service_account_tokens_authenticate_while_what_they_are_bound_to_exists() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(KUBECTL_133, &["create", "-f", "-"], Some(ACCOUNTS));

    // the ServiceAccount admission plugin mounted the token volume into web, not into silent
    let web: Value =
        serde_json::from_str(&api.kubectl(KUBECTL_133, &["get", "pod", "web", "-o", "json"]))
            .unwrap();
    let volume = &web["spec"]["volumes"][0];
    let name = volume["name"].as_str().unwrap();
    assert!(
        name.starts_with("kube-api-access-") && name.len() == 21,
        "{name}"
    );
    let sources = &volume["projected"]["sources"];
    assert_eq!(sources[0]["serviceAccountToken"]["expirationSeconds"], 3607);
    assert_eq!(sources[1]["configMap"]["name"], "kube-root-ca.crt");
    assert_eq!(
        sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    assert_eq!(
        web["spec"]["containers"][0]["volumeMounts"][0],
        json!({"name": name, "readOnly": true,
               "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    );
    let silent = api.kubectl(KUBECTL_133, &["get", "pod", "silent", "-o", "json"]);
    assert!(!silent.contains("kube-api-access"), "{silent}");
    // a pod naming an account that does not exist is refused
    let ghost = "apiVersion: v1\nkind: Pod\nmetadata: {name: ghost}\nspec:\n  serviceAccountName: ghost\n  containers: [{name: c, image: busybox}]\n";
    let stderr = api.kubectl_fails(KUBECTL_133, &["create", "-f", "-"], Some(ghost));
    assert!(
        stderr.contains(
            "pods \"ghost\" is forbidden: error looking up service account default/ghost: serviceaccount \"ghost\" not found"
        ),
        "{stderr}"
    );

    // kubectl create token: the service account's identity
    let token = api
        .kubectl(KUBECTL_133, &["create", "token", "robot"])
        .trim()
        .to_string();
    let robot = whoami(&api, &token);
    assert_eq!(robot["username"], "system:serviceaccount:default:robot");
    assert_eq!(
        strings(&robot["groups"]),
        vec![
            "system:serviceaccounts",
            "system:serviceaccounts:default",
            "system:authenticated"
        ]
    );
    // bound to the pod: its name and uid in the extra attributes, until the pod is gone
    let bound = api
        .kubectl(
            KUBECTL_133,
            &[
                "create",
                "token",
                "robot",
                "--bound-object-kind",
                "Pod",
                "--bound-object-name",
                "web",
            ],
        )
        .trim()
        .to_string();
    let user = whoami(&api, &bound);
    assert_eq!(
        strings(&user["extra"]["authentication.kubernetes.io/pod-name"]),
        vec!["web"]
    );
    assert_eq!(
        user["extra"]["authentication.kubernetes.io/pod-uid"][0],
        web["metadata"]["uid"]
    );

    // TokenReview through kubectl create -f (it is in discovery)
    let review = |token: &str, audiences: &str| -> Value {
        let body = format!(
            "apiVersion: authentication.k8s.io/v1\nkind: TokenReview\nspec:\n  token: \"{token}\"\n  audiences: {audiences}\n"
        );
        // kubectl's field-validation probe looks for a PATCH of the kind, which create-only
        // kinds lack, then lists CustomResourceDefinitions
        let out = api.kubectl_stdin(
            KUBECTL_133,
            &["create", "-f", "-", "-o", "json"],
            Some(&body),
        );
        serde_json::from_str(&out).unwrap()
    };
    let answer = review(&token, "[]");
    assert_eq!(answer["status"]["authenticated"], true);
    assert_eq!(
        answer["status"]["user"]["username"],
        "system:serviceaccount:default:robot"
    );
    assert_eq!(
        answer["status"]["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    let answer = review(&token, "[vault]");
    assert!(answer["status"]["authenticated"].is_null());
    assert_eq!(
        answer["status"]["error"],
        "token audiences [\"https://kubernetes.default.svc.cluster.local\"] is invalid for the target audiences [\"vault\"]"
    );

    // forged: the payload of one token under the signature of another
    let (a, b) = (
        token.split('.').collect::<Vec<_>>(),
        bound.split('.').collect::<Vec<_>>(),
    );
    let forged = format!("{}.{}.{}", a[0], b[1], a[2]);
    assert!(refused(&api, KUBECTL_133, &forged).contains(UNAUTHORIZED));
    // expired: signed with the server's own key an hour ago
    let key = std::fs::read_to_string(api.data_dir.join("tls/service-account.key")).unwrap();
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(a[1])
        .unwrap();
    let mut claims: Value = serde_json::from_slice(&payload).unwrap();
    claims["exp"] = json!(now() - 3600);
    claims["nbf"] = json!(now() - 7200);
    claims["iat"] = json!(now() - 7200);
    let expired = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256),
        &claims,
        &jsonwebtoken::EncodingKey::from_ec_pem(key.as_bytes()).unwrap(),
    )
    .unwrap();
    assert!(refused(&api, KUBECTL_133, &expired).contains(UNAUTHORIZED));
    assert_eq!(
        review(&expired, "[]")["status"]["error"],
        "service account token has expired"
    );

    // the pod is gone: its bound token no longer authenticates, the unbound one still does
    api.kubectl(KUBECTL_133, &["delete", "pod", "web"]);
    assert!(refused(&api, KUBECTL_133, &bound).contains(UNAUTHORIZED));
    assert!(refused(&api, KUBECTL_127, &bound).contains("You must be logged in"));
    assert_eq!(
        whoami(&api, &token)["username"],
        "system:serviceaccount:default:robot"
    );
    // and the account is gone: none of its tokens do
    api.kubectl(KUBECTL_133, &["delete", "serviceaccount", "robot"]);
    assert!(refused(&api, KUBECTL_133, &token).contains(UNAUTHORIZED));
}

const BOOTSTRAP_SECRET: &str = r#"
apiVersion: v1
kind: Secret
metadata: {name: bootstrap-token-abcdef, namespace: kube-system}
type: bootstrap.kubernetes.io/token
stringData:
  token-id: abcdef
  token-secret: 0123456789abcdef
  usage-bootstrap-authentication: "true"
  auth-extra-groups: system:bootstrappers:worker
  expiration: "2099-01-01T00:00:00Z"
"#;

#[test]
fn a_bootstrap_token_authenticates_as_its_id_and_may_ask_for_a_certificate() {
    let api = ApiServer::start(Backend::Embedded);
    api.kubectl_stdin(KUBECTL_133, &["create", "-f", "-"], Some(BOOTSTRAP_SECRET));
    let token = "abcdef.0123456789abcdef";
    let user = whoami(&api, token);
    assert_eq!(user["username"], "system:bootstrap:abcdef");
    assert_eq!(
        strings(&user["groups"]),
        vec![
            "system:bootstrappers",
            "system:bootstrappers:worker",
            "system:authenticated"
        ]
    );
    let config = token_kubeconfig(&api, "bootstrap", token);
    // what a joining node needs: may create a CertificateSigningRequest, nothing else
    let allowed = |verb: &str, group: &str, resource: &str| {
        let review = json!({"apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": verb, "group": group, "resource": resource}}});
        let file = api.data_dir.join("review.json");
        std::fs::write(&file, review.to_string()).unwrap();
        let out = kubectl_with(
            &api,
            KUBECTL_133,
            &config,
            &[
                "create",
                "--raw",
                "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                "-f",
                file.to_str().unwrap(),
            ],
        );
        let answer: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|_| panic!("review: {}", String::from_utf8_lossy(&out.stderr)));
        answer["status"]["allowed"] == true
    };
    assert!(allowed(
        "create",
        "certificates.k8s.io",
        "certificatesigningrequests"
    ));
    assert!(!allowed("list", "", "secrets"));
    // a wrong secret part is no bootstrap token at all
    assert!(refused(&api, KUBECTL_133, "abcdef.0123456789abcdee").contains(UNAUTHORIZED));
    // expired: refused
    api.kubectl(
        KUBECTL_133,
        &[
            "patch",
            "secret",
            "-n",
            "kube-system",
            "bootstrap-token-abcdef",
            "-p",
            r#"{"stringData": {"expiration": "2001-01-01T00:00:00Z"}}"#,
        ],
    );
    assert!(refused(&api, KUBECTL_133, token).contains(UNAUTHORIZED));
}

/// `curl` without credentials (kubectl would prompt for a password): status and body.
fn anonymous(api: &ApiServer, path: &str) -> (String, String) {
    let out = support::run_guarded(
        Command::new("curl")
            .args(["-s", "--cacert"])
            .arg(api.data_dir.join("tls/ca.crt"))
            .args(["-w", "\n%{http_code}"])
            .arg(format!("https://127.0.0.1:{}{path}", api.port)),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or_default();
    (code.to_string(), body.to_string())
}

#[test]
fn anonymous_requests_see_only_public_info_unless_anonymous_auth_is_off() {
    let api = ApiServer::start(Backend::Embedded);
    assert_eq!(anonymous(&api, "/healthz"), ("200".into(), "ok".into()));
    assert_eq!(anonymous(&api, "/version").0, "200");
    let (code, body) = anonymous(&api, "/api/v1/namespaces");
    assert_eq!(code, "403", "{body}");
    let status: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        status["message"],
        "namespaces is forbidden: User \"system:anonymous\" cannot list resource \"namespaces\" in API group \"\" at the cluster scope"
    );
    drop(api);

    let api = ApiServer::start_with(Backend::Embedded, &["--anonymous-auth=false"]);
    let (code, body) = anonymous(&api, "/version");
    assert_eq!(code, "401", "{body}");
    assert!(body.contains("\"reason\":\"Unauthorized\""), "{body}");
}
