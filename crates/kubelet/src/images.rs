//! Images without a registry: the pause (sandbox) image and a busybox image built from the
//! host's static `/bin/busybox` as one OCI image-layout tarball, and importing archives into
//! containerd's `k8s.io` namespace (the [`ImageImporter`] trait; [`CtrImporter`] runs Debian's
//! `ctr`). Built-in images are imported once, when the runtime does not have them yet.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde_json::json;

use crate::cri::ContainerRuntime;

/// The sandbox image containerd is configured with.
pub const PAUSE_IMAGE: &str = "localhost/pause:3.9";
/// What `image: busybox` resolves to, so manifests that name it run offline.
pub const BUSYBOX_IMAGE: &str = "docker.io/library/busybox:latest";
/// The pause container: PID 1 holds the pod's namespaces and exits at once on SIGTERM.
const PAUSE_COMMAND: &str = r#"trap "exit 0" TERM INT; sleep infinity & wait"#;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("listing the applets of {path}: {reason}")]
    Applets { path: PathBuf, reason: String },
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("importing {path}: {reason}")]
    Import { path: PathBuf, reason: String },
    #[error("checking image {image}: {source}")]
    Status {
        image: String,
        #[source]
        source: crate::cri::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Loads an image archive (OCI layout or `docker save` tarball) into the runtime.
#[async_trait]
pub trait ImageImporter: Send + Sync {
    async fn import(&self, archive: &Path) -> Result<()>;
}

/// `ctr -a SOCKET -n k8s.io images import FILE`. Shelling out to Debian's `ctr` (shipped with
/// containerd) because the import needs containerd's content, images and snapshot APIs, whose
/// protos k8s-cri does not carry, and ctr already does the unpacking right.
#[derive(Debug, Clone)]
pub struct CtrImporter {
    pub ctr: PathBuf,
    pub socket: PathBuf,
}

#[async_trait]
impl ImageImporter for CtrImporter {
    async fn import(&self, archive: &Path) -> Result<()> {
        let out = tokio::process::Command::new(&self.ctr)
            .arg("-a")
            .arg(&self.socket)
            .args(["-n", "k8s.io", "images", "import"])
            .arg(archive)
            .output()
            .await
            .map_err(|e| Error::Import {
                path: archive.into(),
                reason: format!("running {}: {e}", self.ctr.display()),
            })?;
        if !out.status.success() {
            return Err(Error::Import {
                path: archive.into(),
                reason: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(())
    }
}

/// Imports the built-in pause and busybox images unless the runtime already has both; the
/// archive is written to `work_dir/builtin-images.tar`.
pub async fn ensure_builtin(
    runtime: &dyn ContainerRuntime,
    importer: &dyn ImageImporter,
    busybox: &Path,
    work_dir: &Path,
) -> Result<()> {
    let mut missing = false;
    for image in [PAUSE_IMAGE, BUSYBOX_IMAGE] {
        let status = runtime
            .image_status(image)
            .await
            .map_err(|source| Error::Status {
                image: image.into(),
                source,
            })?;
        missing |= status.is_none();
    }
    if !missing {
        return Ok(());
    }
    let applets = applets(busybox)?;
    let archive = build_archive(busybox, &applets)?;
    let path = work_dir.join("builtin-images.tar");
    std::fs::create_dir_all(work_dir).map_err(|source| Error::Write {
        path: work_dir.into(),
        source,
    })?;
    std::fs::write(&path, archive).map_err(|source| Error::Write {
        path: path.clone(),
        source,
    })?;
    importer.import(&path).await?;
    tracing::info!(images = ?[PAUSE_IMAGE, BUSYBOX_IMAGE], "imported the built-in images");
    Ok(())
}

/// The applet names `busybox --list` prints.
pub fn applets(busybox: &Path) -> Result<Vec<String>> {
    let out = std::process::Command::new(busybox)
        .arg("--list")
        .output()
        .map_err(|e| Error::Applets {
            path: busybox.into(),
            reason: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(Error::Applets {
            path: busybox.into(),
            reason: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty() && !a.contains('/') && *a != "busybox")
        .map(String::from)
        .collect())
}

/// An OCI image layout (as a tar) holding two images over one layer: busybox with its applets
/// in `/bin`, tagged [`BUSYBOX_IMAGE`] (command `sh`), and [`PAUSE_IMAGE`].
pub fn build_archive(busybox: &Path, applets: &[String]) -> Result<Vec<u8>> {
    build_busybox_images(
        busybox,
        applets,
        &[
            (BUSYBOX_IMAGE, json!(null), json!(["sh"])),
            (
                PAUSE_IMAGE,
                json!(["/bin/sh", "-c", PAUSE_COMMAND]),
                json!(null),
            ),
        ],
    )
}

/// An OCI image layout (as a tar) of images over one busybox layer, each `(name, entrypoint,
/// cmd)`: images that differ in their command are distinct images (their own ids).
pub fn build_busybox_images(
    busybox: &Path,
    applets: &[String],
    images: &[(&str, serde_json::Value, serde_json::Value)],
) -> Result<Vec<u8>> {
    let binary = std::fs::read(busybox).map_err(|source| Error::Read {
        path: busybox.into(),
        source,
    })?;
    let layer = rootfs_layer(&binary, applets);
    let layer_digest = sha256(&layer);
    let mut blobs: Vec<(String, Vec<u8>)> = vec![(layer_digest.clone(), layer.clone())];
    let mut manifests = Vec::new();
    for (name, entrypoint, cmd) in images {
        let config = serde_json::to_vec(&json!({
            "architecture": oci_arch(),
            "os": "linux",
            "config": {
                "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                "Entrypoint": entrypoint,
                "Cmd": cmd,
                "WorkingDir": "/",
            },
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
            "history": [{"created_by": "skiff: /bin/busybox from the host's busybox-static"}],
        }))
        .expect("JSON serializes");
        let config_digest = sha256(&config);
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": config_digest,
                "size": config.len(),
            },
            "layers": [{
                "mediaType": "application/vnd.oci.image.layer.v1.tar",
                "digest": layer_digest,
                "size": layer.len(),
            }],
        }))
        .expect("JSON serializes");
        let manifest_digest = sha256(&manifest);
        let tag = name.rsplit_once(':').map(|(_, t)| t).unwrap_or("latest");
        manifests.push(json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest.len(),
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": tag,
            },
            "platform": {"architecture": oci_arch(), "os": "linux"},
        }));
        blobs.push((config_digest, config));
        blobs.push((manifest_digest, manifest));
    }
    let index = serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": manifests}))
        .expect("JSON serializes");

    let mut out = tar::Builder::new(Vec::new());
    add_file(
        &mut out,
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#,
        0o644,
    );
    add_file(&mut out, "index.json", &index, 0o644);
    add_dir(&mut out, "blobs/", 0o755);
    add_dir(&mut out, "blobs/sha256/", 0o755);
    for (digest, data) in &blobs {
        let hex = digest.trim_start_matches("sha256:");
        add_file(&mut out, &format!("blobs/sha256/{hex}"), data, 0o644);
    }
    Ok(out.into_inner().expect("writing to a Vec cannot fail"))
}

/// The root filesystem: the usual top-level directories, `/bin/busybox` with one symlink per
/// applet, and a minimal `/etc/passwd` and `/etc/group`.
fn rootfs_layer(binary: &[u8], applets: &[String]) -> Vec<u8> {
    let mut layer = tar::Builder::new(Vec::new());
    for dir in [
        "bin/", "dev/", "etc/", "home/", "proc/", "root/", "sys/", "usr/", "var/",
    ] {
        add_dir(&mut layer, dir, 0o755);
    }
    add_dir(&mut layer, "tmp/", 0o1777);
    add_file(&mut layer, "bin/busybox", binary, 0o755);
    for applet in applets {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Symlink);
        header.set_mode(0o777);
        header.set_size(0);
        header.set_mtime(0);
        layer
            .append_link(&mut header, format!("bin/{applet}"), "busybox")
            .expect("writing to a Vec cannot fail");
    }
    add_file(
        &mut layer,
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n",
        0o644,
    );
    add_file(
        &mut layer,
        "etc/group",
        b"root:x:0:\nnobody:x:65534:\n",
        0o644,
    );
    layer.into_inner().expect("writing to a Vec cannot fail")
}

fn add_file(tar: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8], mode: u32) {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(mode);
    header.set_size(data.len() as u64);
    header.set_mtime(0);
    tar.append_data(&mut header, path, data)
        .expect("writing to a Vec cannot fail");
}

fn add_dir(tar: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32) {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_mode(mode);
    header.set_size(0);
    header.set_mtime(0);
    tar.append_data(&mut header, path, std::io::empty())
        .expect("writing to a Vec cannot fail");
}

fn sha256(data: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, data);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// The OCI name of this machine's architecture.
fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::io::Read;

    use super::*;

    fn entries(archive: &[u8]) -> HashMap<String, Vec<u8>> {
        let mut out = HashMap::new();
        let mut tar = tar::Archive::new(archive);
        for entry in tar.entries().unwrap() {
            let mut entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            out.insert(path, data);
        }
        out
    }

    #[test]
    fn the_archive_is_an_oci_layout_naming_both_images_with_blobs_matching_their_digests() {
        let dir = tempfile::tempdir().unwrap();
        let fake_busybox = dir.path().join("busybox");
        std::fs::write(&fake_busybox, b"\x7fELF not really").unwrap();
        let archive = build_archive(&fake_busybox, &["sh".into(), "sleep".into()]).unwrap();
        let files = entries(&archive);
        assert!(files.contains_key("oci-layout"));
        let index: serde_json::Value = serde_json::from_slice(&files["index.json"]).unwrap();
        let names: Vec<&str> = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                m["annotations"]["io.containerd.image.name"]
                    .as_str()
                    .unwrap()
            })
            .collect();
        assert_eq!(names, [BUSYBOX_IMAGE, PAUSE_IMAGE]);
        for (path, data) in &files {
            if let Some(hex) = path.strip_prefix("blobs/sha256/")
                && !hex.is_empty()
            {
                assert_eq!(sha256(data), format!("sha256:{hex}"), "{path}");
            }
        }
        // the pause image's entrypoint traps SIGTERM
        let pause = &index["manifests"][1]["digest"].as_str().unwrap()[7..];
        let manifest: serde_json::Value =
            serde_json::from_slice(&files[&format!("blobs/sha256/{pause}")]).unwrap();
        let config_hex = &manifest["config"]["digest"].as_str().unwrap()[7..];
        let config: serde_json::Value =
            serde_json::from_slice(&files[&format!("blobs/sha256/{config_hex}")]).unwrap();
        assert_eq!(config["config"]["Entrypoint"][2], PAUSE_COMMAND);
    }

    #[test]
    fn the_layer_holds_busybox_and_a_symlink_per_applet() {
        let layer = rootfs_layer(b"binary", &["sh".into(), "sleep".into()]);
        let mut tar = tar::Archive::new(&layer[..]);
        let mut links = Vec::new();
        let mut has_binary = false;
        for entry in tar.entries().unwrap() {
            let entry = entry.unwrap();
            let path = entry.path().unwrap().to_string_lossy().into_owned();
            if entry.header().entry_type() == tar::EntryType::Symlink {
                links.push((path, entry.link_name().unwrap().unwrap().into_owned()));
            } else if path == "bin/busybox" {
                has_binary = true;
            }
        }
        assert!(has_binary);
        assert_eq!(
            links,
            [
                ("bin/sh".to_string(), PathBuf::from("busybox")),
                ("bin/sleep".to_string(), PathBuf::from("busybox"))
            ]
        );
    }

    #[derive(Default)]
    struct RecordingImporter(parking_lot::Mutex<Vec<PathBuf>>);

    #[async_trait]
    impl ImageImporter for RecordingImporter {
        async fn import(&self, archive: &Path) -> Result<()> {
            self.0.lock().push(archive.into());
            Ok(())
        }
    }

    #[tokio::test]
    async fn built_in_images_are_imported_only_when_missing() {
        let dir = tempfile::tempdir().unwrap();
        let busybox = dir.path().join("busybox");
        std::fs::write(&busybox, "#!/bin/sh\necho sh; echo sleep\n").unwrap();
        std::fs::set_permissions(
            &busybox,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let runtime = crate::fake::FakeRuntime::new();
        let importer = RecordingImporter::default();
        ensure_builtin(&runtime, &importer, &busybox, dir.path())
            .await
            .unwrap();
        assert_eq!(importer.0.lock().len(), 1);
        assert!(dir.path().join("builtin-images.tar").is_file());

        runtime.add_image(PAUSE_IMAGE);
        runtime.add_image(BUSYBOX_IMAGE);
        ensure_builtin(&runtime, &importer, &busybox, dir.path())
            .await
            .unwrap();
        assert_eq!(importer.0.lock().len(), 1, "nothing imported a second time");
    }
}
