//! The params a binding hands its policy (upstream's `CollectParams`): the object its
//! `paramRef` names, or those its selector selects, of the policy's `paramKind` (a built-in
//! kind or a custom resource, looked up among the types served now), read from the watch cache.

use std::sync::Arc;

use serde_json::Value;
use skiff_apimachinery::catalog::{Registry, ResourceType};
use skiff_apimachinery::labels::Selector;

use super::policy::{ParamKind, ParamRef};
use crate::cache::Cacher;

/// Objects of a param kind.
pub trait ParamSource: Send + Sync {
    /// The type `paramKind` names, if it is served now.
    fn kind(&self, kind: &ParamKind) -> Option<Arc<ResourceType>>;
    /// The object `name` in `namespace` (`""` for cluster-scoped kinds).
    fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<Value>;
    /// The objects in `namespace` (all namespaces when `""`) that `selector` selects.
    fn select(&self, rt: &ResourceType, namespace: &str, selector: &Selector) -> Vec<Value>;
}

/// Params from the watch cache, their kinds from the registry of served types (which a CRD
/// joins once established, its watch cache complete).
pub struct CachedParams {
    pub cache: Arc<Cacher>,
    pub registry: Arc<Registry>,
}

impl ParamSource for CachedParams {
    fn kind(&self, kind: &ParamKind) -> Option<Arc<ResourceType>> {
        self.registry
            .snapshot()
            .by_kind(&kind.api_version, &kind.kind)
            .cloned()
    }

    fn get(&self, rt: &ResourceType, namespace: &str, name: &str) -> Option<Value> {
        let path = if namespace.is_empty() {
            name.to_string()
        } else {
            format!("{namespace}/{name}")
        };
        // a custom resource removed since `kind` found it has no cache: nothing found
        self.cache.get(rt)?.get(&path)?.object().ok()
    }

    fn select(&self, rt: &ResourceType, namespace: &str, selector: &Selector) -> Vec<Value> {
        let Some(cache) = self.cache.get(rt) else {
            return Vec::new();
        };
        cache
            .list(namespace)
            .objects
            .iter()
            .filter(|o| selector.matches(&o.labels))
            .filter_map(|o| o.object().ok())
            .collect()
    }
}

/// The params of kind `rt` (the policy's resolved `paramKind`, if it has one) to evaluate a
/// policy with for a request in `namespace`, as stored (the caller converts them to the
/// `paramKind`'s version): `[null]` when the policy takes none or the binding names none,
/// possibly empty (nothing is evaluated) when none is found and the binding allows that;
/// `Err` is a configuration error.
pub fn collect(
    rt: Option<&ResourceType>,
    param_ref: Option<&ParamRef>,
    namespace: &str,
    source: &dyn ParamSource,
) -> Result<Vec<Value>, String> {
    let (Some(rt), Some(r)) = (rt, param_ref) else {
        return Ok(vec![Value::Null]);
    };
    let namespace = if rt.namespaced {
        match (r.namespace.as_str(), namespace) {
            ("", "") => {
                return Err(
                    "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                        .into(),
                );
            }
            ("", ns) | (ns, _) => ns,
        }
    } else if !r.namespace.is_empty() {
        return Err(
            "paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into(),
        );
    } else {
        ""
    };
    let params: Vec<Value> = match &r.name {
        Some(name) => source.get(rt, namespace, name).into_iter().collect(),
        None => source.select(rt, namespace, &r.selector),
    };
    if params.is_empty() && r.deny_when_missing {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use skiff_apimachinery::catalog;

    struct Nothing;

    impl ParamSource for Nothing {
        fn kind(&self, _kind: &ParamKind) -> Option<Arc<ResourceType>> {
            None
        }

        fn get(&self, _rt: &ResourceType, _ns: &str, _name: &str) -> Option<Value> {
            None
        }

        fn select(&self, _rt: &ResourceType, _ns: &str, _s: &Selector) -> Vec<Value> {
            Vec::new()
        }
    }

    fn builtin(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
        catalog::by_kind(api_version, kind)
    }

    fn by_name(namespace: &str, deny: bool) -> ParamRef {
        ParamRef {
            name: Some("limits".into()),
            namespace: namespace.into(),
            selector: Selector::everything(),
            deny_when_missing: deny,
        }
    }

    #[test]
    fn the_param_scope_must_fit_the_request_and_the_kind() {
        let namespaced = builtin("v1", "ConfigMap");
        assert_eq!(
            collect(namespaced, Some(&by_name("", false)), "", &Nothing),
            Err(
                "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                    .into()
            )
        );
        assert_eq!(
            collect(namespaced, Some(&by_name("", false)), "team", &Nothing),
            Ok(vec![])
        );
        let cluster = builtin("scheduling.k8s.io/v1", "PriorityClass");
        assert_eq!(
            collect(cluster, Some(&by_name("team", false)), "team", &Nothing),
            Err("paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into())
        );
        assert_eq!(
            collect(cluster, None, "team", &Nothing),
            Ok(vec![Value::Null]),
            "a binding without paramRef evaluates with null params"
        );
    }
}
