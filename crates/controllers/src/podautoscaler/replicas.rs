//! How many replicas a metric asks for (upstream's `ReplicaCalculator`). For `Resource` and
//! `ContainerResource` metrics, and `Pods` metrics (an average value per pod, upstream's
//! `calcPlainMetricReplicas`, which a resource's average value target shares), the pods of the
//! target are sorted into ready, unready
//! (pending, or for CPU not yet ready or still starting), missing a metric, and ignored
//! (deleted or failed); the usage of the ready ones against the target gives a ratio, and the
//! replicas are the ready count scaled by it, unless the change is within the tolerance. When
//! pods are missing or unready the ratio is taken again with the conservative assumption
//! (missing pods at their request on a scale-down and at zero on a scale-up, unready pods at
//! zero on a scale-up), and no scale happens if that turns the direction around. One value (an
//! `Object` metric's, or the sum of an `External` metric's) scales the ready pods by its ratio
//! to a `Value` target, or gives the replicas directly against an `AverageValue` target.

use std::collections::{BTreeMap, BTreeSet};

use jiff::{SignedDuration, Timestamp};

/// What the calculator knows of one pod of the target.
#[derive(Debug, Clone, PartialEq)]
pub struct PodInfo {
    pub name: String,
    pub phase: String,
    pub deleting: bool,
    /// The `Ready` condition: its status and when it last changed.
    pub ready: Option<(bool, Timestamp)>,
    pub start_time: Option<Timestamp>,
    /// The pod's request of the resource in milli-units (the named container's, for a
    /// container metric), or why it has none.
    pub request: Result<i64, String>,
}

/// One pod's metric: usage in milli-units, read at `timestamp` over `window`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub value: i64,
    pub timestamp: Timestamp,
    pub window: SignedDuration,
}

/// The target of a resource metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Percent of the pods' requests.
    Utilization(i32),
    /// Milli-units per pod.
    AverageValue(i64),
}

/// What the metric proposes, with what was measured for the HPA's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposal {
    pub replicas: i32,
    /// Percent of the requests (for a utilization target).
    pub utilization: Option<i32>,
    /// The average usage per pod, in milli-units.
    pub average_value: i64,
}

/// The calculator's settings (upstream's controller-manager flags).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calculator {
    /// `--horizontal-pod-autoscaler-tolerance`.
    pub tolerance: f64,
    /// `--horizontal-pod-autoscaler-cpu-initialization-period`.
    pub cpu_initialization_period: SignedDuration,
    /// `--horizontal-pod-autoscaler-initial-readiness-delay`.
    pub initial_readiness_delay: SignedDuration,
}

impl Default for Calculator {
    fn default() -> Calculator {
        Calculator {
            tolerance: 0.1,
            cpu_initialization_period: SignedDuration::from_mins(5),
            initial_readiness_delay: SignedDuration::from_secs(30),
        }
    }
}

/// The pods sorted as upstream's `groupPods`.
#[derive(Debug, Default)]
struct Groups {
    ready: usize,
    unready: BTreeSet<String>,
    missing: BTreeSet<String>,
    ignored: BTreeSet<String>,
}

impl Calculator {
    /// The replicas `target` asks for, given the pods, their metrics (by pod name), whether the
    /// resource is CPU, the current replicas and the time now. The error is upstream's message.
    pub fn resource_replicas(
        &self,
        current: i32,
        target: Target,
        cpu: bool,
        pods: &[PodInfo],
        metrics: &BTreeMap<String, Sample>,
        now: Timestamp,
    ) -> Result<Proposal, String> {
        if pods.is_empty() {
            return Err("no pods returned by selector while calculating replica count".into());
        }
        let groups = self.group(pods, metrics, cpu, now);
        let mut usage: BTreeMap<&str, i64> = metrics
            .iter()
            .filter(|(name, _)| {
                !groups.ignored.contains(name.as_str()) && !groups.unready.contains(name.as_str())
            })
            .map(|(name, s)| (name.as_str(), s.value))
            .collect();
        let requests: BTreeMap<&str, i64> = match target {
            Target::Utilization(_) => pods
                .iter()
                .map(|p| Ok((p.name.as_str(), p.request.clone()?)))
                .collect::<Result<_, String>>()?,
            Target::AverageValue(_) => BTreeMap::new(),
        };
        if usage.is_empty() {
            return Err("did not receive metrics for targeted pods (pods might be unready)".into());
        }
        let (ratio, measured) = ratio_of(&usage, &requests, target)?;
        let scale_up_with_unready = !groups.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && groups.missing.is_empty() {
            let replicas = if (1.0 - ratio).abs() <= self.tolerance {
                current
            } else {
                (ratio * groups.ready as f64).ceil() as i32
            };
            return Ok(Proposal {
                replicas,
                ..measured
            });
        }
        for name in &groups.missing {
            // a scale-down assumes missing pods at their request (or the target above it), a
            // scale-up at nothing
            let assumed = match target {
                Target::Utilization(t) if ratio < 1.0 => {
                    requests[name.as_str()] * i64::from(t.max(100)) / 100
                }
                Target::Utilization(_) if ratio > 1.0 => 0,
                Target::Utilization(_) => continue,
                Target::AverageValue(t) if ratio < 1.0 => t,
                Target::AverageValue(_) if ratio > 1.0 => 0,
                Target::AverageValue(_) => continue,
            };
            usage.insert(name, assumed);
        }
        if scale_up_with_unready {
            for name in &groups.unready {
                usage.insert(name, 0);
            }
        }
        let (new_ratio, _) = ratio_of(&usage, &requests, target)?;
        let turned = (ratio < 1.0 && new_ratio > 1.0) || (ratio > 1.0 && new_ratio < 1.0);
        if (1.0 - new_ratio).abs() <= self.tolerance || turned {
            return Ok(Proposal {
                replicas: current,
                ..measured
            });
        }
        let replicas = (new_ratio * usage.len() as f64).ceil() as i32;
        let against =
            (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current);
        Ok(Proposal {
            replicas: if against { current } else { replicas },
            ..measured
        })
    }

    /// The replicas a usage ratio of one value (an `Object` metric's, or an `External` metric's
    /// sum) against a `Value` target asks for, as upstream's `getUsageRatioReplicaCount`: the
    /// ready pods scaled by the ratio unless it is within the tolerance; from zero replicas the
    /// ratio alone (so that a target may scale from and to zero).
    pub fn usage_ratio_replicas(
        &self,
        current: i32,
        ratio: f64,
        pods: &[PodInfo],
    ) -> Result<i32, String> {
        if current == 0 {
            return Ok(ratio.ceil() as i32);
        }
        if (1.0 - ratio).abs() <= self.tolerance {
            return Ok(current);
        }
        if pods.is_empty() {
            return Err("unable to calculate ready pods: no pods returned by selector while calculating replica count".into());
        }
        let ready = pods
            .iter()
            .filter(|p| p.phase == "Running" && p.ready.is_some_and(|(ready, _)| ready))
            .count();
        Ok((ratio * ready as f64).ceil() as i32)
    }

    /// The replicas one value (an `Object` metric's, or an `External` metric's sum) asks for
    /// against an `AverageValue` target per pod, with the average per current replica, as
    /// upstream's `GetObjectPerPodMetricReplicas` and `GetExternalPerPodMetricReplicas`: the value
    /// over the target unless the change is within the tolerance of `status_replicas` (the
    /// scale's `status.replicas`).
    pub fn per_pod_replicas(&self, status_replicas: i32, usage: i64, target: i64) -> (i32, i64) {
        let (usage, target_f, replicas) = (usage as f64, target as f64, f64::from(status_replicas));
        let ratio = usage / (target_f * replicas);
        let proposal = if (1.0 - ratio).abs() > self.tolerance {
            (usage / target_f).ceil() as i32
        } else {
            status_replicas
        };
        (proposal, (usage / replicas).ceil() as i64)
    }

    fn group(
        &self,
        pods: &[PodInfo],
        metrics: &BTreeMap<String, Sample>,
        cpu: bool,
        now: Timestamp,
    ) -> Groups {
        let mut g = Groups::default();
        for pod in pods {
            if pod.deleting || pod.phase == "Failed" {
                g.ignored.insert(pod.name.clone());
                continue;
            }
            if pod.phase == "Pending" {
                g.unready.insert(pod.name.clone());
                continue;
            }
            let Some(sample) = metrics.get(&pod.name) else {
                g.missing.insert(pod.name.clone());
                continue;
            };
            if cpu && self.cpu_unready(pod, sample, now) {
                g.unready.insert(pod.name.clone());
                continue;
            }
            g.ready += 1;
        }
        g
    }

    /// Whether a pod's CPU sample is left out: no readiness yet; within the initialization
    /// period, unready or sampled partly before it became ready; after it, unready and never
    /// ready since it started.
    fn cpu_unready(&self, pod: &PodInfo, sample: &Sample, now: Timestamp) -> bool {
        let (Some((ready, changed)), Some(started)) = (pod.ready, pod.start_time) else {
            return true;
        };
        if started + self.cpu_initialization_period > now {
            !ready || sample.timestamp < changed + sample.window
        } else {
            !ready && started + self.initial_readiness_delay > changed
        }
    }
}

/// The usage ratio and what was measured, as upstream's `GetResourceUtilizationRatio` (pods
/// without a request do not count) and `GetMetricUtilizationRatio`.
fn ratio_of(
    usage: &BTreeMap<&str, i64>,
    requests: &BTreeMap<&str, i64>,
    target: Target,
) -> Result<(f64, Proposal), String> {
    match target {
        Target::Utilization(t) => {
            let (mut used, mut requested, mut counted) = (0i64, 0i64, 0i64);
            for (name, value) in usage {
                if let Some(r) = requests.get(name) {
                    used += value;
                    requested += r;
                    counted += 1;
                }
            }
            if requested == 0 {
                return Err("no metrics returned matched known pods".into());
            }
            let utilization = (used * 100 / requested) as i32;
            Ok((
                f64::from(utilization) / f64::from(t),
                Proposal {
                    replicas: 0,
                    utilization: Some(utilization),
                    average_value: used / counted,
                },
            ))
        }
        Target::AverageValue(t) => {
            let average = usage.values().sum::<i64>() / usage.len().max(1) as i64;
            Ok((
                average as f64 / t as f64,
                Proposal {
                    replicas: 0,
                    utilization: None,
                    average_value: average,
                },
            ))
        }
    }
}

#[cfg(test)]
#[path = "replicas_tests.rs"]
mod tests;
