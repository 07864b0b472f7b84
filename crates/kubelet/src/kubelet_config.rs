//! The kubelet's configuration: upstream's `KubeletConfiguration`
//! (`kubelet.config.k8s.io/v1beta1`), read from the file `--config` names, with upstream's
//! defaults and upstream's precedence (a flag given on the command line wins over the file).
//! Fields the kubelet does not know are named in a warning, never silently dropped; fields it
//! knows are checked here, once, so that every part of the kubelet reads typed values.
//!
//! The eviction thresholds are parsed as upstream's `ParseThresholdConfig` parses them
//! (`memory.available<100Mi`, `nodefs.available<10%`), for the eviction manager and for the
//! node's allocatable.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use skiff_apimachinery::quantity::Quantity;

/// The API version and kind a configuration file must declare.
pub const API_VERSIONS: [&str; 2] = ["kubelet.config.k8s.io/v1beta1", "kubelet.config.k8s.io/v1"];
pub const KIND: &str = "KubeletConfiguration";

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum Error {
    #[error("reading kubelet config file {path}: {message}")]
    Read { path: PathBuf, message: String },
    #[error("invalid kubelet config: {0}")]
    Invalid(String),
}

type Result<T, E = Error> = std::result::Result<T, E>;

fn invalid(message: impl Into<String>) -> Error {
    Error::Invalid(message.into())
}

/// The kubelet's settings, with upstream's defaults.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletConfiguration {
    /// A directory of static pod manifests (`--pod-manifest-path`).
    pub static_pod_path: Option<PathBuf>,
    /// How often that directory is read (20 s).
    #[serde(with = "go_duration")]
    pub file_check_frequency: Duration,
    /// Where the kubelet server listens.
    pub address: IpAddr,
    pub port: u16,
    /// Cluster DNS servers for ClusterFirst pods; none: the host's.
    #[serde(rename = "clusterDNS")]
    pub cluster_dns: Vec<IpAddr>,
    pub cluster_domain: String,
    /// How often pods are synced and their configMap, secret, downwardAPI and projected volumes
    /// refreshed (1 m).
    #[serde(with = "go_duration")]
    pub sync_frequency: Duration,
    /// The host's resolv.conf, for `Default` pods and the search path.
    pub resolv_conf: PathBuf,
    /// How many pods the node takes (110).
    pub max_pods: u32,
    /// The most processes a pod may have; -1: no limit.
    pub pod_pids_limit: i64,
    /// Pods in upstream's QoS cgroup hierarchy (`kubepods/burstable/pod<uid>`).
    #[serde(rename = "cgroupsPerQOS")]
    pub cgroups_per_qos: bool,
    /// The cgroup under which `kubepods` is made ("/" by default).
    pub cgroup_root: String,
    /// Resources kept back for Kubernetes' daemons and for the system: subtracted from the
    /// node's allocatable.
    pub kube_reserved: BTreeMap<String, String>,
    pub system_reserved: BTreeMap<String, String>,
    /// Eviction thresholds by signal (`memory.available: 100Mi`, `nodefs.available: 10%`).
    pub eviction_hard: BTreeMap<String, String>,
    pub eviction_soft: BTreeMap<String, String>,
    /// How long a soft threshold must be crossed before pods are evicted, by signal.
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// How long a pressure condition stays after its threshold is no longer crossed (5 m).
    #[serde(with = "go_duration")]
    pub eviction_pressure_transition_period: Duration,
    /// The grace period (seconds) a pod evicted for a soft threshold gets at most.
    pub eviction_max_pod_grace_period: i64,
    /// How much past its threshold a signal must recover before eviction stops, by signal.
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    /// Image garbage collection: above this disk usage (percent) unused images are removed…
    #[serde(rename = "imageGCHighThresholdPercent")]
    pub image_gc_high_threshold_percent: i32,
    /// …until usage is below this one.
    #[serde(rename = "imageGCLowThresholdPercent")]
    pub image_gc_low_threshold_percent: i32,
    /// An unused image younger than this is kept (2 m).
    #[serde(rename = "imageMinimumGCAge", with = "go_duration")]
    pub image_minimum_gc_age: Duration,
    /// An image unused for this long is removed whatever the disk usage; zero: never.
    #[serde(rename = "imageMaximumGCAge", with = "go_duration")]
    pub image_maximum_gc_age: Duration,
    /// A container's log is rotated when it reaches this size (10Mi)…
    pub container_log_max_size: String,
    /// …keeping this many files, the live one included (5).
    pub container_log_max_files: u32,
    /// How often the logs are checked for rotation (10 s, at least 3 s).
    #[serde(with = "go_duration")]
    pub container_log_monitor_interval: Duration,
    /// Sysctls (or `prefix*` patterns) outside the safe set that pods may set.
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Containers with no seccomp profile in their fields (or the deprecated annotations) run
    /// under the runtime's default profile instead of unconfined (false).
    pub seccomp_default: bool,
}

impl Default for KubeletConfiguration {
    /// Upstream's defaults (`pkg/kubelet/apis/config/v1beta1/defaults.go`).
    fn default() -> Self {
        let map = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        KubeletConfiguration {
            static_pod_path: None,
            file_check_frequency: Duration::from_secs(20),
            address: IpAddr::from([0, 0, 0, 0]),
            port: 10250,
            cluster_dns: Vec::new(),
            // upstream leaves it empty; every distribution sets this
            cluster_domain: "cluster.local".into(),
            sync_frequency: Duration::from_secs(60),
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            max_pods: 110,
            pod_pids_limit: -1,
            cgroups_per_qos: true,
            cgroup_root: "/".into(),
            kube_reserved: BTreeMap::new(),
            system_reserved: BTreeMap::new(),
            eviction_hard: map(&[
                ("memory.available", "100Mi"),
                ("nodefs.available", "10%"),
                ("nodefs.inodesFree", "5%"),
                ("imagefs.available", "15%"),
                ("imagefs.inodesFree", "5%"),
            ]),
            eviction_soft: BTreeMap::new(),
            eviction_soft_grace_period: BTreeMap::new(),
            eviction_pressure_transition_period: Duration::from_secs(300),
            eviction_max_pod_grace_period: 0,
            eviction_minimum_reclaim: BTreeMap::new(),
            image_gc_high_threshold_percent: 85,
            image_gc_low_threshold_percent: 80,
            image_minimum_gc_age: Duration::from_secs(120),
            image_maximum_gc_age: Duration::ZERO,
            container_log_max_size: "10Mi".into(),
            container_log_max_files: 5,
            container_log_monitor_interval: Duration::from_secs(10),
            allowed_unsafe_sysctls: Vec::new(),
            seccomp_default: false,
        }
    }
}

/// The fields of upstream's `KubeletConfiguration` this kubelet takes, as the file spells them.
const KNOWN_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "staticPodPath",
    "fileCheckFrequency",
    "address",
    "port",
    "clusterDNS",
    "clusterDomain",
    "syncFrequency",
    "resolvConf",
    "maxPods",
    "podPidsLimit",
    "cgroupsPerQOS",
    "cgroupRoot",
    "kubeReserved",
    "systemReserved",
    "evictionHard",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionPressureTransitionPeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "containerLogMonitorInterval",
    "allowedUnsafeSysctls",
    "seccompDefault",
];

/// A configuration read from a file, with the fields it had that this kubelet does not take.
#[derive(Debug)]
pub struct Loaded {
    pub config: KubeletConfiguration,
    pub unknown_fields: Vec<String>,
}

impl KubeletConfiguration {
    /// Reads the file `--config` names (YAML or JSON) over upstream's defaults. Fields it does
    /// not set keep their defaults; as upstream, an `evictionHard` given replaces the default
    /// map whole.
    pub fn from_file(path: &Path) -> Result<Loaded> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        Self::from_text(&text).map_err(|e| match e {
            Error::Invalid(message) => Error::Read {
                path: path.to_path_buf(),
                message,
            },
            e => e,
        })
    }

    /// [`Self::from_file`] on a file's text.
    pub fn from_text(text: &str) -> Result<Loaded> {
        let value: serde_json::Value =
            serde_yaml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let object = value
            .as_object()
            .ok_or_else(|| invalid("the file is not a KubeletConfiguration object"))?;
        let api_version = object.get("apiVersion").and_then(|v| v.as_str());
        let kind = object.get("kind").and_then(|v| v.as_str());
        if kind != Some(KIND) || !api_version.is_some_and(|v| API_VERSIONS.contains(&v)) {
            return Err(invalid(format!(
                "expected apiVersion {} and kind {KIND}, got {} {}",
                API_VERSIONS[0],
                api_version.unwrap_or("(none)"),
                kind.unwrap_or("(none)"),
            )));
        }
        let unknown_fields = object
            .keys()
            .filter(|k| !KNOWN_FIELDS.contains(&k.as_str()))
            .cloned()
            .collect();
        let config: KubeletConfiguration =
            serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        config.validate()?;
        Ok(Loaded {
            config,
            unknown_fields,
        })
    }

    /// Upstream's checks of the values (`ValidateKubeletConfiguration`), for the fields here.
    pub fn validate(&self) -> Result<()> {
        let percent = |name: &str, v: i32| {
            if (0..=100).contains(&v) {
                Ok(())
            } else {
                Err(invalid(format!(
                    "{name} ({v}) must be between 0 and 100, inclusive"
                )))
            }
        };
        percent(
            "imageGCHighThresholdPercent",
            self.image_gc_high_threshold_percent,
        )?;
        percent(
            "imageGCLowThresholdPercent",
            self.image_gc_low_threshold_percent,
        )?;
        if self.image_gc_low_threshold_percent >= self.image_gc_high_threshold_percent {
            return Err(invalid(format!(
                "imageGCLowThresholdPercent ({}) must be less than imageGCHighThresholdPercent ({})",
                self.image_gc_low_threshold_percent, self.image_gc_high_threshold_percent
            )));
        }
        if !self.image_maximum_gc_age.is_zero()
            && self.image_maximum_gc_age <= self.image_minimum_gc_age
        {
            return Err(invalid(format!(
                "imageMaximumGCAge {:?} must be greater than imageMinimumGCAge {:?}",
                self.image_maximum_gc_age, self.image_minimum_gc_age
            )));
        }
        if self.max_pods == 0 {
            return Err(invalid("maxPods (0) must not be a negative number or zero"));
        }
        if self.container_log_max_files < 2 {
            return Err(invalid(format!(
                "containerLogMaxFiles ({}) must be greater than 1",
                self.container_log_max_files
            )));
        }
        self.container_log_max_size_bytes()?;
        if self.container_log_monitor_interval < Duration::from_secs(3) {
            return Err(invalid(
                "containerLogMonitorInterval must be a positive time duration greater than or equal to 3s",
            ));
        }
        self.reserved()?;
        self.eviction_thresholds()?;
        if self.eviction_max_pod_grace_period < 0 {
            return Err(invalid("evictionMaxPodGracePeriod must not be negative"));
        }
        // the kubelet's own allowlist judges the patterns (names or `prefix*`, namespaced)
        crate::sysctl::Allowlist::new(None, &self.allowed_unsafe_sysctls)
            .map_err(|e| invalid(format!("allowedUnsafeSysctls: {e}")))?;
        Ok(())
    }

    /// `containerLogMaxSize` in bytes.
    pub fn container_log_max_size_bytes(&self) -> Result<u64> {
        Quantity::parse(&self.container_log_max_size)
            .ok()
            .and_then(|q| u64::try_from(q.value()).ok())
            .filter(|bytes| *bytes > 0)
            .ok_or_else(|| {
                invalid(format!(
                    "containerLogMaxSize {:?} must be a positive quantity",
                    self.container_log_max_size
                ))
            })
    }

    /// `kubeReserved` plus `systemReserved`, by resource: what the node keeps back from pods
    /// besides the hard eviction thresholds.
    pub fn reserved(&self) -> Result<BTreeMap<String, Quantity>> {
        let mut total: BTreeMap<String, i128> = BTreeMap::new();
        for (field, map) in [
            ("kubeReserved", &self.kube_reserved),
            ("systemReserved", &self.system_reserved),
        ] {
            for (resource, value) in map {
                if !["cpu", "memory", "ephemeral-storage", "pid"].contains(&resource.as_str()) {
                    return Err(invalid(format!(
                        "{field}: unsupported resource {resource:?} (cpu, memory, ephemeral-storage, pid)"
                    )));
                }
                let q = Quantity::parse(value)
                    .ok()
                    .filter(|q| q.nano_value() >= 0)
                    .ok_or_else(|| {
                        invalid(format!(
                            "{field}[{resource}]: {value:?} is not a non-negative quantity"
                        ))
                    })?;
                *total.entry(resource.clone()).or_default() += q.nano_value();
            }
        }
        Ok(total
            .into_iter()
            .map(|(resource, nanos)| {
                let format = if resource == "memory" || resource == "ephemeral-storage" {
                    skiff_apimachinery::quantity::Format::BinarySI
                } else {
                    skiff_apimachinery::quantity::Format::DecimalSI
                };
                let text = skiff_apimachinery::quantity::format_canonical(nanos, format);
                (
                    resource,
                    Quantity::parse(&text).expect("a canonical quantity"),
                )
            })
            .collect())
    }

    /// The hard and soft eviction thresholds, as upstream's `ParseThresholdConfig`: a soft
    /// threshold needs a grace period; a threshold of 0 or 0% is none.
    pub fn eviction_thresholds(&self) -> Result<Vec<Threshold>> {
        let mut out = Vec::new();
        for (signal, value) in &self.eviction_hard {
            if let Some(t) = Threshold::parse(signal, value, None)? {
                out.push(t);
            }
        }
        for (signal, value) in &self.eviction_soft {
            let grace = self.eviction_soft_grace_period.get(signal).ok_or_else(|| {
                invalid(format!(
                    "grace period must be specified for the soft eviction threshold {signal}"
                ))
            })?;
            let grace = parse_go_duration(grace)
                .map_err(|e| invalid(format!("evictionSoftGracePeriod[{signal}]: {e}")))?;
            if let Some(t) = Threshold::parse(signal, value, Some(grace))? {
                out.push(t);
            }
        }
        for signal in self.eviction_soft_grace_period.keys() {
            Signal::parse(signal)?;
        }
        for (signal, value) in &self.eviction_minimum_reclaim {
            let signal = Signal::parse(signal)?;
            let reclaim = ThresholdValue::parse(signal, value)?;
            for t in out.iter_mut().filter(|t| t.signal == signal) {
                t.min_reclaim = Some(reclaim);
            }
        }
        Ok(out)
    }
}

/// What the eviction manager watches (upstream's eviction signals this kubelet supports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    MemoryAvailable,
    AllocatableMemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    PidAvailable,
}

impl Signal {
    pub const ALL: [Signal; 7] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    pub fn parse(name: &str) -> Result<Signal> {
        Signal::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| invalid(format!("unsupported eviction signal {name}")))
    }
}

/// A threshold's value: an amount, or a percentage of the signal's capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ThresholdValue {
    /// Bytes, inodes or processes.
    Quantity(i64),
    /// A fraction of capacity, 0 < f ≤ 1.
    Percentage(f64),
}

impl ThresholdValue {
    /// `100Mi` or `10%`; `None` for a threshold of zero.
    fn parse(signal: Signal, value: &str) -> Result<ThresholdValue> {
        let value = value.trim();
        if let Some(p) = value.strip_suffix('%') {
            let p: f64 = p.parse().map_err(|_| {
                invalid(format!(
                    "eviction threshold {} has an invalid percentage {value:?}",
                    signal.name()
                ))
            })?;
            if !(0.0..=100.0).contains(&p) {
                return Err(invalid(format!(
                    "eviction percentage threshold {} must be >= 0% and <= 100%: {value}",
                    signal.name()
                )));
            }
            return Ok(ThresholdValue::Percentage(p / 100.0));
        }
        let q = Quantity::parse(value).map_err(|_| {
            invalid(format!(
                "eviction threshold {} has an invalid quantity {value:?}",
                signal.name()
            ))
        })?;
        if q.nano_value() < 0 {
            return Err(invalid(format!(
                "eviction threshold {} must be positive: {value}",
                signal.name()
            )));
        }
        Ok(ThresholdValue::Quantity(q.value()))
    }

    fn is_zero(self) -> bool {
        match self {
            ThresholdValue::Quantity(q) => q == 0,
            ThresholdValue::Percentage(p) => p == 0.0,
        }
    }

    /// The amount this value is of `capacity`, as upstream's `GetThresholdQuantity`: a
    /// percentage is a float32 there, and the product is truncated.
    pub fn amount(self, capacity: i64) -> i64 {
        match self {
            ThresholdValue::Quantity(q) => q,
            ThresholdValue::Percentage(p) => (capacity as f64 * f64::from(p as f32)) as i64,
        }
    }
}

/// One eviction threshold: pods are evicted when the signal's available amount is below
/// `value` (for a soft threshold, for longer than its grace period).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: ThresholdValue,
    /// `None` for a hard threshold.
    pub grace_period: Option<Duration>,
    /// How far past the threshold to reclaim (`evictionMinimumReclaim`).
    pub min_reclaim: Option<ThresholdValue>,
}

impl Threshold {
    fn parse(signal: &str, value: &str, grace_period: Option<Duration>) -> Result<Option<Self>> {
        let signal = Signal::parse(signal)?;
        let value = ThresholdValue::parse(signal, value)?;
        Ok((!value.is_zero()).then_some(Threshold {
            signal,
            value,
            grace_period,
            min_reclaim: None,
        }))
    }

    pub fn is_hard(&self) -> bool {
        self.grace_period.is_none()
    }
}

/// Upstream's flag form of a threshold map: `memory.available<100Mi,nodefs.available<10%`.
pub fn parse_threshold_flag(text: &str) -> Result<BTreeMap<String, String>> {
    parse_map_flag(text, '<')
}

/// Upstream's flag form of a map: `cpu=100m,memory=1Gi` (also `signal=duration`).
pub fn parse_pairs_flag(text: &str) -> Result<BTreeMap<String, String>> {
    parse_map_flag(text, '=')
}

fn parse_map_flag(text: &str, separator: char) -> Result<BTreeMap<String, String>> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let (k, v) = item
                .split_once(separator)
                .ok_or_else(|| invalid(format!("{item:?}: expected KEY{separator}VALUE")))?;
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

fn parse_go_duration(text: &str) -> Result<Duration, String> {
    let nanos = skiff_apimachinery::duration::parse(text)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| format!("invalid duration {text:?}: it must not be negative"))
}

/// Go durations (`2m0s`) in the file.
mod go_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse_go_duration(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";

    #[test]
    fn a_file_sets_what_it_names_and_keeps_upstreams_defaults_for_the_rest() {
        let loaded = KubeletConfiguration::from_text(&format!(
            "{HEAD}containerLogMaxSize: 1Mi\ncontainerLogMaxFiles: 3\nimageMinimumGCAge: 30s\n\
             kubeReserved: {{cpu: 100m, memory: 100Mi}}\nsystemReserved: {{memory: 156Mi}}\n\
             featureGates: {{Foo: true}}\nmaxPods: 50\nseccompDefault: true\n"
        ))
        .unwrap();
        let c = loaded.config;
        assert!(c.seccomp_default);
        assert!(!KubeletConfiguration::default().seccomp_default);
        assert_eq!(c.container_log_max_size_bytes(), Ok(1 << 20));
        assert_eq!(c.container_log_max_files, 3);
        assert_eq!(c.container_log_monitor_interval, Duration::from_secs(10));
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(30));
        assert_eq!(c.max_pods, 50);
        assert_eq!(c.image_gc_high_threshold_percent, 85);
        assert_eq!(c.sync_frequency, Duration::from_secs(60));
        let reserved = c.reserved().unwrap();
        assert_eq!(reserved["memory"].value(), 256 << 20);
        assert_eq!(reserved["cpu"].milli_value(), 100);
        assert_eq!(loaded.unknown_fields, ["featureGates"]);
    }

    #[test]
    fn the_file_must_be_a_kubelet_configuration() {
        let e = KubeletConfiguration::from_text("apiVersion: v1\nkind: ConfigMap\n").unwrap_err();
        assert!(
            e.to_string()
                .contains("expected apiVersion kubelet.config.k8s.io/v1beta1"),
            "{e}"
        );
        let e = KubeletConfiguration::from_text(&format!("{HEAD}maxPods: many\n")).unwrap_err();
        assert!(e.to_string().contains("invalid"), "{e}");
    }

    #[test]
    fn bad_values_are_refused_with_upstreams_reasons() {
        let bad = |body: &str| {
            KubeletConfiguration::from_text(&format!("{HEAD}{body}"))
                .unwrap_err()
                .to_string()
        };
        assert!(bad("imageGCLowThresholdPercent: 90\n").contains("must be less than"));
        assert!(bad("imageGCHighThresholdPercent: 101\n").contains("between 0 and 100"));
        assert!(bad("containerLogMaxFiles: 1\n").contains("greater than 1"));
        assert!(bad("containerLogMaxSize: lots\n").contains("containerLogMaxSize"));
        assert!(bad("containerLogMonitorInterval: 1s\n").contains("greater than or equal to 3s"));
        assert!(bad("kubeReserved: {gpu: '1'}\n").contains("unsupported resource"));
        assert!(bad("evictionHard: {memory.free: 1Gi}\n").contains("unsupported eviction signal"));
        assert!(bad("evictionHard: {nodefs.available: 120%}\n").contains("<= 100%"));
        assert!(
            bad("evictionSoft: {memory.available: 1Gi}\n")
                .contains("grace period must be specified")
        );
        assert!(bad("allowedUnsafeSysctls: ['net.*.x']\n").contains("allowedUnsafeSysctls"));
    }

    #[test]
    fn thresholds_parse_as_upstreams_hard_soft_and_reclaim_settings() {
        let mut c = KubeletConfiguration::default();
        let defaults = c.eviction_thresholds().unwrap();
        assert_eq!(defaults.len(), 5);
        let memory = defaults
            .iter()
            .find(|t| t.signal == Signal::MemoryAvailable)
            .unwrap();
        assert_eq!(memory.value, ThresholdValue::Quantity(100 << 20));
        assert!(memory.is_hard());

        c.eviction_hard = parse_threshold_flag("memory.available<1Gi,nodefs.available<0%").unwrap();
        c.eviction_soft = parse_threshold_flag("memory.available<2Gi").unwrap();
        c.eviction_soft_grace_period = parse_pairs_flag("memory.available=1m30s").unwrap();
        c.eviction_minimum_reclaim = parse_pairs_flag("memory.available=500Mi").unwrap();
        let t = c.eviction_thresholds().unwrap();
        // the zero threshold is none
        assert_eq!(t.len(), 2);
        assert!(
            t.iter()
                .all(|t| t.min_reclaim == Some(ThresholdValue::Quantity(500 << 20)))
        );
        let soft = t.iter().find(|t| !t.is_hard()).unwrap();
        assert_eq!(soft.grace_period, Some(Duration::from_secs(90)));
        assert_eq!(ThresholdValue::Percentage(0.1).amount(1000), 100);
    }

    #[test]
    fn map_flags_split_on_commas_and_their_separator() {
        assert_eq!(
            parse_pairs_flag("cpu=100m, memory=1Gi").unwrap(),
            BTreeMap::from([
                ("cpu".into(), "100m".into()),
                ("memory".into(), "1Gi".into())
            ])
        );
        assert!(parse_threshold_flag("memory.available=1Gi").is_err());
        assert!(parse_pairs_flag("").unwrap().is_empty());
    }
}
