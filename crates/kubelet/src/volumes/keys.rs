//! What configMap and secret volumes (and their projected sources) share: the object's keys
//! become files, all of them or the listed `items` (`key` → `path`, with their own `mode`),
//! as upstream's `MakePayload`; a missing object or key fails unless `optional`.

use k8s_openapi::api::core::v1::KeyToPath;

use super::atomic_writer::{FileProjection, Payload};
use crate::api::{Data, PodApi};

/// The object a volume reads its keys from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    ConfigMap,
    Secret,
}

/// Upstream's default `defaultMode` of configMap, secret, downwardAPI and projected volumes.
pub const DEFAULT_MODE: i32 = 0o644;

impl Kind {
    /// Reads the object's data, or None when it does not exist.
    async fn read(
        self,
        api: &dyn PodApi,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Data>, String> {
        match self {
            Kind::ConfigMap => api.config_map(namespace, name).await,
            Kind::Secret => api.secret(namespace, name).await,
        }
        .map_err(|e| e.to_string())
    }

    fn not_found(self, name: &str) -> String {
        match self {
            Kind::ConfigMap => format!("configmap \"{name}\" not found"),
            Kind::Secret => format!("secret \"{name}\" not found"),
        }
    }

    fn missing_key(self, key: &str) -> String {
        match self {
            Kind::ConfigMap => format!("configmap references non-existent config key: {key}"),
            Kind::Secret => format!("references non-existent secret key: {key}"),
        }
    }
}

/// Reads a ConfigMap or Secret and makes its files (see [`payload`]).
pub async fn read_payload(
    api: &dyn PodApi,
    namespace: &str,
    kind: Kind,
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
    optional: Option<bool>,
) -> Result<Payload, String> {
    let data = kind.read(api, namespace, name).await?;
    payload(
        kind,
        name,
        data.as_ref(),
        items,
        default_mode,
        optional == Some(true),
    )
}

/// The files of one ConfigMap or Secret (`data` as read, None when missing).
pub fn payload(
    kind: Kind,
    name: &str,
    data: Option<&Data>,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
    optional: bool,
) -> Result<Payload, String> {
    let Some(data) = data else {
        return if optional {
            Ok(Payload::new())
        } else {
            Err(kind.not_found(name))
        };
    };
    let file = |value: &Vec<u8>, mode: i32| FileProjection {
        data: value.clone(),
        mode: mode as u32,
        fs_user: None,
    };
    let mut out = Payload::new();
    match items {
        None | Some([]) => {
            for (k, v) in data {
                out.insert(k.clone(), file(v, default_mode));
            }
        }
        Some(items) => {
            for item in items {
                match data.get(&item.key) {
                    Some(v) => {
                        out.insert(
                            item.path.clone(),
                            file(v, item.mode.unwrap_or(default_mode)),
                        );
                    }
                    None if optional => {}
                    None => return Err(kind.missing_key(&item.key)),
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> Data {
        Data::from([("a".into(), b"1".to_vec()), ("b".into(), vec![0xff, 0x00])])
    }

    fn item(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
        }
    }

    #[test]
    fn without_items_every_key_is_a_file_with_the_default_mode() {
        let p = payload(Kind::ConfigMap, "cm", Some(&data()), None, 0o640, false).unwrap();
        assert_eq!(p.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(p["a"].mode, 0o640);
        // binary data is written as it is
        assert_eq!(p["b"].data, [0xff, 0x00]);
    }

    #[test]
    fn items_choose_keys_paths_and_modes() {
        let items = [item("a", "dir/x", Some(0o400)), item("b", "y", None)];
        let p = payload(Kind::Secret, "s", Some(&data()), Some(&items), 0o644, false).unwrap();
        assert_eq!(p.keys().collect::<Vec<_>>(), ["dir/x", "y"]);
        assert_eq!((p["dir/x"].mode, p["y"].mode), (0o400, 0o644));
    }

    #[test]
    fn a_missing_object_or_key_fails_unless_optional() {
        let err = payload(Kind::ConfigMap, "cm", None, None, 0o644, false).unwrap_err();
        assert_eq!(err, "configmap \"cm\" not found");
        let err = payload(Kind::Secret, "s", None, None, 0o644, false).unwrap_err();
        assert_eq!(err, "secret \"s\" not found");
        assert!(
            payload(Kind::Secret, "s", None, None, 0o644, true)
                .unwrap()
                .is_empty()
        );
        let items = [item("zz", "z", None)];
        let err = payload(
            Kind::ConfigMap,
            "cm",
            Some(&data()),
            Some(&items),
            0o644,
            false,
        )
        .unwrap_err();
        assert_eq!(err, "configmap references non-existent config key: zz");
        let err =
            payload(Kind::Secret, "s", Some(&data()), Some(&items), 0o644, false).unwrap_err();
        assert_eq!(err, "references non-existent secret key: zz");
        let p = payload(Kind::Secret, "s", Some(&data()), Some(&items), 0o644, true).unwrap();
        assert!(p.is_empty());
    }
}
