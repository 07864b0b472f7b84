//! A container's environment as upstream's kubelet builds it: `envFrom` ConfigMaps and Secrets
//! (with their prefix), then `env` entries (plain values, downward-API field references,
//! ConfigMap and Secret keys, container resources), later names replacing earlier ones.
//! ConfigMaps and Secrets are read through the API server; a missing one (unless `optional`)
//! keeps the container from being created, reported as `CreateContainerConfigError`.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Container as ApiContainer, Pod};

use crate::api::PodApi;
use crate::config::{PodRuntimeFields, field_ref};
use crate::cri::KeyValue;
use crate::expansion;

/// Why the environment could not be built (the message of `CreateContainerConfigError`).
pub type Problem = String;

#[derive(Clone, Copy)]
enum Source {
    ConfigMap,
    Secret,
}

impl Source {
    fn kind(self) -> &'static str {
        match self {
            Source::ConfigMap => "configmap",
            Source::Secret => "secret",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Source::ConfigMap => "ConfigMap",
            Source::Secret => "Secret",
        }
    }
}

/// ConfigMaps and Secrets read once per container start.
struct Sources<'a> {
    api: &'a dyn PodApi,
    namespace: String,
    read: BTreeMap<(&'static str, String), Option<BTreeMap<String, String>>>,
}

impl Sources<'_> {
    async fn get(
        &mut self,
        source: Source,
        name: &str,
    ) -> Result<Option<&BTreeMap<String, String>>, Problem> {
        let key = (source.kind(), name.to_string());
        if !self.read.contains_key(&key) {
            let data = match source {
                Source::ConfigMap => self.api.config_map(&self.namespace, name).await,
                Source::Secret => self.api.secret(&self.namespace, name).await,
            }
            .map_err(|e| e.to_string())?;
            // environment values are strings: bytes that are not UTF-8 are replaced
            let text = data.map(|d| {
                d.into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
                    .collect()
            });
            self.read.insert(key.clone(), text);
        }
        Ok(self.read[&key].as_ref())
    }

    /// One key, or None when the source or key is missing and `optional`.
    async fn key(
        &mut self,
        source: Source,
        name: &str,
        key: &str,
        optional: bool,
    ) -> Result<Option<String>, Problem> {
        let namespace = self.namespace.clone();
        match self.get(source, name).await? {
            Some(data) => match data.get(key) {
                Some(v) => Ok(Some(v.clone())),
                None if optional => Ok(None),
                None => Err(format!(
                    "couldn't find key {key} in {} {namespace}/{name}",
                    source.title()
                )),
            },
            None if optional => Ok(None),
            None => Err(format!("{} \"{name}\" not found", source.kind())),
        }
    }
}

fn set(envs: &mut Vec<KeyValue>, key: String, value: String) {
    match envs.iter_mut().find(|kv| kv.key == key) {
        Some(kv) => kv.value = value,
        None => envs.push(KeyValue { key, value }),
    }
}

/// The container's environment, in order, or why it cannot be built.
fn defined(envs: &[KeyValue]) -> HashMap<&str, &str> {
    envs.iter()
        .map(|kv| (kv.key.as_str(), kv.value.as_str()))
        .collect()
}

pub async fn resolve(
    api: &dyn PodApi,
    pod: &Pod,
    container: &ApiContainer,
    fields: &PodRuntimeFields,
) -> Result<Vec<KeyValue>, Problem> {
    let mut sources = Sources {
        api,
        namespace: pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        read: BTreeMap::new(),
    };
    let mut envs = Vec::new();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (source, name, optional) = match (&from.config_map_ref, &from.secret_ref) {
            (Some(r), _) => (Source::ConfigMap, r.name.clone(), r.optional == Some(true)),
            (None, Some(r)) => (Source::Secret, r.name.clone(), r.optional == Some(true)),
            (None, None) => continue,
        };
        match sources.get(source, &name).await? {
            Some(data) => {
                for (k, v) in data.clone() {
                    set(&mut envs, format!("{prefix}{k}"), v);
                }
            }
            None if optional => {}
            None => return Err(format!("{} \"{name}\" not found", source.kind())),
        }
    }
    for e in container.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            // literal values may refer to the variables defined before them, as upstream
            (Some(v), _) => Some(expansion::expand(v, &defined(&envs))),
            (None, None) => Some(String::new()),
            (None, Some(from)) => {
                if let Some(f) = &from.field_ref {
                    Some(field_ref(pod, &f.field_path, fields).ok_or_else(|| {
                        format!("unsupported fieldPath {} in env {}", f.field_path, e.name)
                    })?)
                } else if let Some(r) = &from.config_map_key_ref {
                    let optional = r.optional == Some(true);
                    sources
                        .key(Source::ConfigMap, &r.name, &r.key, optional)
                        .await?
                } else if let Some(r) = &from.secret_key_ref {
                    let optional = r.optional == Some(true);
                    sources
                        .key(Source::Secret, &r.name, &r.key, optional)
                        .await?
                } else if let Some(r) = &from.resource_field_ref {
                    let target = match r.container_name.as_deref() {
                        None | Some("") => Some(container),
                        Some(name) => pod.spec.iter().find_map(|s| {
                            s.containers
                                .iter()
                                .chain(s.init_containers.iter().flatten())
                                .find(|c| c.name == name)
                        }),
                    }
                    .ok_or_else(|| {
                        format!(
                            "container {:?} not found in env {}",
                            r.container_name, e.name
                        )
                    })?;
                    Some(crate::resource_field::value(
                        target,
                        r,
                        &fields.allocatable,
                    )?)
                } else {
                    None
                }
            }
        };
        if let Some(value) = value {
            set(&mut envs, e.name.clone(), value);
        }
    }
    Ok(envs)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::RecordingPodApi;

    fn pod_with(container: serde_json::Value) -> (Pod, ApiContainer) {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u1"},
            "spec": {"containers": [container]},
        }))
        .unwrap();
        let c = pod.spec.clone().unwrap().containers[0].clone();
        (pod, c)
    }

    fn api() -> RecordingPodApi {
        let api = RecordingPodApi::default();
        api.config_maps.lock().insert(
            "settings".into(),
            BTreeMap::from([
                ("MODE".to_string(), "fast".to_string()),
                ("LEVEL".to_string(), "3".to_string()),
            ]),
        );
        api.secrets.lock().insert(
            "creds".into(),
            BTreeMap::from([("password".to_string(), "s3cret".to_string())]),
        );
        api
    }

    fn pairs(envs: &[KeyValue]) -> Vec<(&str, &str)> {
        envs.iter()
            .map(|kv| (kv.key.as_str(), kv.value.as_str()))
            .collect()
    }

    #[tokio::test]
    async fn env_from_comes_first_and_env_entries_replace_it() {
        let (pod, c) = pod_with(json!({"name": "c",
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "APP_"}],
        "env": [
            {"name": "APP_MODE", "value": "slow"},
            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
            {"name": "LEVEL", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LEVEL"}}},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ]}));
        let envs = resolve(&api(), &pod, &c, &PodRuntimeFields::default())
            .await
            .unwrap();
        assert_eq!(
            pairs(&envs),
            [
                ("APP_LEVEL", "3"),
                ("APP_MODE", "slow"),
                ("PASSWORD", "s3cret"),
                ("LEVEL", "3"),
                ("NAME", "web"),
            ]
        );
    }

    #[tokio::test]
    async fn resource_field_refs_read_this_or_a_named_container_with_their_divisor() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u1"},
            "spec": {"containers": [
                {"name": "c", "env": [
                    {"name": "MEM", "valueFrom": {"resourceFieldRef":
                        {"resource": "limits.memory", "divisor": "1Mi"}}},
                    {"name": "SIDE_CPU", "valueFrom": {"resourceFieldRef":
                        {"containerName": "side", "resource": "requests.cpu", "divisor": "1m"}}},
                    {"name": "CPU", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                ], "resources": {"limits": {"memory": "32Mi"}}},
                {"name": "side", "resources": {"requests": {"cpu": "300m"}}},
            ]},
        }))
        .unwrap();
        let c = pod.spec.clone().unwrap().containers[0].clone();
        let fields = PodRuntimeFields {
            allocatable: BTreeMap::from([(
                "cpu".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("4".into()),
            )]),
            ..Default::default()
        };
        let envs = resolve(&api(), &pod, &c, &fields).await.unwrap();
        assert_eq!(
            pairs(&envs),
            [("MEM", "32"), ("SIDE_CPU", "300"), ("CPU", "4")]
        );
    }

    #[tokio::test]
    async fn a_missing_config_map_or_key_is_reported_unless_optional() {
        let (pod, c) = pod_with(json!({"name": "c", "env": [
            {"name": "X", "valueFrom": {"configMapKeyRef": {"name": "absent", "key": "k"}}}]}));
        let err = resolve(&api(), &pod, &c, &PodRuntimeFields::default())
            .await
            .unwrap_err();
        assert_eq!(err, "configmap \"absent\" not found");

        let (pod, c) = pod_with(json!({"name": "c", "env": [
            {"name": "X", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "nope"}}}]}));
        let err = resolve(&api(), &pod, &c, &PodRuntimeFields::default())
            .await
            .unwrap_err();
        assert_eq!(err, "couldn't find key nope in Secret prod/creds");

        let (pod, c) = pod_with(json!({"name": "c",
            "envFrom": [{"secretRef": {"name": "absent", "optional": true}}],
            "env": [{"name": "X", "valueFrom": {"configMapKeyRef":
                {"name": "absent", "key": "k", "optional": true}}}]}));
        let envs = resolve(&api(), &pod, &c, &PodRuntimeFields::default())
            .await
            .unwrap();
        assert!(envs.is_empty());
    }

    #[tokio::test]
    async fn literal_values_expand_earlier_variables_and_sourced_values_stay_verbatim() {
        let (pod, c) = pod_with(json!({"name": "c", "env": [
            {"name": "HOST", "value": "db"},
            {"name": "URL", "value": "http://$(HOST):$(PORT)/$$(HOST)"},
            {"name": "PORT", "value": "5432"},
            {"name": "RAW", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
            {"name": "AGAIN", "value": "$(URL)"},
        ]}));
        let api = api();
        api.secrets.lock().insert(
            "creds".into(),
            BTreeMap::from([("password".to_string(), "$(HOST)".to_string())]),
        );
        let envs = resolve(&api, &pod, &c, &PodRuntimeFields::default())
            .await
            .unwrap();
        assert_eq!(
            pairs(&envs),
            [
                ("HOST", "db"),
                ("URL", "http://db:$(PORT)/$(HOST)"),
                ("PORT", "5432"),
                ("RAW", "$(HOST)"),
                ("AGAIN", "http://db:$(PORT)/$(HOST)"),
            ]
        );
    }
}
