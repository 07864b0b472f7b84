//! Encryption at rest against a real `skiff apiserver` over a real etcd, with
//! `--encryption-provider-config`: Secrets are ciphertext with upstream's
//! `k8s:enc:aesgcm:v1:<key>:` prefix in etcd and read back (get, list, watch) through kubectl;
//! other resources stay plaintext; after a key rotation (new key first, restart) the old
//! objects still read, and `kubectl get secrets -A -o json | kubectl replace -f -` rewrites them
//! under the new key; with the key gone, reading the object is a clear 500, not a crash.

mod support;

use std::path::Path;

use support::{ApiServer, Backend, KUBECTL_133};

const KEY1: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; // 32 bytes
const KEY2: &str = "ZmVkY2JhOTg3NjU0MzIxMGZlZGNiYTk4NzY1NDMyMTA="; // 32 bytes
const KEY3: &str = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY="; // 32 bytes

fn config(keys: &[(&str, &str)], identity: bool) -> String {
    let keys: Vec<String> = keys
        .iter()
        .map(|(n, s)| format!("      - {{name: {n}, secret: \"{s}\"}}\n"))
        .collect();
    format!(
        "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n{}{}",
        keys.concat(),
        if identity { "  - identity: {}\n" } else { "" }
    )
}

/// The raw value etcd holds for `key`.
async fn raw(api: &ApiServer, key: &str) -> Vec<u8> {
    let endpoint = api.etcd_endpoint().expect("an etcd backend");
    let mut etcd = etcd_client::Client::connect([endpoint], None)
        .await
        .expect("connect to etcd");
    let resp = etcd.get(key, None).await.expect("etcd get");
    resp.kvs()
        .first()
        .unwrap_or_else(|| panic!("no key {key} in etcd"))
        .value()
        .to_vec()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write the encryption configuration");
}

#[test]
fn secrets_are_encrypted_in_etcd_read_back_and_move_to_a_new_key_on_replace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("encryption.yaml");
    write(&path, &config(&[("key1", KEY1)], true));
    let mut api = ApiServer::start_with(
        Backend::Etcd,
        &["--encryption-provider-config", path.to_str().unwrap()],
    );
    let (mut watch, lines) =
        api.kubectl_stream(KUBECTL_133, &["get", "secrets", "-w", "-o", "name"]);
    api.kubectl(
        KUBECTL_133,
        &[
            "create",
            "secret",
            "generic",
            "s1",
            "--from-literal=password=hunter2",
        ],
    );
    api.kubectl(
        KUBECTL_133,
        &["create", "configmap", "plain", "--from-literal=k=visible"],
    );
    // the watch (from the watch cache, fed by the store watch) sees the decrypted secret
    support::expect_line(&lines, |l| l == "secret/s1");
    let _ = watch.kill();
    let _ = watch.wait();
    let secret = "/registry/core/secrets/default/s1";
    support::run(async {
        let stored = raw(&api, secret).await;
        assert!(
            stored.starts_with(b"k8s:enc:aesgcm:v1:key1:"),
            "{}",
            String::from_utf8_lossy(&stored)
        );
        assert!(!contains(&stored, "hunter2") && !contains(&stored, "aHVudGVyMg=="));
        let plain = raw(&api, "/registry/core/configmaps/default/plain").await;
        assert!(contains(&plain, "visible"), "configmaps are not covered");
    });
    let read = |api: &ApiServer| {
        api.kubectl(
            KUBECTL_133,
            &["get", "secret", "s1", "-o", "jsonpath={.data.password}"],
        )
    };
    assert_eq!(read(&api), "aHVudGVyMg==");

    // rotation: key2 first, key1 still there to read
    write(&path, &config(&[("key2", KEY2), ("key1", KEY1)], true));
    api.restart();
    assert_eq!(read(&api), "aHVudGVyMg==");
    support::run(async {
        assert!(
            raw(&api, secret)
                .await
                .starts_with(b"k8s:enc:aesgcm:v1:key1:")
        );
    });
    let all = api.kubectl(KUBECTL_133, &["get", "secrets", "-A", "-o", "json"]);
    api.kubectl_stdin(KUBECTL_133, &["replace", "-f", "-"], Some(&all));
    support::run(async {
        let stored = raw(&api, secret).await;
        assert!(
            stored.starts_with(b"k8s:enc:aesgcm:v1:key2:"),
            "{}",
            String::from_utf8_lossy(&stored)
        );
    });

    // key1 can go now; with no key that opens it (and no identity) the object is a clear
    // error, and the server carries on
    write(&path, &config(&[("key3", KEY3)], false));
    api.restart();
    let out = api.kubectl_fails(KUBECTL_133, &["get", "secret", "s1"], None);
    assert!(out.contains("InternalError"), "{out}");
    assert!(
        out.contains(r#"unable to transform key "/registry/core/secrets/default/s1""#),
        "{out}"
    );
    api.kubectl(
        KUBECTL_133,
        &["create", "secret", "generic", "s2", "--from-literal=k=v"],
    );
    assert_eq!(
        api.kubectl(
            KUBECTL_133,
            &["get", "secret", "s2", "-o", "jsonpath={.data.k}"]
        ),
        "dg=="
    );
    assert!(
        api.kubectl(KUBECTL_133, &["get", "configmap", "plain", "-o", "name"])
            .contains("plain")
    );
}

#[test]
fn a_bad_encryption_configuration_stops_the_server_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("encryption.yaml");
    write(&path, &config(&[("short", "c2hvcnQ=")], true));
    let out = support::run_guarded(
        std::process::Command::new(env!("CARGO_BIN_EXE_skiff"))
            .args(["apiserver", "--secure-port", "0", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--encryption-provider-config")
            .arg(&path),
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("secret is not of the expected length, got 5"),
        "{err}"
    );
}
