//! `KubeSchedulerConfiguration` (`kubescheduler.config.k8s.io/v1`), the part Skiff reads:
//! profiles by `schedulerName`; their plugins enabled and disabled through `multiPoint` (every
//! point a plugin implements) and per extension point (`preEnqueue`, `queueSort`, `filter`,
//! `score` with weights, …; `*` disables every default there), with upstream's checks that each
//! profile has exactly one QueueSort plugin and all profiles the same one; `pluginConfig`
//! args; `percentageOfNodesToScore` (global or per profile); `parallelism`; `leaderElection` (whether, and on which Lease); and `clientConnection`'s
//! `qps` and `burst`.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::api::ClusterApi;
use crate::framework::{Framework, Plugin, Points};

/// Upstream's default `parallelism`.
const DEFAULT_PARALLELISM: usize = 16;
use crate::plugins::{self, Handle};
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
    #[error("profile {profile:?}: plugin {plugin:?} does not extend {point} plugin")]
    NotExtending {
        profile: String,
        plugin: String,
        point: &'static str,
    },
    #[error("profile {0:?}: no queue sort plugin is enabled")]
    NoQueueSort(String),
    #[error("profile {0:?}: only one queue sort plugin can be enabled")]
    QueueSorts(String),
    #[error("different queue sort plugins for profile {profile:?}: {plugin:?}, first: {first:?}")]
    DifferentQueueSort {
        profile: String,
        plugin: String,
        first: String,
    },
    #[error("different queue sort plugin args for profile {0:?}")]
    DifferentQueueSortArgs(String),
    #[error("parallelism: Invalid value: {0}: should be an integer value greater than zero")]
    Parallelism(u32),
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Configuration {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<u32>,
    /// How many nodes are filtered at once (upstream's default 16); Skiff runs at most as many
    /// filtering threads as there are cores.
    #[serde(default)]
    pub parallelism: Option<u32>,
    #[serde(default)]
    pub profiles: Vec<ProfileConfig>,
    #[serde(default)]
    pub leader_election: Option<LeaderElection>,
    #[serde(default)]
    pub client_connection: ClientConnection,
}

/// `clientConnection`: the API client's request rate (client-go's QPS and burst). Unset, the
/// client is not limited (upstream defaults to 50 QPS, burst 100: see
/// `docs/compatibility.md`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClientConnection {
    pub qps: Option<f32>,
    pub burst: Option<u32>,
}

impl ClientConnection {
    /// The limit to put on the client, if any (a QPS of 0 or less means none).
    pub fn rate_limit(&self) -> Option<skiff_runtime::ratelimit::RateLimitLayer> {
        let qps = self.qps?;
        skiff_runtime::ratelimit::RateLimitLayer::new(qps, self.burst.unwrap_or(qps.ceil() as u32))
    }
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

/// A profile's `plugins`: `multiPoint`, then per extension point.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Plugins {
    pub multi_point: PluginSet,
    pub pre_enqueue: PluginSet,
    pub queue_sort: PluginSet,
    pub pre_filter: PluginSet,
    pub filter: PluginSet,
    pub post_filter: PluginSet,
    pub pre_score: PluginSet,
    pub score: PluginSet,
    pub reserve: PluginSet,
    pub permit: PluginSet,
    pub pre_bind: PluginSet,
    pub bind: PluginSet,
    pub post_bind: PluginSet,
}

impl Plugins {
    /// Each extension point's set, with its name (as upstream's errors spell it) and bit.
    fn per_point(&self) -> [(&PluginSet, &'static str, Points); 12] {
        [
            (&self.pre_enqueue, "PreEnqueue", Points::PRE_ENQUEUE),
            (&self.queue_sort, "QueueSort", Points::QUEUE_SORT),
            (&self.pre_filter, "PreFilter", Points::PRE_FILTER),
            (&self.filter, "Filter", Points::FILTER),
            (&self.post_filter, "PostFilter", Points::POST_FILTER),
            (&self.pre_score, "PreScore", Points::PRE_SCORE),
            (&self.score, "Score", Points::SCORE),
            (&self.reserve, "Reserve", Points::RESERVE),
            (&self.permit, "Permit", Points::PERMIT),
            (&self.pre_bind, "PreBind", Points::PRE_BIND),
            (&self.bind, "Bind", Points::BIND),
            (&self.post_bind, "PostBind", Points::POST_BIND),
        ]
    }
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

    /// The profiles as frameworks, their volume plugins over empty storage caches (see
    /// [`Configuration::frameworks_with`]).
    pub fn frameworks(&self, api: Arc<dyn ClusterApi>) -> Result<Vec<Framework>, Error> {
        self.frameworks_with(&Handle::new(api))
    }

    /// The profiles as frameworks, their plugins built with `handle`; with none configured,
    /// upstream's default profile.
    pub fn frameworks_with(&self, handle: &Handle) -> Result<Vec<Framework>, Error> {
        let profiles = if self.profiles.is_empty() {
            vec![ProfileConfig::default()]
        } else {
            self.profiles.clone()
        };
        let parallelism = match self.parallelism {
            Some(0) => return Err(Error::Parallelism(0)),
            Some(n) => n as usize,
            None => DEFAULT_PARALLELISM,
        };
        let mut seen = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        // the first profile's QueueSort plugin and its args: the queue is shared, so every
        // profile must name the same (upstream's profile validator)
        let mut first_sort: Option<(&'static str, Option<Value>)> = None;
        for p in &profiles {
            let name = p
                .scheduler_name
                .clone()
                .unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.into());
            if !seen.insert(name.clone()) {
                return Err(Error::DuplicateProfile(name));
            }
            let mut fw = build(&name, p, handle)?;
            let sorts = fw.plugins_at(Points::QUEUE_SORT);
            let sort = match sorts[..] {
                [] => return Err(Error::NoQueueSort(name)),
                [one] => one,
                _ => return Err(Error::QueueSorts(name)),
            };
            let args = p
                .plugin_config
                .iter()
                .find(|c| c.name == sort)
                .and_then(|c| c.args.clone());
            match &first_sort {
                None => first_sort = Some((sort, args)),
                Some((first, _)) if *first != sort => {
                    return Err(Error::DifferentQueueSort {
                        profile: name,
                        plugin: sort.into(),
                        first: (*first).into(),
                    });
                }
                Some((_, first_args)) if *first_args != args => {
                    return Err(Error::DifferentQueueSortArgs(name));
                }
                Some(_) => {}
            }
            fw.percentage_of_nodes_to_score = p
                .percentage_of_nodes_to_score
                .or(self.percentage_of_nodes_to_score)
                .unwrap_or(0);
            fw.parallelism = parallelism;
            out.push(fw);
        }
        Ok(out)
    }
}

/// A plugin chosen for a profile: its Score weight and where it runs.
struct Chosen {
    name: String,
    weight: i64,
    points: Points,
}

/// One profile: the defaults (with `DefaultBinder` last) minus what `multiPoint` disables, plus
/// what it enables, at every point; then each extension point's own list takes plugins out of
/// that point or adds them to it (a weight under `score` sets the Score weight). Each plugin
/// is built once, with its `pluginConfig` args.
fn build(name: &str, p: &ProfileConfig, handle: &Handle) -> Result<Framework, Error> {
    let config = p.plugins.clone().unwrap_or_default();
    let multi = &config.multi_point;
    let mut defaults = plugins::default_plugins();
    defaults.push((crate::binder::NAME, 0));
    let mut chosen: Vec<Chosen> = defaults
        .into_iter()
        .filter(|(n, _)| !multi.disables(n))
        .map(|(n, w)| Chosen {
            name: n.to_string(),
            weight: w,
            points: Points::ALL,
        })
        .collect();
    for e in &multi.enabled {
        match chosen.iter_mut().find(|c| c.name == e.name) {
            Some(existing) => existing.weight = e.weight.unwrap_or(existing.weight),
            None => chosen.push(Chosen {
                name: e.name.clone(),
                weight: e.weight.unwrap_or(1),
                points: Points::ALL,
            }),
        }
    }
    for (set, _, point) in config.per_point() {
        for c in chosen.iter_mut().filter(|c| set.disables(&c.name)) {
            c.points = c.points.without(point);
        }
        for e in &set.enabled {
            let weight = e.weight.filter(|_| point == Points::SCORE);
            match chosen.iter_mut().find(|c| c.name == e.name) {
                Some(existing) => {
                    existing.points = existing.points.with(point);
                    existing.weight = weight.unwrap_or(existing.weight);
                }
                None => chosen.push(Chosen {
                    name: e.name.clone(),
                    weight: weight.unwrap_or(1),
                    points: point,
                }),
            }
        }
    }
    let args: BTreeMap<&str, &Value> = p
        .plugin_config
        .iter()
        .filter_map(|c| Some((c.name.as_str(), c.args.as_ref()?)))
        .collect();
    let registry = plugins::registry();
    let mut list = Vec::new();
    for c in chosen.into_iter().filter(|c| c.points != Points::NONE) {
        let factory = registry
            .get(c.name.as_str())
            .ok_or_else(|| Error::UnknownPlugin {
                profile: name.into(),
                plugin: c.name.clone(),
            })?;
        let built: Arc<dyn Plugin> =
            factory(args.get(c.name.as_str()).copied(), handle).map_err(|message| Error::Args {
                profile: name.into(),
                plugin: c.name.clone(),
                message,
            })?;
        // a plugin named at one point must implement it, as upstream checks
        for (set, point_name, point) in config.per_point() {
            let named = set.enabled.iter().any(|e| e.name == c.name);
            if named && !point.implemented_by(built.as_ref()).contains(point) {
                return Err(Error::NotExtending {
                    profile: name.into(),
                    plugin: c.name.clone(),
                    point: point_name,
                });
            }
        }
        list.push((built, c.weight, c.points));
    }
    Ok(Framework::with_points(name, list))
}

impl PluginSet {
    fn disables(&self, plugin: &str) -> bool {
        self.disabled
            .iter()
            .any(|d| d.name == "*" || d.name == plugin)
    }
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
    fn parallelism_is_read_and_zero_is_refused() {
        let parse = |yaml: &str| Configuration::parse(yaml).unwrap();
        let fws = parse("parallelism: 4\n")
            .frameworks(RecordingApi::new())
            .unwrap();
        assert_eq!(fws[0].parallelism, 4);
        let err = parse("parallelism: 0\n")
            .frameworks(RecordingApi::new())
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "parallelism: Invalid value: 0: should be an integer value greater than zero"
        );
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
        assert_eq!(fws[0].parallelism, DEFAULT_PARALLELISM);
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
    fn extension_point_lists_take_plugins_out_of_one_point_or_add_them_to_one() {
        let c = Configuration::parse(
            r"
profiles:
- plugins:
    filter:
      disabled:
      - name: NodeResourcesFit
    score:
      disabled:
      - name: '*'
      enabled:
      - name: ImageLocality
        weight: 7
    postFilter:
      disabled:
      - name: DefaultPreemption
",
        )
        .unwrap();
        let fw = &c.frameworks(RecordingApi::new()).unwrap()[0];
        let filters = fw.plugins_at(Points::FILTER);
        assert!(!filters.contains(&"NodeResourcesFit"), "{filters:?}");
        assert!(filters.contains(&"NodeUnschedulable"), "{filters:?}");
        // still there to compute the pod's requests at PreFilter
        assert!(
            fw.plugins_at(Points::PRE_FILTER)
                .contains(&"NodeResourcesFit")
        );
        assert_eq!(fw.plugins_at(Points::SCORE), vec!["ImageLocality"]);
        assert!(!fw.has_post_filter());
        assert_eq!(fw.plugins_at(Points::BIND), vec!["DefaultBinder"]);

        let wrong = Configuration::parse(
            "profiles:\n- plugins:\n    score:\n      enabled:\n      - name: NodeUnschedulable\n",
        )
        .unwrap()
        .frameworks(RecordingApi::new());
        assert_eq!(
            wrong.err().map(|e| e.to_string()).as_deref(),
            Some(
                "profile \"default-scheduler\": plugin \"NodeUnschedulable\" does not extend \
                 Score plugin"
            )
        );
    }

    #[test]
    fn client_connection_limits_the_rate_only_when_given() {
        let c = Configuration::parse("clientConnection:\n  qps: 50\n  burst: 100\n").unwrap();
        assert_eq!(
            (c.client_connection.qps, c.client_connection.burst),
            (Some(50.0), Some(100))
        );
        assert!(c.client_connection.rate_limit().is_some());
        assert!(
            Configuration::default()
                .client_connection
                .rate_limit()
                .is_none()
        );
        let off = Configuration::parse("clientConnection:\n  qps: -1\n").unwrap();
        assert!(off.client_connection.rate_limit().is_none());
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

    fn frameworks(yaml: &str) -> Result<Vec<Framework>, Error> {
        Configuration::parse(yaml)
            .unwrap()
            .frameworks(RecordingApi::new())
    }

    #[test]
    fn the_default_profile_gates_pods_and_sorts_the_queue_by_priority() {
        let fw = &frameworks("").unwrap()[0];
        assert_eq!(fw.plugins_at(Points::PRE_ENQUEUE), vec!["SchedulingGates"]);
        assert_eq!(fw.plugins_at(Points::QUEUE_SORT), vec!["PrioritySort"]);
    }

    #[test]
    fn pre_enqueue_and_queue_sort_lists_take_plugins_out_or_name_them() {
        for yaml in [
            "profiles:\n- plugins:\n    preEnqueue:\n      disabled:\n      - name: SchedulingGates\n",
            "profiles:\n- plugins:\n    preEnqueue:\n      disabled:\n      - name: '*'\n",
            "profiles:\n- plugins:\n    multiPoint:\n      disabled:\n      - name: SchedulingGates\n",
        ] {
            let fw = &frameworks(yaml).unwrap()[0];
            assert!(fw.plugins_at(Points::PRE_ENQUEUE).is_empty(), "{yaml}");
            assert_eq!(fw.plugins_at(Points::QUEUE_SORT), vec!["PrioritySort"]);
        }
        // taken out everywhere, then named at one point again
        let fw = &frameworks(
            r"
profiles:
- plugins:
    multiPoint:
      disabled:
      - name: '*'
      enabled:
      - name: DefaultBinder
    queueSort:
      enabled:
      - name: PrioritySort
    preEnqueue:
      enabled:
      - name: SchedulingGates
",
        )
        .unwrap()[0];
        assert_eq!(fw.plugins_at(Points::QUEUE_SORT), vec!["PrioritySort"]);
        assert_eq!(fw.plugins_at(Points::PRE_ENQUEUE), vec!["SchedulingGates"]);
        assert!(fw.plugins_at(Points::FILTER).is_empty());
    }

    #[test]
    fn a_profile_needs_one_known_queue_sort_plugin_the_same_in_every_profile() {
        let error = |yaml: &str| frameworks(yaml).err().map(|e| e.to_string());
        assert_eq!(
            error("profiles:\n- plugins:\n    queueSort:\n      disabled:\n      - name: '*'\n")
                .as_deref(),
            Some("profile \"default-scheduler\": no queue sort plugin is enabled")
        );
        assert_eq!(
            error(
                "profiles:\n- plugins:\n    multiPoint:\n      disabled:\n      - name: PrioritySort\n"
            )
            .as_deref(),
            Some("profile \"default-scheduler\": no queue sort plugin is enabled")
        );
        assert_eq!(
            error("profiles:\n- plugins:\n    queueSort:\n      enabled:\n      - name: Nope\n")
                .as_deref(),
            Some("profile \"default-scheduler\": unknown plugin \"Nope\"")
        );
        assert_eq!(
            error(
                "profiles:\n- plugins:\n    queueSort:\n      enabled:\n      - name: NodeName\n"
            )
            .as_deref(),
            Some(
                "profile \"default-scheduler\": plugin \"NodeName\" does not extend QueueSort \
                 plugin"
            )
        );
        assert_eq!(
            error(
                "profiles:\n- plugins:\n    preEnqueue:\n      enabled:\n      - name: NodeName\n"
            )
            .as_deref(),
            Some(
                "profile \"default-scheduler\": plugin \"NodeName\" does not extend PreEnqueue \
                 plugin"
            )
        );
        // a second profile without a queue sort of its own
        assert_eq!(
            error(
                r"
profiles:
- schedulerName: default-scheduler
- schedulerName: other
  plugins:
    queueSort:
      disabled:
      - name: PrioritySort
"
            )
            .as_deref(),
            Some("profile \"other\": no queue sort plugin is enabled")
        );
        assert_eq!(
            error(
                r"
profiles:
- schedulerName: default-scheduler
- schedulerName: other
  pluginConfig:
  - name: PrioritySort
    args: {reversed: true}
"
            )
            .as_deref(),
            Some("different queue sort plugin args for profile \"other\"")
        );
        // two profiles, the same queue sort
        let two = frameworks("profiles:\n- schedulerName: a\n- schedulerName: b\n").unwrap();
        assert_eq!(two.len(), 2);
    }
}
