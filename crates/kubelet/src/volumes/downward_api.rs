//! downwardAPI volumes (and projected downwardAPI sources): the pod's metadata (name,
//! namespace, uid, one label or annotation, or all of them as upstream's `key="value"` lines)
//! and its containers' resources as files, refreshed when labels or annotations change.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;

use super::atomic_writer::{FileProjection, Payload};
use crate::config::{PodRuntimeFields, field_ref};

/// The plugin's directory name under `volumes/`.
pub const PLUGIN: &str = "kubernetes.io~downward-api";

/// A string quoted as Go's `%q` does (upstream formats label and annotation values so).
fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// All labels or annotations, one `key="value"` line each, sorted, as upstream's `FormatMap`.
fn format_map(map: Option<&BTreeMap<String, String>>) -> String {
    map.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The files of the items.
pub fn payload(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: i32,
    allocatable: &BTreeMap<String, ApiQuantity>,
) -> Result<Payload, String> {
    let mut out = Payload::new();
    let fields = PodRuntimeFields {
        allocatable: allocatable.clone(),
        ..Default::default()
    };
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            match f.field_path.as_str() {
                "metadata.labels" => format_map(pod.metadata.labels.as_ref()),
                "metadata.annotations" => format_map(pod.metadata.annotations.as_ref()),
                path if path.starts_with("metadata.") => field_ref(pod, path, &fields)
                    .ok_or_else(|| format!("unsupported fieldPath: {path}"))?,
                path => return Err(format!("unsupported fieldPath: {path}")),
            }
        } else if let Some(r) = &item.resource_field_ref {
            let name = r.container_name.clone().unwrap_or_default();
            let container = pod
                .spec
                .iter()
                .flat_map(|s| {
                    s.containers
                        .iter()
                        .chain(s.init_containers.iter().flatten())
                })
                .find(|c| c.name == name)
                .ok_or_else(|| format!("container {name:?} not found in the pod"))?;
            crate::resource_field::value(container, r, allocatable)?
        } else {
            continue;
        };
        out.insert(
            item.path.clone(),
            FileProjection {
                data: value.into_bytes(),
                mode: item.mode.unwrap_or(default_mode) as u32,
                fs_user: None,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u1",
                "labels": {"app": "web", "tier": "front"},
                "annotations": {"note": "say \"hi\"\nbye"}},
            "spec": {"containers": [{"name": "c",
                "resources": {"limits": {"memory": "64Mi"}}}]},
        }))
        .unwrap()
    }

    fn items(v: serde_json::Value) -> Vec<DownwardAPIVolumeFile> {
        serde_json::from_value(v).unwrap()
    }

    fn text(p: &Payload, path: &str) -> String {
        String::from_utf8(p[path].data.clone()).unwrap()
    }

    #[test]
    fn metadata_fields_become_files_and_maps_are_quoted_lines() {
        let p = payload(
            &pod(),
            &items(json!([
                {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                {"path": "uid", "fieldRef": {"fieldPath": "metadata.uid"}, "mode": 0o400},
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
                {"path": "app", "fieldRef": {"fieldPath": "metadata.labels['app']"}},
            ])),
            0o644,
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(text(&p, "name"), "web");
        assert_eq!((text(&p, "uid"), p["uid"].mode), ("u1".into(), 0o400));
        assert_eq!(text(&p, "labels"), "app=\"web\"\ntier=\"front\"");
        assert_eq!(text(&p, "annotations"), r#"note="say \"hi\"\nbye""#);
        assert_eq!(text(&p, "app"), "web");
    }

    #[test]
    fn resource_fields_name_their_container_and_divisor() {
        let p = payload(
            &pod(),
            &items(json!([{"path": "mem", "resourceFieldRef":
                {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}}])),
            0o644,
            &BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(text(&p, "mem"), "64");
    }

    #[test]
    fn status_fields_are_not_available_in_volumes() {
        let err = payload(
            &pod(),
            &items(json!([{"path": "ip", "fieldRef": {"fieldPath": "status.podIP"}}])),
            0o644,
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert_eq!(err, "unsupported fieldPath: status.podIP");
    }
}
