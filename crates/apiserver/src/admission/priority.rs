//! Upstream's `Priority` admission plugin: a new pod's `priorityClassName` (or the
//! `globalDefault` class when it names none) becomes its `spec.priority` and
//! `spec.preemptionPolicy`, which the scheduler's queue and preemption read; a class that does
//! not exist, or a priority the pod sets itself that disagrees with its class, is refused. It
//! also keeps PriorityClasses to one `globalDefault`.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::{Attributes, Operation, Plugin};
use crate::error::{ApiError, Result};

/// Where PriorityClasses are read from.
#[async_trait]
pub trait PriorityClassLookup: Send + Sync {
    /// The class by name.
    async fn get(&self, name: &str) -> Result<Option<Value>>;
    /// Every class (for the `globalDefault` ones).
    async fn all(&self) -> Result<Vec<Value>>;
}

pub struct Priority<L> {
    pub lookup: L,
}

/// Upstream's `DefaultPreemptionPolicy`.
const PREEMPT_LOWER_PRIORITY: &str = "PreemptLowerPriority";

fn is_global_default(class: &Value) -> bool {
    class["globalDefault"].as_bool() == Some(true)
}

impl<L: PriorityClassLookup> Priority<L> {
    /// The default class: of those marked `globalDefault`, the one with the lowest value (as
    /// upstream picks when several slipped in).
    async fn global_default(&self) -> Result<Option<Value>> {
        let defaults = self.lookup.all().await?;
        Ok(defaults
            .into_iter()
            .filter(is_global_default)
            .min_by_key(|c| c["value"].as_i64().unwrap_or(0)))
    }

    async fn admit_pod(&self, attrs: &Attributes<'_>, pod: &mut Value) -> Result<()> {
        let forbidden = |why: String| {
            ApiError::forbidden(format!("pods \"{}\" is forbidden: {why}", attrs.name))
        };
        let named = pod["spec"]["priorityClassName"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_string);
        let class = match &named {
            Some(name) => Some(self.lookup.get(name).await?.ok_or_else(|| {
                forbidden(format!("no PriorityClass with name {name} was found"))
            })?),
            None => self.global_default().await?,
        };
        let (class_name, value, policy) = match &class {
            Some(c) => (
                c["metadata"]["name"].as_str().map(str::to_string),
                c["value"].as_i64().unwrap_or(0),
                c["preemptionPolicy"]
                    .as_str()
                    .unwrap_or(PREEMPT_LOWER_PRIORITY)
                    .to_string(),
            ),
            None => (None, 0, PREEMPT_LOWER_PRIORITY.to_string()),
        };
        if let Some(given) = pod["spec"]["priority"].as_i64()
            && given != value
        {
            return Err(forbidden(format!(
                "the integer value of priority ({given}) must not be provided in pod spec; \
                 priority admission controller computed {value} from the given PriorityClass name"
            )));
        }
        if let Some(given) = pod["spec"]["preemptionPolicy"].as_str()
            && given != policy
        {
            return Err(forbidden(format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; \
                 priority admission controller computed {policy} from the given PriorityClass name"
            )));
        }
        let spec = &mut pod["spec"];
        if let Some(name) = class_name {
            spec["priorityClassName"] = json!(name);
        }
        spec["priority"] = json!(value);
        spec["preemptionPolicy"] = json!(policy);
        Ok(())
    }

    /// At most one class may be the global default.
    async fn validate_class(&self, attrs: &Attributes<'_>, class: &Value) -> Result<()> {
        if !is_global_default(class) {
            return Ok(());
        }
        let other =
            self.lookup.all().await?.into_iter().find(|c| {
                is_global_default(c) && c["metadata"]["name"].as_str() != Some(attrs.name)
            });
        match other {
            Some(o) => Err(ApiError::forbidden(format!(
                "priorityclasses.scheduling.k8s.io \"{}\" is forbidden: PriorityClass {} is \
                 already marked as default. Only one default can exist",
                attrs.name,
                o["metadata"]["name"].as_str().unwrap_or_default()
            ))),
            None => Ok(()),
        }
    }
}

#[async_trait]
impl<L: PriorityClassLookup> Plugin for Priority<L> {
    fn name(&self) -> &'static str {
        "Priority"
    }

    async fn mutate(&self, attrs: &Attributes<'_>, object: Option<&mut Value>) -> Result<()> {
        let is_pod = attrs.resource.group.is_empty() && attrs.resource.plural == "pods";
        match object {
            Some(pod)
                if is_pod
                    && attrs.operation == Operation::Create
                    && attrs.subresource.is_empty() =>
            {
                self.admit_pod(attrs, pod).await
            }
            // an update keeps the priority set on create (validation refuses changing it)
            Some(pod) if is_pod && attrs.operation == Operation::Update => {
                if let Some(old) = attrs.old.and_then(|o| o.get("spec")) {
                    for field in ["priority", "preemptionPolicy"] {
                        if pod["spec"].get(field).is_none_or(Value::is_null)
                            && let Some(v) = old.get(field).filter(|v| !v.is_null())
                        {
                            pod["spec"][field] = v.clone();
                        }
                    }
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    async fn validate(&self, attrs: &Attributes<'_>, object: Option<&Value>) -> Result<()> {
        let is_class = attrs.resource.group == "scheduling.k8s.io"
            && attrs.resource.plural == "priorityclasses";
        match object {
            Some(class) if is_class && attrs.operation != Operation::Delete => {
                self.validate_class(attrs, class).await
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::UserInfo;
    use skiff_apimachinery::catalog::lookup;

    struct Classes(Vec<Value>);

    #[async_trait]
    impl PriorityClassLookup for Classes {
        async fn get(&self, name: &str) -> Result<Option<Value>> {
            Ok(self
                .0
                .iter()
                .find(|c| c["metadata"]["name"] == name)
                .cloned())
        }
        async fn all(&self) -> Result<Vec<Value>> {
            Ok(self.0.clone())
        }
    }

    fn class(name: &str, value: i64, default: bool, policy: Option<&str>) -> Value {
        let mut c = json!({"metadata": {"name": name}, "value": value, "globalDefault": default});
        if let Some(p) = policy {
            c["preemptionPolicy"] = json!(p);
        }
        c
    }

    /// The pod spec after the plugin admitted `spec` (an update when `old` is given).
    async fn mutated(classes: Vec<Value>, spec: Value, old: Option<&Value>) -> Result<Value> {
        let user = UserInfo::anonymous();
        let attrs = Attributes {
            operation: if old.is_some() {
                Operation::Update
            } else {
                Operation::Create
            },
            resource: lookup("", "v1", "pods").unwrap(),
            subresource: "",
            namespace: "default",
            name: "web",
            user: &user,
            old,
            dry_run: false,
            notes: Default::default(),
        };
        let mut pod = json!({"metadata": {"name": "web"}, "spec": spec});
        Priority {
            lookup: Classes(classes),
        }
        .mutate(&attrs, Some(&mut pod))
        .await?;
        Ok(pod["spec"].clone())
    }

    async fn admit(classes: Vec<Value>, spec: Value) -> Result<Value> {
        mutated(classes, spec, None).await
    }

    #[tokio::test]
    async fn an_update_keeps_the_priority_set_on_create() {
        let old = json!({"spec": {"priority": 1000, "preemptionPolicy": "Never"}});
        let spec = mutated(vec![], json!({"containers": []}), Some(&old))
            .await
            .unwrap();
        assert_eq!(spec["priority"], 1000);
        assert_eq!(spec["preemptionPolicy"], "Never");
    }

    #[tokio::test]
    async fn pods_get_their_class_value_or_the_global_default() {
        let classes = vec![
            class("high", 1000, false, Some("Never")),
            class("everyday", 5, true, None),
        ];
        let spec = admit(classes.clone(), json!({"priorityClassName": "high"}))
            .await
            .unwrap();
        assert_eq!(
            (spec["priority"].clone(), spec["preemptionPolicy"].clone()),
            (json!(1000), json!("Never"))
        );
        let spec = admit(classes, json!({})).await.unwrap();
        assert_eq!(
            (spec["priorityClassName"].clone(), spec["priority"].clone()),
            (json!("everyday"), json!(5))
        );
        let spec = admit(vec![], json!({})).await.unwrap();
        assert_eq!(
            (spec["priority"].clone(), spec["preemptionPolicy"].clone()),
            (json!(0), json!("PreemptLowerPriority"))
        );
        assert!(spec.get("priorityClassName").is_none());
    }

    #[tokio::test]
    async fn missing_classes_and_disagreeing_values_are_forbidden() {
        let err = admit(vec![], json!({"priorityClassName": "gold"}))
            .await
            .unwrap_err();
        assert_eq!(
            (err.code, err.message.as_str()),
            (
                403,
                "pods \"web\" is forbidden: no PriorityClass with name gold was found"
            )
        );
        let err = admit(
            vec![class("gold", 10, false, None)],
            json!({"priorityClassName": "gold", "priority": 11}),
        )
        .await
        .unwrap_err();
        assert!(
            err.message
                .contains("the integer value of priority (11) must not be provided in pod spec"),
            "{}",
            err.message
        );
        // the value its class gives is accepted, as upstream (pods re-created from a dump)
        assert!(
            admit(
                vec![class("gold", 10, false, None)],
                json!({"priorityClassName": "gold", "priority": 10}),
            )
            .await
            .is_ok()
        );
    }

    #[tokio::test]
    async fn only_one_class_may_be_the_global_default() {
        let user = UserInfo::anonymous();
        let attrs = Attributes {
            operation: Operation::Create,
            resource: lookup("scheduling.k8s.io", "v1", "priorityclasses").unwrap(),
            subresource: "",
            namespace: "",
            name: "second",
            user: &user,
            old: None,
            dry_run: false,
            notes: Default::default(),
        };
        let plugin = Priority {
            lookup: Classes(vec![class("first", 1, true, None)]),
        };
        let err = plugin
            .validate(&attrs, Some(&class("second", 2, true, None)))
            .await
            .unwrap_err();
        assert_eq!(err.code, 403);
        assert!(
            err.message
                .contains("PriorityClass first is already marked as default")
        );
        assert!(
            plugin
                .validate(&attrs, Some(&class("second", 2, false, None)))
                .await
                .is_ok()
        );
    }
}
