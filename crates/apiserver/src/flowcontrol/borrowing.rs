//! Seat borrowing between priority levels (upstream's APF borrowing, KEP-1040).
//!
//! Each limited level has a nominal limit (its shares of the server's seats) and bounds around
//! it: it may lend `lendablePercent` of its nominal seats to others, and borrow up to
//! `borrowingLimitPercent` of them (without limit when unset). Every ten seconds each level's
//! seat demand (seats in use plus seats waiting) over the period is summarised, smoothed, and
//! the server's seats are shared out again: each level gets its fair proportion of its
//! demand, kept within its bounds, and never less than what it used (up to its nominal limit),
//! so a busy level runs on the seats idle levels lend.

use std::time::Instant;

/// How often the levels' limits are worked out again (upstream's `borrowingAdjustmentPeriod`).
pub const PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

/// The weight of the previous smoothed demand (a half-life of five minutes at [`PERIOD`]).
const SMOOTHING: f64 = 0.977;

/// The least demand a level is counted with, so that a proportion of it is defined.
const MIN_TARGET: f64 = 0.001;

/// A value's time-weighted moments since the last reset (upstream's `Integrator`).
#[derive(Debug, Clone)]
pub struct Integrator {
    value: f64,
    since: Instant,
    elapsed: f64,
    integral: f64,
    integral_of_squares: f64,
    max: f64,
}

/// What an [`Integrator`] saw over one period.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub seconds: f64,
    pub average: f64,
    pub deviation: f64,
    pub max: f64,
}

impl Integrator {
    pub fn new(now: Instant) -> Self {
        Self {
            value: 0.0,
            since: now,
            elapsed: 0.0,
            integral: 0.0,
            integral_of_squares: 0.0,
            max: 0.0,
        }
    }

    pub fn set(&mut self, value: f64, now: Instant) {
        self.advance(now);
        self.value = value;
        self.max = self.max.max(value);
    }

    fn advance(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.since).as_secs_f64();
        self.since = now;
        self.elapsed += dt;
        self.integral += dt * self.value;
        self.integral_of_squares += dt * self.value * self.value;
    }

    /// The period's sample; the next period starts now, at the current value.
    pub fn reset(&mut self, now: Instant) -> Sample {
        self.advance(now);
        let sample = if self.elapsed > 0.0 {
            let average = self.integral / self.elapsed;
            let variance = self.integral_of_squares / self.elapsed - average * average;
            Sample {
                seconds: self.elapsed,
                average,
                deviation: variance.max(0.0).sqrt(),
                max: self.max,
            }
        } else {
            Sample {
                seconds: 0.0,
                average: 0.0,
                deviation: 0.0,
                max: self.max,
            }
        };
        let value = self.value;
        *self = Self::new(now);
        self.value = value;
        self.max = value;
        sample
    }
}

/// A level's seat demand as the allocation sees it (upstream's `seatDemandStats`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Demand {
    pub average: f64,
    pub deviation: f64,
    pub high_watermark: f64,
    /// The envelope (average plus deviation), decayed slowly when demand falls.
    pub smoothed: f64,
}

impl Demand {
    pub fn update(&mut self, sample: Sample) {
        self.high_watermark = sample.max;
        if sample.seconds <= 0.0 {
            return;
        }
        self.average = sample.average;
        self.deviation = sample.deviation;
        let envelope = sample.average + sample.deviation;
        self.smoothed = envelope.max(SMOOTHING * self.smoothed + (1.0 - SMOOTHING) * envelope);
    }
}

/// A level's nominal limit and the range its current limit stays within.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bounds {
    pub nominal: u32,
    pub lower: u32,
    pub upper: u32,
}

impl Bounds {
    /// The bounds of a level with `nominal` seats that lends `lendable_percent` of them and
    /// borrows up to `borrowing_percent` of them (up to `server_limit` seats when `None`).
    pub fn new(
        nominal: u32,
        lendable_percent: u32,
        borrowing_percent: Option<u32>,
        server_limit: u32,
    ) -> Self {
        let percent = |p: u32| (f64::from(nominal) * f64::from(p) / 100.0).round() as u32;
        let lendable = percent(lendable_percent.min(100));
        let borrowable = borrowing_percent.map_or(server_limit, percent);
        Self {
            nominal,
            lower: nominal - lendable,
            upper: nominal.saturating_add(borrowable),
        }
    }

    /// A new level's limit before its demand is known: half its lendable seats lent.
    pub fn initial(&self) -> u32 {
        self.nominal - (self.nominal - self.lower) / 2
    }

    /// What the allocation asks for this level given its `demand`: at least what it used
    /// over the period (but no more than its nominal limit) and its lower bound, at most its
    /// upper bound, and in proportion to its smoothed demand.
    pub fn claim(&self, demand: &Demand) -> Claim {
        let lower = f64::from(self.lower).max(demand.high_watermark.min(f64::from(self.nominal)));
        Claim {
            lower,
            upper: f64::from(self.upper),
            target: lower.max(demand.smoothed),
        }
    }
}

/// One level's part in an allocation: `lower <= target`, `lower <= upper`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Claim {
    pub lower: f64,
    pub upper: f64,
    pub target: f64,
}

/// Shares `total` among the claims (upstream's `computeConcurrencyAllocation`): the
/// allocations sum to `total`, and each is its claim's target times one common proportion,
/// clamped to the claim's bounds. Returns the allocations and that proportion. The bounds
/// must admit the total (the lower bounds sum to at most it, the upper ones to at least it);
/// past them, every claim gets the bound on that side.
pub fn allocate(total: f64, claims: &[Claim]) -> (Vec<f64>, f64) {
    let target = |c: &Claim| c.target.max(MIN_TARGET);
    let at = |proportion: f64| -> f64 {
        claims
            .iter()
            .map(|c| (proportion * target(c)).clamp(c.lower, c.upper.max(c.lower)))
            .sum()
    };
    // the allocations' sum rises, linearly between them, through the proportions at which a
    // claim meets one of its bounds
    let mut bends: Vec<f64> = claims
        .iter()
        .flat_map(|c| [c.lower / target(c), c.upper / target(c)])
        .collect();
    bends.push(0.0);
    bends.sort_by(f64::total_cmp);
    let mut proportion = *bends.last().unwrap_or(&0.0);
    let mut below = (0.0, at(0.0));
    for &bend in &bends {
        let sum = at(bend);
        if sum >= total {
            let (from, from_sum) = below;
            proportion = if sum > from_sum {
                from + (total - from_sum) * (bend - from) / (sum - from_sum)
            } else {
                from
            };
            break;
        }
        below = (bend, sum);
    }
    let allocations = claims
        .iter()
        .map(|c| (proportion * target(c)).clamp(c.lower, c.upper.max(c.lower)))
        .collect();
    (allocations, proportion)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn claim(lower: f64, upper: f64, target: f64) -> Claim {
        Claim {
            lower,
            upper,
            target,
        }
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
    }

    #[test]
    fn an_allocation_is_a_common_proportion_of_the_targets_within_their_bounds() {
        // no bound matters: proportional to the targets
        let (got, p) = allocate(60.0, &[claim(0.0, 100.0, 10.0), claim(0.0, 100.0, 20.0)]);
        assert!(close(&got, &[20.0, 40.0]), "{got:?}");
        assert!((p - 2.0).abs() < 1e-9);
        // an upper bound caps one; the rest goes to the other
        let (got, _) = allocate(60.0, &[claim(0.0, 15.0, 10.0), claim(0.0, 100.0, 20.0)]);
        assert!(close(&got, &[15.0, 45.0]), "{got:?}");
        // a lower bound holds one up; the other gets what is left
        let (got, _) = allocate(60.0, &[claim(50.0, 100.0, 50.0), claim(0.0, 100.0, 50.0)]);
        assert!(close(&got, &[50.0, 10.0]), "{got:?}");
        // a claim with no demand gets its lower bound, or almost nothing
        let (got, _) = allocate(30.0, &[claim(0.0, 600.0, 0.0), claim(5.0, 600.0, 40.0)]);
        assert!(
            got[0] < 0.001 && (got[0] + got[1] - 30.0).abs() < 1e-6,
            "{got:?}"
        );
        // bounds that leave no room
        let (got, _) = allocate(10.0, &[claim(4.0, 8.0, 4.0), claim(6.0, 9.0, 6.0)]);
        assert!(close(&got, &[4.0, 6.0]), "{got:?}");
        let (got, _) = allocate(17.0, &[claim(4.0, 8.0, 4.0), claim(6.0, 9.0, 6.0)]);
        assert!(close(&got, &[8.0, 9.0]), "{got:?}");
    }

    #[test]
    fn bounds_follow_the_percentages_rounded() {
        let b = Bounds::new(245, 90, None, 600);
        assert_eq!((b.lower, b.upper), (245 - 221, 245 + 600));
        assert_eq!(b.initial(), 245 - 110);
        let b = Bounds::new(74, 33, Some(50), 600);
        assert_eq!((b.lower, b.upper), (74 - 24, 74 + 37));
        let b = Bounds::new(1, 0, Some(0), 2);
        assert_eq!((b.lower, b.upper, b.initial()), (1, 1, 1));
        // a level that used more than it lends keeps what it used, up to its nominal limit
        let b = Bounds::new(100, 50, None, 600);
        let busy = Demand {
            high_watermark: 80.0,
            smoothed: 20.0,
            ..Default::default()
        };
        assert_eq!(b.claim(&busy), claim(80.0, 700.0, 80.0));
        let flooded = Demand {
            high_watermark: 300.0,
            smoothed: 250.0,
            ..Default::default()
        };
        assert_eq!(b.claim(&flooded), claim(100.0, 700.0, 250.0));
    }

    #[test]
    fn the_integrator_averages_over_time_and_restarts_at_the_current_value() {
        let t0 = Instant::now();
        let mut i = Integrator::new(t0);
        i.set(10.0, t0);
        i.set(30.0, t0 + Duration::from_secs(1));
        let s = i.reset(t0 + Duration::from_secs(2));
        assert_eq!((s.seconds, s.average, s.max), (2.0, 20.0, 30.0));
        assert!((s.deviation - 10.0).abs() < 1e-9);
        // the next period starts at 30, and its high watermark is that
        let s = i.reset(t0 + Duration::from_secs(4));
        assert_eq!((s.average, s.deviation, s.max), (30.0, 0.0, 30.0));

        let mut d = Demand::default();
        d.update(s);
        assert_eq!(d.smoothed, 30.0);
        // demand falls: the smoothed figure decays slowly
        d.update(Sample {
            seconds: 10.0,
            average: 0.0,
            deviation: 0.0,
            max: 0.0,
        });
        assert!((d.smoothed - 30.0 * SMOOTHING).abs() < 1e-9);
        assert_eq!(d.high_watermark, 0.0);
    }
}
