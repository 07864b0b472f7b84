//! What becomes of a metric's proposal (upstream's `normalizeDesiredReplicasWithBehaviors`):
//! stabilized against the recommendations of the scale-up and scale-down windows (the lowest
//! recent one bounds a scale-up, the highest a scale-down), then limited by the scaling
//! policies over the replicas added or removed in each policy's period, and by the minimum and
//! maximum. Each step's reason is the one upstream sets on `AbleToScale` and `ScalingLimited`.
//! An HPA without `behavior` gets upstream's documented defaults.

use jiff::{SignedDuration, Timestamp};

/// A scaling policy: at most `value` pods, or `value` percent, per `period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Pods { value: i32, period: SignedDuration },
    Percent { value: i32, period: SignedDuration },
}

impl Policy {
    fn period(&self) -> SignedDuration {
        match self {
            Policy::Pods { period, .. } | Policy::Percent { period, .. } => *period,
        }
    }
}

/// How the policies of a direction combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Select {
    /// The policy allowing the most change.
    Max,
    /// The policy allowing the least change.
    Min,
    /// No scaling in this direction.
    Disabled,
}

/// One direction's rules (`HPAScalingRules`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    pub window: SignedDuration,
    pub select: Select,
    pub policies: Vec<Policy>,
}

/// Both directions' rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behavior {
    pub up: Rules,
    pub down: Rules,
}

impl Behavior {
    /// Upstream's defaults: up at once by 100% or 4 pods per 15 s, whichever is more; down
    /// after `down_window` (`--horizontal-pod-autoscaler-downscale-stabilization`, 5 min) by up
    /// to 100% per 15 s.
    pub fn defaults(down_window: SignedDuration) -> Behavior {
        let period = SignedDuration::from_secs(15);
        Behavior {
            up: Rules {
                window: SignedDuration::ZERO,
                select: Select::Max,
                policies: vec![
                    Policy::Percent { value: 100, period },
                    Policy::Pods { value: 4, period },
                ],
            },
            down: Rules {
                window: down_window,
                select: Select::Max,
                policies: vec![Policy::Percent { value: 100, period }],
            },
        }
    }
}

/// One HPA's memory: its recent recommendations and scale changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    recommendations: Vec<(Timestamp, i32)>,
    ups: Vec<(Timestamp, i32)>,
    downs: Vec<(Timestamp, i32)>,
}

/// A condition's status, reason and message.
pub type Condition = (bool, &'static str, &'static str);

/// What normalization decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub replicas: i32,
    pub able_to_scale: Condition,
    pub scaling_limited: Condition,
}

/// The replicas to scale to for a metrics' `desired` count, recording it in `history`.
pub fn normalize(
    history: &mut History,
    behavior: &Behavior,
    (current, desired): (i32, i32),
    (min, max): (i32, i32),
    now: Timestamp,
) -> Decision {
    let stabilized = stabilize(history, behavior, current, desired, now);
    let able_to_scale = if stabilized == desired {
        (
            true,
            "ReadyForNewScale",
            "recommended size matches current size",
        )
    } else if desired >= current {
        (
            true,
            "ScaleUpStabilized",
            "recent recommendations were lower than current one, applying the lowest recent recommendation",
        )
    } else {
        (
            true,
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation",
        )
    };
    let (replicas, reason, message) =
        limit(history, behavior, current, stabilized, (min, max), now);
    Decision {
        replicas,
        able_to_scale,
        scaling_limited: (replicas != stabilized, reason, message),
    }
}

/// Records a scale from `from` to `to` replicas, for the policies' periods.
pub fn record_scale(
    history: &mut History,
    behavior: &Behavior,
    from: i32,
    to: i32,
    now: Timestamp,
) {
    let (events, rules, change) = if to > from {
        (&mut history.ups, &behavior.up, to - from)
    } else {
        (&mut history.downs, &behavior.down, from - to)
    };
    let longest = rules
        .policies
        .iter()
        .map(Policy::period)
        .max()
        .unwrap_or_default();
    events.retain(|(t, _)| *t > now - longest);
    events.push((now, change));
}

/// The current count moved toward `desired` only as far as every recommendation of the
/// windows agrees.
fn stabilize(
    history: &mut History,
    behavior: &Behavior,
    current: i32,
    desired: i32,
    now: Timestamp,
) -> i32 {
    let up_cutoff = now - behavior.up.window;
    let down_cutoff = now - behavior.down.window;
    let (mut up, mut down) = (desired, desired);
    for &(t, r) in &history.recommendations {
        if t > up_cutoff {
            up = up.min(r);
        }
        if t > down_cutoff {
            down = down.max(r);
        }
    }
    history
        .recommendations
        .retain(|(t, _)| *t > up_cutoff || *t > down_cutoff);
    history.recommendations.push((now, desired));
    current.max(up).min(down)
}

/// The policies' and the bounds' limit on a move from `current` to `desired`.
fn limit(
    history: &History,
    behavior: &Behavior,
    current: i32,
    desired: i32,
    (min, max): (i32, i32),
    now: Timestamp,
) -> (i32, &'static str, &'static str) {
    if desired > current {
        let rate = scale_limit(history, &behavior.up, current, now, true).max(current);
        if rate < max {
            if desired > rate {
                return (
                    rate,
                    "ScaleUpLimit",
                    "the desired replica count is increasing faster than the maximum scale rate",
                );
            }
        } else if desired > max {
            return (
                max,
                "TooManyReplicas",
                "the desired replica count is more than the maximum replica count",
            );
        }
    } else if desired < current {
        let rate = scale_limit(history, &behavior.down, current, now, false).min(current);
        if rate > min {
            if desired < rate {
                return (
                    rate,
                    "ScaleDownLimit",
                    "the desired replica count is decreasing faster than the maximum scale rate",
                );
            }
        } else if desired < min {
            return (
                min,
                "TooFewReplicas",
                "the desired replica count is less than the minimum replica count",
            );
        }
    }
    (
        desired,
        "DesiredWithinRange",
        "the desired count is within the acceptable range",
    )
}

/// How far the policies let the count go from `current` (up or down), counting the changes
/// made in each policy's period from the count it started with.
fn scale_limit(history: &History, rules: &Rules, current: i32, now: Timestamp, up: bool) -> i32 {
    let changed = |events: &[(Timestamp, i32)], period: SignedDuration| -> i32 {
        events
            .iter()
            .filter(|(t, _)| *t > now - period)
            .map(|(_, c)| c)
            .sum()
    };
    let proposals = rules.policies.iter().map(|policy| {
        let period = policy.period();
        let start = current - changed(&history.ups, period) + changed(&history.downs, period);
        match (policy, up) {
            (Policy::Pods { value, .. }, true) => start + value,
            (Policy::Pods { value, .. }, false) => start - value,
            (Policy::Percent { value, .. }, true) => {
                (f64::from(start) * (1.0 + f64::from(*value) / 100.0)).ceil() as i32
            }
            (Policy::Percent { value, .. }, false) => {
                (f64::from(start) * (1.0 - f64::from(*value) / 100.0)) as i32
            }
        }
    });
    // "Max" picks the policy allowing the most change: the highest limit up, the lowest down
    match (rules.select, up) {
        (Select::Disabled, _) => current,
        (Select::Max, true) | (Select::Min, false) => proposals.max().unwrap_or(current),
        (Select::Min, true) | (Select::Max, false) => proposals.min().unwrap_or(current),
    }
}

#[cfg(test)]
#[path = "behavior_tests.rs"]
mod tests;
