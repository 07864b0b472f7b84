//! The downward API's `resourceFieldRef` (env and downwardAPI volumes), as upstream's
//! `ExtractContainerResourceValue`: a container's CPU, memory or ephemeral-storage request or
//! limit divided by `divisor` and rounded up; a limit the container does not set is the node's
//! allocatable (upstream's `MergeContainerResourceLimits`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container as ApiContainer, ResourceFieldSelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use skiff_apimachinery::quantity::Quantity;

/// Why a resource field cannot be read (upstream's messages).
pub type Problem = String;

fn parse(q: &ApiQuantity) -> Result<Quantity, Problem> {
    Quantity::parse(&q.0).map_err(|e| e.to_string())
}

/// The value of `selector` for `container`, given the node's allocatable resources.
pub fn value(
    container: &ApiContainer,
    selector: &ResourceFieldSelector,
    allocatable: &BTreeMap<String, ApiQuantity>,
) -> Result<String, Problem> {
    let divisor = match &selector.divisor {
        Some(d) => parse(d)?,
        None => Quantity::parse("1").map_err(|e| e.to_string())?,
    };
    let res = container.resources.clone().unwrap_or_default();
    let limits = res.limits.unwrap_or_default();
    let requests = res.requests.unwrap_or_default();
    let (kind, resource) = selector
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported container resource : {}", selector.resource))?;
    let quantity = match (kind, resource) {
        ("limits", "cpu" | "memory" | "ephemeral-storage") => {
            limits.get(resource).or_else(|| allocatable.get(resource))
        }
        // an unset request is the limit set on the container (defaulting), else zero
        ("requests", "cpu" | "memory" | "ephemeral-storage") => {
            requests.get(resource).or_else(|| limits.get(resource))
        }
        _ => {
            return Err(format!(
                "unsupported container resource : {}",
                selector.resource
            ));
        }
    };
    let quantity = match quantity {
        Some(q) => parse(q)?,
        None => Quantity::parse("0").map_err(|e| e.to_string())?,
    };
    let (amount, per) = if resource == "cpu" {
        (quantity.milli_value(), divisor.milli_value())
    } else {
        (quantity.value(), divisor.value())
    };
    if per <= 0 {
        return Err(format!("invalid divisor {:?}", divisor));
    }
    // rounded up, as upstream's math.Ceil over the two values
    Ok((amount.div_euclid(per) + i64::from(amount.rem_euclid(per) != 0)).to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn container() -> ApiContainer {
        serde_json::from_value(json!({"name": "c", "resources": {
            "requests": {"cpu": "250m", "memory": "64Mi"},
            "limits": {"cpu": "1500m", "memory": "128Mi"}}}))
        .unwrap()
    }

    fn allocatable() -> BTreeMap<String, ApiQuantity> {
        BTreeMap::from([
            ("cpu".to_string(), ApiQuantity("2".into())),
            ("memory".to_string(), ApiQuantity("4Gi".into())),
            ("ephemeral-storage".to_string(), ApiQuantity("10Gi".into())),
        ])
    }

    fn get(c: &ApiContainer, resource: &str, divisor: Option<&str>) -> String {
        let selector = ResourceFieldSelector {
            container_name: None,
            resource: resource.into(),
            divisor: divisor.map(|d| ApiQuantity(d.into())),
        };
        value(c, &selector, &allocatable()).unwrap()
    }

    #[test]
    fn cpu_is_rounded_up_to_whole_divisors() {
        let c = container();
        assert_eq!(get(&c, "limits.cpu", None), "2");
        assert_eq!(get(&c, "limits.cpu", Some("1m")), "1500");
        assert_eq!(get(&c, "requests.cpu", None), "1");
        assert_eq!(get(&c, "requests.cpu", Some("100m")), "3");
    }

    #[test]
    fn memory_is_in_bytes_or_in_divisor_units() {
        let c = container();
        assert_eq!(get(&c, "limits.memory", None), "134217728");
        assert_eq!(get(&c, "limits.memory", Some("1Mi")), "128");
        assert_eq!(get(&c, "requests.memory", Some("1Mi")), "64");
        assert_eq!(get(&c, "requests.memory", Some("1G")), "1");
    }

    #[test]
    fn an_unset_limit_is_the_node_allocatable_and_an_unset_request_is_zero() {
        let c: ApiContainer = serde_json::from_value(json!({"name": "c"})).unwrap();
        assert_eq!(get(&c, "limits.cpu", None), "2");
        assert_eq!(get(&c, "limits.memory", Some("1Gi")), "4");
        assert_eq!(get(&c, "limits.ephemeral-storage", Some("1Gi")), "10");
        assert_eq!(get(&c, "requests.memory", None), "0");
    }

    #[test]
    fn unknown_resources_are_refused() {
        let selector = ResourceFieldSelector {
            container_name: None,
            resource: "limits.gpu".into(),
            divisor: None,
        };
        let err = value(&container(), &selector, &allocatable()).unwrap_err();
        assert_eq!(err, "unsupported container resource : limits.gpu");
    }
}
