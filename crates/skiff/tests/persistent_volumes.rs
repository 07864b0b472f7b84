//! The PersistentVolume controller and the storage protection finalizers in a real
//! `skiff controller-manager` against a real `skiff apiserver` (no node, no containerd): a
//! static hostPath volume and a claim bind both ways as `kubectl get pv,pvc` shows; deleting
//! the claim leaves the `Retain` volume `Released`; a claim asking for an unknown class stays
//! Pending with upstream's `ProvisioningFailed` event, and one larger than the only volume it
//! may use with upstream's `FailedBinding`; a `WaitForFirstConsumer` claim waits
//! until a node is selected, then is handed to its class's provisioner; a claim a scheduled pod uses stays
//! Terminating until the pod is gone, and a volume no longer bound is deleted at once; a
//! namespace holding a claim deletes completely.

mod support;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::Api;
use support::cluster::controller_manager;
use support::{ApiServer, Backend, eventually, kube_client, line_with, run};

use support::KUBECTL_133 as KUBECTL;

fn volume(name: &str, size: &str) -> String {
    format!(
        r#"{{"apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {{"name": "{name}", "labels": {{"disk": "{name}"}}}},
            "spec": {{"capacity": {{"storage": "{size}"}}, "accessModes": ["ReadWriteOnce"],
                     "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                     "hostPath": {{"path": "/var/lib/skiff-test/{name}"}}}}}}"#
    )
}

fn claim(name: &str, class: &str, selector: Option<&str>) -> String {
    let selector = selector.map_or(String::new(), |disk| {
        format!(r#", "selector": {{"matchLabels": {{"disk": "{disk}"}}}}"#)
    });
    format!(
        r#"{{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {{"name": "{name}", "namespace": "default"}},
            "spec": {{"accessModes": ["ReadWriteOnce"], "storageClassName": "{class}",
                     "resources": {{"requests": {{"storage": "1Gi"}}}}{selector}}}}}"#
    )
}

/// A table line's cells (columns are separated by two spaces or more).
fn columns(line: &str) -> Vec<&str> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

fn phase_of_claim(c: &PersistentVolumeClaim) -> Option<&str> {
    c.status.as_ref()?.phase.as_deref()
}

fn phase_of_volume(v: &PersistentVolume) -> Option<&str> {
    v.status.as_ref()?.phase.as_deref()
}

#[test]
fn claims_bind_release_and_are_protected_while_in_use() {
    run(async {
        let api = ApiServer::start(Backend::Embedded);
        let cm = controller_manager(&api, &[]);
        for name in ["persistentvolume-binder", "pvc-protection", "pv-protection"] {
            assert!(
                cm.ready.contains(name),
                "{name} is on by default: {}",
                cm.ready
            );
        }
        let client = kube_client(&api).await;
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
        let volumes: Api<PersistentVolume> = Api::all(client.clone());

        // a static volume and a claim bind both ways
        api.kubectl_stdin(KUBECTL, &["apply", "-f", "-"], Some(&volume("pv-a", "2Gi")));
        api.kubectl_stdin(
            KUBECTL,
            &["apply", "-f", "-"],
            Some(&claim("data", "", Some("pv-a"))),
        );
        eventually("data bound to pv-a", || async {
            let c = claims.get("data").await.ok()?;
            let v = volumes.get("pv-a").await.ok()?;
            (phase_of_claim(&c) == Some("Bound") && phase_of_volume(&v) == Some("Bound"))
                .then_some(())
        })
        .await;
        let out = api.kubectl(KUBECTL, &["get", "pv,pvc", "-n", "default"]);
        let tables: Vec<Vec<Vec<&str>>> = out
            .split("\n\n")
            .map(|t| t.lines().map(columns).collect())
            .collect();
        assert_eq!(
            tables[0][0],
            [
                "NAME",
                "CAPACITY",
                "ACCESS MODES",
                "RECLAIM POLICY",
                "STATUS",
                "CLAIM",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "REASON",
                "AGE"
            ],
            "{out}"
        );
        assert_eq!(
            tables[0][1][..6],
            [
                "persistentvolume/pv-a",
                "2Gi",
                "RWO",
                "Retain",
                "Bound",
                "default/data"
            ],
            "{out}"
        );
        assert_eq!(
            tables[1][0],
            [
                "NAME",
                "STATUS",
                "VOLUME",
                "CAPACITY",
                "ACCESS MODES",
                "STORAGECLASS",
                "VOLUMEATTRIBUTESCLASS",
                "AGE"
            ],
            "{out}"
        );
        assert_eq!(
            tables[1][1][..5],
            ["persistentvolumeclaim/data", "Bound", "pv-a", "2Gi", "RWO"],
            "{out}"
        );
        let bound = claims.get("data").await.unwrap();
        let annotations = bound.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations["pv.kubernetes.io/bind-completed"], "yes");
        assert_eq!(annotations["pv.kubernetes.io/bound-by-controller"], "yes");

        // deleting the claim releases the Retain volume, which keeps its claim reference
        api.kubectl(KUBECTL, &["delete", "pvc", "data", "-n", "default"]);
        eventually("pv-a released", || async {
            let v = volumes.get("pv-a").await.ok()?;
            (phase_of_volume(&v) == Some("Released")).then_some(())
        })
        .await;
        let out = api.kubectl(KUBECTL, &["get", "pv", "pv-a"]);
        line_with(
            &out,
            &["pv-a", "2Gi", "RWO", "Retain", "Released", "default/data"],
        );
        // no longer bound, the volume is deleted at once (pv-protection lets it go)
        api.kubectl(KUBECTL, &["delete", "pv", "pv-a"]);
        assert!(volumes.get_opt("pv-a").await.unwrap().is_none());

        // an unknown class: Pending, with upstream's event
        api.kubectl_stdin(
            KUBECTL,
            &["apply", "-f", "-"],
            Some(&claim("fast-data", "nosuch", None)),
        );
        let described = api.kubectl_until(
            KUBECTL,
            &["describe", "pvc", "fast-data", "-n", "default"],
            None,
            |out| String::from_utf8_lossy(&out.stdout).contains("ProvisioningFailed"),
        );
        let described = String::from_utf8_lossy(&described.stdout).into_owned();
        line_with(&described, &["Status:", "Pending"]);
        line_with(
            &described,
            &[
                "Warning",
                "ProvisioningFailed",
                "persistentvolume-controller",
                "storageclass.storage.k8s.io \"nosuch\" not found",
            ],
        );

        // a claim larger than the only volume it may use: Pending, with upstream's event, and
        // the volume stays Available
        api.kubectl_stdin(
            KUBECTL,
            &["apply", "-f", "-"],
            Some(&volume("pv-small", "512Mi")),
        );
        api.kubectl_stdin(
            KUBECTL,
            &["apply", "-f", "-"],
            Some(&claim("big", "", Some("pv-small"))),
        );
        let described = api.kubectl_until(
            KUBECTL,
            &["describe", "pvc", "big", "-n", "default"],
            None,
            |out| String::from_utf8_lossy(&out.stdout).contains("FailedBinding"),
        );
        let described = String::from_utf8_lossy(&described.stdout).into_owned();
        line_with(&described, &["Status:", "Pending"]);
        line_with(
            &described,
            &[
                // Normal, as upstream's (it waits for a volume to appear)
                "Normal",
                "FailedBinding",
                "persistentvolume-controller",
                "no persistent volumes available for this claim and no storage class is set",
            ],
        );
        let small = api.kubectl(KUBECTL, &["get", "pv", "pv-small", "--no-headers"]);
        assert_eq!(
            columns(&small)[..5],
            ["pv-small", "512Mi", "RWO", "Retain", "Available"]
        );

        // a claim a scheduled pod uses stays Terminating until the pod is gone
        api.kubectl_stdin(KUBECTL, &["apply", "-f", "-"], Some(&volume("pv-b", "1Gi")));
        api.kubectl_stdin(
            KUBECTL,
            &["apply", "-f", "-"],
            Some(&claim("used", "", Some("pv-b"))),
        );
        api.kubectl_stdin(
            KUBECTL,
            &["apply", "-f", "-"],
            Some(r#"{"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}"#),
        );
        eventually("the default service account", || async {
            let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(client.clone(), "default");
            accounts.get_opt("default").await.ok()?
        })
        .await;
        api.kubectl_stdin(
            KUBECTL,
            &["apply", "-f", "-"],
            Some(
                r#"{"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "user", "namespace": "default"},
                    "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}],
                             "volumes": [{"name": "data",
                                          "persistentVolumeClaim": {"claimName": "used"}}]}}"#,
            ),
        );
        eventually("used bound", || async {
            let c = claims.get("used").await.ok()?;
            (phase_of_claim(&c) == Some("Bound")).then_some(())
        })
        .await;
        api.kubectl(
            KUBECTL,
            &["delete", "pvc", "used", "-n", "default", "--wait=false"],
        );
        // a claim nobody uses, deleted after it, goes: the controller has looked at both
        api.kubectl_stdin(
            KUBECTL,
            &["apply", "-f", "-"],
            Some(&claim("unused", "", None)),
        );
        api.kubectl(
            KUBECTL,
            &["delete", "pvc", "unused", "-n", "default", "--wait=false"],
        );
        eventually("unused deleted", || async {
            claims.get_opt("unused").await.ok()?.is_none().then_some(())
        })
        .await;
        let kept = claims.get("used").await.unwrap();
        assert!(kept.metadata.deletion_timestamp.is_some());
        assert_eq!(
            kept.metadata.finalizers.as_deref(),
            Some(&["kubernetes.io/pvc-protection".to_string()][..])
        );
        let out = api.kubectl(KUBECTL, &["get", "pvc", "used", "-n", "default"]);
        line_with(&out, &["used", "Terminating", "pv-b"]);
        // a bound volume being deleted waits too
        api.kubectl(KUBECTL, &["delete", "pv", "pv-b", "--wait=false"]);
        let deleting = volumes.get("pv-b").await.unwrap();
        assert!(deleting.metadata.deletion_timestamp.is_some());
        // the pod goes: so does the claim, then its volume (Released, no longer bound)
        api.kubectl(
            KUBECTL,
            &[
                "delete",
                "pod",
                "user",
                "-n",
                "default",
                "--grace-period=0",
                "--force",
            ],
        );
        eventually("used deleted", || async {
            claims.get_opt("used").await.ok()?.is_none().then_some(())
        })
        .await;
        eventually("pv-b deleted", || async {
            volumes.get_opt("pv-b").await.ok()?.is_none().then_some(())
        })
        .await;

        // WaitForFirstConsumer: the claim waits for the scheduler's node, then its class's
        // provisioner is asked for a volume
        api.kubectl_stdin(
            KUBECTL,
            &["apply", "-f", "-"],
            Some(
                r#"{"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                    "metadata": {"name": "later"}, "provisioner": "example.com/later",
                    "volumeBindingMode": "WaitForFirstConsumer"}"#,
            ),
        );
        api.kubectl_stdin(
            KUBECTL,
            &["apply", "-f", "-"],
            Some(&claim("later", "later", None)),
        );
        let described = api.kubectl_until(
            KUBECTL,
            &["describe", "pvc", "later", "-n", "default"],
            None,
            |out| String::from_utf8_lossy(&out.stdout).contains("WaitForFirstConsumer"),
        );
        let described = String::from_utf8_lossy(&described.stdout).into_owned();
        line_with(
            &described,
            &[
                "Normal",
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
            ],
        );
        api.kubectl(
            KUBECTL,
            &[
                "annotate",
                "pvc",
                "later",
                "-n",
                "default",
                "volume.kubernetes.io/selected-node=n1",
            ],
        );
        let provisioner = eventually("the provisioner annotation", || async {
            let c = claims.get("later").await.ok()?;
            c.metadata
                .annotations?
                .get("volume.kubernetes.io/storage-provisioner")
                .cloned()
        })
        .await;
        assert_eq!(provisioner, "example.com/later");
        let described = api.kubectl_until(
            KUBECTL,
            &["describe", "pvc", "later", "-n", "default"],
            None,
            |out| String::from_utf8_lossy(&out.stdout).contains("ExternalProvisioning"),
        );
        let described = String::from_utf8_lossy(&described.stdout).into_owned();
        line_with(&described, &["Status:", "Pending"]);
        line_with(
            &described,
            &[
                "ExternalProvisioning",
                "external provisioner 'example.com/later'",
            ],
        );

        // a namespace holding a claim deletes completely
        api.kubectl(KUBECTL, &["create", "namespace", "vols"]);
        let in_vols = claim("scratch", "", None).replace("\"default\"", "\"vols\"");
        api.kubectl_stdin(KUBECTL, &["apply", "-f", "-"], Some(&in_vols));
        api.kubectl(KUBECTL, &["delete", "namespace", "vols", "--wait=false"]);
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        eventually("namespace vols deleted", || async {
            namespaces
                .get_opt("vols")
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
    });
}
