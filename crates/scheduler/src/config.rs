//! `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`), the part Skiff reads:
//! profiles by `schedulerName`, their `multiPoint` plugins enabled and disabled (`*` disables
//! every default), `pluginConfig` args, and `percentageOfNodesToScore` (global or per
//! profile), and `leaderElection` (whether, and on which Lease). Other extension-point lists
//! are not read yet.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::api::ClusterApi;
use crate::binder::DefaultBinder;
use crate::framework::Framework;
use crate::plugins;
use crate::scheduler::DEFAULT_SCHEDULER_NAME;

/// A configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("parsing the scheduler configuration: {0}")]
    Parse(#[from] serde_yaml::Error),
    #[error("scheduler configuration: apiVersion {0:?} is not kubescheduler.config.k8s.io/v1")]
    Version(String),
    #[error("profile {profile:?}: unknown plugin {plugin:?}")]
    UnknownPlugin { profile: String, plugin: String },
    #[error("profile {profile:?}: plugin {plugin:?}: {message}")]
    Args {
        profile: String,
        plugin: String,
        message: String,
    },
    #[error("scheduler configuration: two profiles named {0:?}")]
    DuplicateProfile(String),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<u32>,
    #[serde(default)]
    pub profiles: Vec<ProfileConfig>,
    #[serde(default)]
    pub leader_election: Option<LeaderElection>,
}

/// `leaderElection`: whether replicas elect a leader, and on which Lease (a second scheduler
/// with other profiles names its own, as upstream's do).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderElection {
    #[serde(default)]
    pub leader_elect: Option<bool>,
    #[serde(default)]
    pub resource_name: Option<String>,
    #[serde(default)]
    pub resource_namespace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProfileConfig {
    #[serde(default)]
    pub scheduler_name: Option<String>,
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<u32>,
    #[serde(default)]
    pub plugins: Option<Plugins>,
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Plugins {
    #[serde(default)]
    pub multi_point: PluginSet,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct PluginSet {
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
pub struct PluginRef {
    pub name: String,
    #[serde(default)]
    pub weight: Option<i64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct PluginConfig {
    pub name: String,
    #[serde(default)]
    pub args: Option<Value>,
}

impl Configuration {
    pub fn parse(yaml: &str) -> Result<Configuration, Error> {
        let c: Configuration = serde_yaml::from_str(yaml)?;
        match c.api_version.as_deref() {
            None | Some("kubescheduler.config.k8s.io/v1") => Ok(c),
            Some(other) => Err(Error::Version(other.into())),
        }
    }

    /// The profiles as frameworks; with none configured, upstream's default profile.
    pub fn frameworks(&self, api: Arc<dyn ClusterApi>) -> Result<Vec<Framework>, Error> {
        let profiles = if self.profiles.is_empty() {
            vec![ProfileConfig::default()]
        } else {
            self.profiles.clone()
        };
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for p in &profiles {
            let name = p
                .scheduler_name
                .clone()
                .unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.into());
            if !seen.insert(name.clone()) {
                return Err(Error::DuplicateProfile(name));
            }
            let mut fw = build(&name, p, api.clone())?;
            fw.percentage_of_nodes_to_score = p
                .percentage_of_nodes_to_score
                .or(self.percentage_of_nodes_to_score)
                .unwrap_or(0);
            out.push(fw);
        }
        Ok(out)
    }
}

/// One profile: the defaults minus what is disabled, plus what is enabled, each built with
/// its `pluginConfig` args, then `DefaultBinder`.
fn build(name: &str, p: &ProfileConfig, api: Arc<dyn ClusterApi>) -> Result<Framework, Error> {
    let set = p.plugins.clone().unwrap_or_default().multi_point;
    let disabled = |plugin: &str| {
        set.disabled
            .iter()
            .any(|d| d.name == "*" || d.name == plugin)
    };
    let mut chosen: Vec<(String, i64)> = plugins::default_plugins()
        .into_iter()
        .filter(|(n, _)| !disabled(n))
        .map(|(n, w)| (n.to_string(), w))
        .collect();
    for e in &set.enabled {
        match chosen.iter_mut().find(|(n, _)| *n == e.name) {
            Some(existing) => existing.1 = e.weight.unwrap_or(existing.1),
            None => chosen.push((e.name.clone(), e.weight.unwrap_or(1))),
        }
    }
    let args: BTreeMap<&str, &Value> = p
        .plugin_config
        .iter()
        .filter_map(|c| Some((c.name.as_str(), c.args.as_ref()?)))
        .collect();
    let registry = plugins::registry();
    let mut list = Vec::new();
    let mut binder = true;
    for (plugin, weight) in chosen {
        if plugin == crate::binder::NAME {
            continue;
        }
        let factory = registry
            .get(plugin.as_str())
            .ok_or_else(|| Error::UnknownPlugin {
                profile: name.into(),
                plugin: plugin.clone(),
            })?;
        let built = factory(args.get(plugin.as_str()).copied()).map_err(|message| Error::Args {
            profile: name.into(),
            plugin: plugin.clone(),
            message,
        })?;
        list.push((built, weight));
    }
    if disabled(crate::binder::NAME) {
        binder = false;
    }
    if binder {
        list.push((Arc::new(DefaultBinder::new(api)) as _, 0));
    }
    Ok(Framework::new(name, list))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RecordingApi;

    #[test]
    fn no_profiles_means_upstreams_default_profile() {
        let fws = Configuration::default()
            .frameworks(RecordingApi::new())
            .unwrap();
        assert_eq!(fws.len(), 1);
        assert_eq!(fws[0].scheduler_name(), "default-scheduler");
        assert!(fws[0].plugin_names().contains(&"DefaultBinder"));
    }

    #[test]
    fn profiles_disable_defaults_and_set_the_percentage() {
        let c = Configuration::parse(
            r"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
percentageOfNodesToScore: 30
profiles:
- schedulerName: default-scheduler
- schedulerName: no-cordon-check
  percentageOfNodesToScore: 70
  plugins:
    multiPoint:
      disabled:
      - name: NodeUnschedulable
",
        )
        .unwrap();
        let fws = c.frameworks(RecordingApi::new()).unwrap();
        assert_eq!(fws[0].percentage_of_nodes_to_score, 30);
        assert_eq!(fws[1].scheduler_name(), "no-cordon-check");
        assert_eq!(fws[1].percentage_of_nodes_to_score, 70);
        assert!(fws[0].plugin_names().contains(&"NodeUnschedulable"));
        assert!(!fws[1].plugin_names().contains(&"NodeUnschedulable"));
    }

    #[test]
    fn unknown_plugins_versions_and_duplicate_profiles_are_errors() {
        let unknown = Configuration::parse(
            "profiles:\n- plugins:\n    multiPoint:\n      enabled:\n      - name: Nope\n",
        )
        .unwrap()
        .frameworks(RecordingApi::new());
        assert!(matches!(unknown, Err(Error::UnknownPlugin { .. })));
        assert!(matches!(
            Configuration::parse("apiVersion: kubescheduler.config.k8s.io/v1beta3\n"),
            Err(Error::Version(_))
        ));
        let dup = Configuration::parse("profiles:\n- {}\n- schedulerName: default-scheduler\n")
            .unwrap()
            .frameworks(RecordingApi::new());
        assert!(matches!(dup, Err(Error::DuplicateProfile(_))));
    }

    #[test]
    fn leader_election_names_its_lease() {
        let c = Configuration::parse(
            "leaderElection:\n  leaderElect: true\n  resourceName: second-scheduler\n",
        )
        .unwrap();
        let le = c.leader_election.unwrap();
        assert_eq!(le.leader_elect, Some(true));
        assert_eq!(le.resource_name.as_deref(), Some("second-scheduler"));
        assert_eq!(le.resource_namespace, None);
    }
}
