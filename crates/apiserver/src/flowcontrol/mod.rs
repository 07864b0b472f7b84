//! API Priority and Fairness (upstream's `--enable-priority-and-fairness`, on by default): each
//! request is classified by the FlowSchemas (the first match by `matchingPrecedence`, then
//! name) into a priority level and a flow, and waits for seats in that level
//! ([`queueset`]). The server's concurrency limit (`--max-requests-inflight` +
//! `--max-mutating-requests-inflight`) is shared among the levels by their
//! `nominalConcurrencyShares`, and every ten seconds idle levels lend seats to busy ones
//! ([`borrowing`]). A request the level refuses gets 429 with a `Retry-After`;
//! every classified response carries `X-Kubernetes-PF-FlowSchema-UID` and
//! `X-Kubernetes-PF-PriorityLevel-UID`.
//!
//! The configuration is read from the watch cache, and rebuilt only when a FlowSchema or a
//! PriorityLevelConfiguration changed. A FlowSchema whose priority level does not exist is
//! left out (its `Dangling` condition says so, [`status`]); the mandatory `exempt` and
//! `catch-all` objects are used as built in while they are not stored.

pub mod borrowing;
pub mod queueset;
pub mod rules;
pub mod status;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use serde_json::Value;
use skiff_apimachinery::catalog::{ResourceType, lookup};

use crate::authn::UserInfo;
use crate::cache::{Cacher, ResourceCache};
use crate::error::ApiError;
use crate::request::RequestInfo;
use borrowing::{Bounds, Demand};
use queueset::{Kind, Level, Seats};
use rules::{FlowSchemaSpec, PriorityLevelSpec};

pub const GROUP: &str = "flowcontrol.apiserver.k8s.io";
pub const FLOW_SCHEMA_UID: &str = "x-kubernetes-pf-flowschema-uid";
pub const PRIORITY_LEVEL_UID: &str = "x-kubernetes-pf-prioritylevel-uid";

/// Objects a LIST seat stands for, and the most seats one request takes (upstream's
/// work estimator).
const OBJECTS_PER_SEAT: usize = 100;
const MAX_SEATS: u32 = 10;

pub fn flow_schemas() -> &'static ResourceType {
    lookup(GROUP, "v1", "flowschemas").expect("FlowSchemas are built in")
}

pub fn priority_levels() -> &'static ResourceType {
    lookup(GROUP, "v1", "prioritylevelconfigurations").expect("priority levels are built in")
}

/// The filter's state: the configuration in use, and its metrics.
pub struct FlowControl {
    /// The watch caches of the FlowSchemas and the priority levels.
    caches: [Arc<ResourceCache>; 2],
    /// The seats all limited levels share.
    server_limit: u32,
    config: RwLock<Arc<Config>>,
    /// Serializes rebuilds so a burst of requests after a change builds the configuration once.
    rebuild: Mutex<()>,
    metrics: FlowMetrics,
    /// Requests executing now: read-only, mutating (`apiserver_current_inflight_requests`).
    executing: Arc<[AtomicUsize; 2]>,
}

impl std::fmt::Debug for FlowControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlowControl")
            .field("server_limit", &self.server_limit)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Config {
    generation: i64,
    /// In matching order.
    schemas: Vec<Schema>,
    levels: HashMap<String, PriorityLevel>,
}

struct Schema {
    name: String,
    uid: String,
    spec: FlowSchemaSpec,
    /// Its classification and metric handles, resolved at its first request (not per request:
    /// a labelled series costs allocations and a lookup under a lock).
    resolved: OnceLock<Resolved>,
}

/// A FlowSchema's classification, and the metric series of its requests.
struct Resolved {
    class: Arc<Classification>,
    dispatched: Counter,
    in_queue: Gauge,
    executing: Gauge,
    executing_seats: Gauge,
    /// `request_wait_duration_seconds` of requests that executed.
    waited: Histogram,
    cancelled: Counter,
}

#[derive(Clone)]
struct PriorityLevel {
    uid: String,
    shares: u32,
    bounds: Bounds,
    /// The most seats one of its requests takes.
    max_seats: u32,
    level: Arc<Level>,
}

/// A level's limit as a rebalance set it, and what it was judged by.
struct Adjustment {
    demand: Demand,
    target: f64,
    limit: u32,
}

/// Where a request was classified: its FlowSchema and priority level.
#[derive(Debug, Clone, Default)]
pub struct Classification {
    pub flow_schema: String,
    pub priority_level: String,
    flow_schema_uid: String,
    priority_level_uid: String,
}

impl Classification {
    fn wait_labels(&self, execute: bool) -> WaitLabels {
        WaitLabels {
            priority_level: self.priority_level.clone(),
            flow_schema: self.flow_schema.clone(),
            execute: execute.to_string(),
        }
    }

    fn reject_labels(&self, reason: &str) -> RejectLabels {
        RejectLabels {
            priority_level: self.priority_level.clone(),
            flow_schema: self.flow_schema.clone(),
            reason: reason.to_string(),
        }
    }

    /// Adds upstream's `X-Kubernetes-PF-*` headers to `resp`.
    pub fn label<B>(&self, resp: &mut http::Response<B>) {
        for (name, uid) in [
            (FLOW_SCHEMA_UID, &self.flow_schema_uid),
            (PRIORITY_LEVEL_UID, &self.priority_level_uid),
        ] {
            if let Ok(v) = http::HeaderValue::from_str(uid) {
                resp.headers_mut().insert(name, v);
            }
        }
    }
}

/// A request in its queue: counted in the in-queue gauge until it is admitted or refused, and
/// as `cancelled` if it is dropped first (its client went away, or its deadline passed).
struct Queued<'a> {
    resolved: &'a Resolved,
    waiting: bool,
}

impl Queued<'_> {
    fn new(resolved: &Resolved, queued: bool) -> Queued<'_> {
        if queued {
            resolved.in_queue.inc();
        }
        Queued {
            resolved,
            waiting: queued,
        }
    }

    fn answered(mut self) {
        if self.waiting {
            self.resolved.in_queue.dec();
        }
        self.waiting = false;
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if self.waiting {
            self.resolved.in_queue.dec();
            self.resolved.cancelled.inc();
        }
    }
}

/// A request's seats while it runs, and its share of the executing gauges.
pub struct Ticket {
    _seats: Seats,
    executing: Gauge,
    executing_seats: Gauge,
    seats: u32,
    kind: Arc<[AtomicUsize; 2]>,
    mutating: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.executing.dec();
        self.executing_seats.dec_by(i64::from(self.seats));
        self.kind[usize::from(self.mutating)].fetch_sub(1, Ordering::Relaxed);
    }
}

impl FlowControl {
    /// The filter over the watch cache's FlowSchemas and priority levels, sharing
    /// `server_limit` seats; its metrics go to `metrics`.
    pub fn new(
        cache: Arc<Cacher>,
        server_limit: u32,
        metrics: &crate::metrics::Metrics,
    ) -> Arc<Self> {
        Arc::new(Self {
            caches: [flow_schemas(), priority_levels()].map(|rt| cache.resource(rt)),
            server_limit: server_limit.max(1),
            config: RwLock::new(Arc::new(Config {
                generation: -1,
                ..Default::default()
            })),
            rebuild: Mutex::new(()),
            metrics: FlowMetrics::register(metrics),
            executing: Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]),
        })
    }

    /// Requests executing now: (read-only, mutating).
    pub fn in_flight(&self) -> (usize, usize) {
        (
            self.executing[0].load(Ordering::Relaxed),
            self.executing[1].load(Ordering::Relaxed),
        )
    }

    fn config(&self) -> Arc<Config> {
        let generation = self
            .caches
            .iter()
            .map(|c| c.last_change())
            .max()
            .unwrap_or(0);
        let current = self.config.read().clone();
        if current.generation == generation {
            return current;
        }
        let _one = self.rebuild.lock();
        let current = self.config.read().clone();
        if current.generation == generation {
            return current;
        }
        let objects = |cache: &ResourceCache| -> Vec<Value> {
            let snapshot = cache.list("");
            snapshot
                .objects
                .iter()
                .filter_map(|c| c.object().ok())
                .collect()
        };
        let fresh = Arc::new(Config::build(
            generation,
            &objects(&self.caches[1]),
            &objects(&self.caches[0]),
            &current,
            self.server_limit,
        ));
        self.metrics.limits(&fresh);
        self.metrics.rebalanced(&fresh.rebalance());
        *self.config.write() = fresh.clone();
        fresh
    }

    /// Shares the seats among the levels again by their demand since the last time.
    pub fn rebalance(&self) {
        let config = self.config();
        let _one = self.rebuild.lock();
        self.metrics.rebalanced(&config.rebalance());
    }

    /// Rebalances every [`borrowing::PERIOD`] until the filter is dropped.
    pub fn spawn_borrowing(this: Weak<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut every = tokio::time::interval(borrowing::PERIOD);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every.tick().await;
            loop {
                every.tick().await;
                let Some(this) = this.upgrade() else {
                    return;
                };
                this.rebalance();
            }
        })
    }

    /// Classifies the request and waits for its seats (`seats` of them, at most its level's
    /// most, for at most `wait_limit`): the ticket to hold while it runs, or the 429 to
    /// answer.
    pub async fn admit(
        &self,
        info: &RequestInfo,
        user: &UserInfo,
        seats: u32,
        wait_limit: Duration,
    ) -> (Arc<Classification>, Result<Ticket, ApiError>) {
        let config = self.config();
        let schema = config.classify(info, user);
        let level_name = &schema.spec.priority_level_configuration.name;
        let level = &config.levels[level_name];
        let seats = seats.min(level.max_seats);
        let resolved = schema
            .resolved
            .get_or_init(|| self.metrics.resolve(schema, &level.uid));
        let mut hasher = std::hash::DefaultHasher::new();
        (&schema.name, schema.spec.distinguisher(info, user)).hash(&mut hasher);
        let flow = hasher.finish();
        let queued = Queued::new(resolved, matches!(level.level.kind, Kind::Queue(_)));
        let waited = Instant::now();
        let admitted = level.level.admit(flow, seats, wait_limit).await;
        queued.answered();
        let waited = waited.elapsed();
        crate::timing::exclude(waited);
        let waited = waited.as_secs_f64();
        let result = match admitted {
            Ok(held) => {
                resolved.waited.observe(waited);
                resolved.dispatched.inc();
                resolved.executing.inc();
                resolved.executing_seats.inc_by(i64::from(seats));
                let mutating = !matches!(info.verb.as_str(), "get" | "list" | "watch");
                self.executing[usize::from(mutating)].fetch_add(1, Ordering::Relaxed);
                Ok(Ticket {
                    _seats: held,
                    executing: resolved.executing.clone(),
                    executing_seats: resolved.executing_seats.clone(),
                    seats,
                    kind: self.executing.clone(),
                    mutating,
                })
            }
            Err(why) => {
                self.metrics.refused(&resolved.class, why.reason(), waited);
                Err(too_many_requests(level.level.retry_after()))
            }
        };
        (resolved.class.clone(), result)
    }
}

/// Seats a request takes (upstream's work estimator): one, or for a LIST (and a WATCH's
/// initial listing) one per hundred objects it reads, at most ten. `stored` counts the
/// objects of the request's resource.
pub fn seats(
    info: &RequestInfo,
    query: &HashMap<String, String>,
    stored: impl FnOnce() -> usize,
) -> u32 {
    if !info.is_resource_request || !matches!(info.verb.as_str(), "list" | "watch") {
        return 1;
    }
    let stored = stored();
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0 && *l < stored)
        .unwrap_or(stored);
    let from_cache = info.verb == "watch"
        || (query
            .get("resourceVersion")
            .is_some_and(|rv| !rv.is_empty())
            && !query.contains_key("continue"));
    let read = if from_cache {
        stored
    } else if !info.label_selector.is_empty() || !info.field_selector.is_empty() {
        stored + limit
    } else {
        2 * limit
    };
    u32::try_from(read.div_ceil(OBJECTS_PER_SEAT))
        .unwrap_or(MAX_SEATS)
        .clamp(1, MAX_SEATS)
}

/// Upstream's 429 for a request APF refused.
fn too_many_requests(retry_after: u64) -> ApiError {
    let mut e = crate::overload::too_many_requests();
    e.details = Some(serde_json::json!({"retryAfterSeconds": retry_after}));
    e
}

impl Config {
    /// The FlowSchema of a request: the first that matches it, else `catch-all` (which
    /// matches every user in `system:authenticated` or `system:unauthenticated`, that is
    /// everyone, unless an authenticator left both groups out).
    fn classify(&self, info: &RequestInfo, user: &UserInfo) -> &Schema {
        self.schemas
            .iter()
            .find(|s| s.spec.matches(info, user))
            .or_else(|| self.schemas.iter().find(|s| s.name == "catch-all"))
            .expect("the mandatory catch-all FlowSchema is always in the configuration")
    }

    /// The configuration of the stored `levels` and `schemas` at `generation`, keeping the
    /// queues of levels whose queuing did not change from `previous` (their waiting requests
    /// stay).
    fn build(
        generation: i64,
        levels: &[Value],
        schemas: &[Value],
        previous: &Config,
        server_limit: u32,
    ) -> Self {
        let mandatory = &crate::bootstrap::apf::configuration().mandatory;
        let named = |o: &Value, kind: &str| {
            o["kind"] == kind
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| !n.is_empty())
        };
        let mut specs: Vec<(String, String, PriorityLevelSpec)> = Vec::new();
        for object in levels.iter().chain(
            mandatory
                .iter()
                .filter(|o| named(o, "PriorityLevelConfiguration")),
        ) {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            if name.is_empty() || specs.iter().any(|(n, _, _)| n == name) {
                continue;
            }
            let Ok(spec) = serde_json::from_value::<PriorityLevelSpec>(object["spec"].clone())
            else {
                tracing::warn!(
                    level = name,
                    "a priority level that cannot be read is ignored"
                );
                continue;
            };
            let uid = object["metadata"]["uid"].as_str().unwrap_or_default();
            specs.push((name.to_string(), uid.to_string(), spec));
        }
        let total: u64 = specs.iter().map(|(_, _, s)| u64::from(s.shares())).sum();
        let mut config = Config {
            generation,
            ..Default::default()
        };
        for (name, uid, spec) in specs {
            let kind = if spec.is_exempt() {
                Kind::Exempt
            } else {
                spec.queuing().map_or(Kind::Reject, Kind::Queue)
            };
            let shares = spec.shares();
            // each level's nominal limit, rounded up, as upstream
            let nominal = (u64::from(server_limit) * u64::from(shares)).div_ceil(total.max(1));
            let nominal = u32::try_from(nominal).unwrap_or(u32::MAX);
            let (lendable, borrowing) = spec.lending();
            let bounds = Bounds::new(nominal, lendable, borrowing, server_limit);
            // upstream's: 15% of the nominal seats, at most a hand's share of them
            let max_seats = match kind {
                Kind::Queue(q) => nominal
                    .saturating_mul(15)
                    .div_ceil(100)
                    .min(nominal / q.hand_size.max(1))
                    .clamp(1, MAX_SEATS),
                _ => MAX_SEATS,
            };
            // a level kept keeps its current limit until the next rebalance
            let level = match previous.levels.get(&name) {
                Some(old) if old.level.kind == kind => old.level.clone(),
                _ => Level::new(kind, bounds.initial()),
            };
            config.levels.insert(
                name,
                PriorityLevel {
                    uid,
                    shares,
                    bounds,
                    max_seats,
                    level,
                },
            );
        }
        let mut found: Vec<Schema> = Vec::new();
        for object in schemas
            .iter()
            .chain(mandatory.iter().filter(|o| named(o, "FlowSchema")))
        {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            if name.is_empty() || found.iter().any(|s| s.name == name) {
                continue;
            }
            let Ok(spec) = serde_json::from_value::<FlowSchemaSpec>(object["spec"].clone()) else {
                tracing::warn!(
                    flow_schema = name,
                    "a FlowSchema that cannot be read is ignored"
                );
                continue;
            };
            // a dangling FlowSchema classifies nothing
            if !config
                .levels
                .contains_key(&spec.priority_level_configuration.name)
            {
                continue;
            }
            found.push(Schema {
                name: name.to_string(),
                uid: object["metadata"]["uid"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                spec,
                resolved: OnceLock::new(),
            });
        }
        found.sort_by(|a, b| {
            (a.spec.matching_precedence, &a.name).cmp(&(b.spec.matching_precedence, &b.name))
        });
        config.schemas = found;
        config
    }

    /// Sets each level's limit from its seat demand since the last rebalance: the nominal
    /// limits' sum shared out by [`borrowing::allocate`]. Returns the levels' adjustments and
    /// the common proportion of their targets they got.
    fn rebalance(&self) -> (Vec<(&str, Adjustment)>, f64) {
        let levels: Vec<(&str, &PriorityLevel, Demand)> = self
            .levels
            .iter()
            .map(|(name, l)| (name.as_str(), l, l.level.sample_demand()))
            .collect();
        let claims: Vec<borrowing::Claim> =
            levels.iter().map(|(_, l, d)| l.bounds.claim(d)).collect();
        let total: u64 = levels
            .iter()
            .map(|(_, l, _)| u64::from(l.bounds.nominal))
            .sum();
        let (allocations, fair) = borrowing::allocate(total as f64, &claims);
        let adjustments = levels
            .into_iter()
            .zip(claims.iter().zip(allocations))
            .map(|((name, l, demand), (claim, allocation))| {
                let limit = allocation.round() as u32;
                l.level.set_limit(limit);
                let target = claim.target;
                (
                    name,
                    Adjustment {
                        demand,
                        target,
                        limit,
                    },
                )
            })
            .collect();
        (adjustments, fair)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabels {
    flow_schema: String,
    priority_level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectLabels {
    flow_schema: String,
    priority_level: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabels {
    execute: String,
    flow_schema: String,
    priority_level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabels {
    priority_level: String,
}

/// Upstream's `apiserver_flowcontrol_*` metrics.
struct FlowMetrics {
    dispatched: Family<FlowLabels, Counter>,
    rejected: Family<RejectLabels, Counter>,
    in_queue: Family<FlowLabels, Gauge>,
    executing: Family<FlowLabels, Gauge>,
    executing_seats: Family<FlowLabels, Gauge>,
    wait: Family<WaitLabels, Histogram>,
    nominal_limit: Family<LevelLabels, Gauge>,
    lower_limit: Family<LevelLabels, Gauge>,
    upper_limit: Family<LevelLabels, Gauge>,
    current_limit: Family<LevelLabels, Gauge>,
    concurrency_limit: Family<LevelLabels, Gauge>,
    shares: Family<LevelLabels, Gauge>,
    demand_high_watermark: Family<LevelLabels, FloatGauge>,
    demand_average: Family<LevelLabels, FloatGauge>,
    demand_stdev: Family<LevelLabels, FloatGauge>,
    demand_smoothed: Family<LevelLabels, FloatGauge>,
    target: Family<LevelLabels, FloatGauge>,
    fair_frac: FloatGauge,
}

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// Upstream's queue wait buckets (seconds).
const WAIT_BUCKETS: [f64; 10] = [0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0];

impl FlowMetrics {
    fn register(metrics: &crate::metrics::Metrics) -> Self {
        let m = FlowMetrics {
            dispatched: Family::default(),
            rejected: Family::default(),
            in_queue: Family::default(),
            executing: Family::default(),
            executing_seats: Family::default(),
            wait: Family::new_with_constructor(
                (|| Histogram::new(WAIT_BUCKETS)) as fn() -> Histogram,
            ),
            nominal_limit: Family::default(),
            lower_limit: Family::default(),
            upper_limit: Family::default(),
            current_limit: Family::default(),
            concurrency_limit: Family::default(),
            shares: Family::default(),
            demand_high_watermark: Family::default(),
            demand_average: Family::default(),
            demand_stdev: Family::default(),
            demand_smoothed: Family::default(),
            target: Family::default(),
            fair_frac: FloatGauge::default(),
        };
        let name = |n: &str| format!("apiserver_flowcontrol_{n}");
        metrics.register(
            &name("dispatched_requests"),
            "Number of requests executed by API Priority and Fairness subsystem",
            m.dispatched.clone(),
        );
        metrics.register(
            &name("rejected_requests"),
            "Number of requests rejected by API Priority and Fairness subsystem",
            m.rejected.clone(),
        );
        metrics.register(
            &name("current_inqueue_requests"),
            "Number of requests currently pending in queues of the API Priority and Fairness subsystem",
            m.in_queue.clone(),
        );
        metrics.register(
            &name("current_executing_requests"),
            "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem",
            m.executing.clone(),
        );
        metrics.register(
            &name("current_executing_seats"),
            "Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any stage otherwise) requests in the API Priority and Fairness subsystem",
            m.executing_seats.clone(),
        );
        metrics.register(
            &name("request_wait_duration_seconds"),
            "Length of time a request spent waiting in its queue",
            m.wait.clone(),
        );
        metrics.register(
            &name("nominal_limit_seats"),
            "Nominal number of execution seats configured for each priority level",
            m.nominal_limit.clone(),
        );
        metrics.register(
            &name("lower_limit_seats"),
            "Configured lower bound on number of execution seats available to each priority level",
            m.lower_limit.clone(),
        );
        metrics.register(
            &name("upper_limit_seats"),
            "Configured upper bound on number of execution seats available to each priority level",
            m.upper_limit.clone(),
        );
        metrics.register(
            &name("current_limit_seats"),
            "current derived number of execution seats available to each priority level",
            m.current_limit.clone(),
        );
        metrics.register(
            &name("request_concurrency_limit"),
            "Nominal number of execution seats configured for each priority level",
            m.concurrency_limit.clone(),
        );
        metrics.register(
            &name("priority_level_seat_shares"),
            "The nominal concurrency shares configured for each priority level",
            m.shares.clone(),
        );
        for (metric, help, family) in [
            (
                "demand_seats_high_watermark",
                "High watermark, over last adjustment period, of demand_seats",
                &m.demand_high_watermark,
            ),
            (
                "demand_seats_average",
                "Time-weighted average, over last adjustment period, of demand_seats",
                &m.demand_average,
            ),
            (
                "demand_seats_stdev",
                "Time-weighted standard deviation, over last adjustment period, of demand_seats",
                &m.demand_stdev,
            ),
            (
                "demand_seats_smoothed",
                "Smoothed seat demands",
                &m.demand_smoothed,
            ),
            ("target_seats", "Seat allocation targets", &m.target),
        ] {
            metrics.register(&name(metric), help, family.clone());
        }
        metrics.register(
            &name("seat_fair_frac"),
            "Fair fraction of server's concurrency to allocate to each priority level that can use it",
            m.fair_frac.clone(),
        );
        m
    }

    /// The classification and metric series of `schema`'s requests (its level's uid
    /// `level_uid`).
    fn resolve(&self, schema: &Schema, level_uid: &str) -> Resolved {
        let class = Classification {
            flow_schema: schema.name.clone(),
            priority_level: schema.spec.priority_level_configuration.name.clone(),
            flow_schema_uid: schema.uid.clone(),
            priority_level_uid: level_uid.to_string(),
        };
        let labels = FlowLabels {
            priority_level: class.priority_level.clone(),
            flow_schema: class.flow_schema.clone(),
        };
        Resolved {
            dispatched: self.dispatched.get_or_create(&labels).clone(),
            in_queue: self.in_queue.get_or_create(&labels).clone(),
            executing: self.executing.get_or_create(&labels).clone(),
            executing_seats: self.executing_seats.get_or_create(&labels).clone(),
            waited: self.wait.get_or_create(&class.wait_labels(true)).clone(),
            cancelled: self
                .rejected
                .get_or_create(&class.reject_labels("cancelled"))
                .clone(),
            class: Arc::new(class),
        }
    }

    /// A request of `class` refused for `reason` after waiting `waited` seconds.
    fn refused(&self, class: &Classification, reason: &str, waited: f64) {
        self.wait
            .get_or_create(&class.wait_labels(false))
            .observe(waited);
        self.rejected
            .get_or_create(&class.reject_labels(reason))
            .inc();
    }

    /// The levels' configured limits, set when a configuration is built.
    fn limits(&self, config: &Config) {
        for (name, level) in &config.levels {
            let labels = LevelLabels {
                priority_level: name.clone(),
            };
            let bounds = level.bounds;
            for (family, value) in [
                (&self.nominal_limit, bounds.nominal),
                (&self.concurrency_limit, bounds.nominal),
                (&self.lower_limit, bounds.lower),
                (&self.upper_limit, bounds.upper),
                (&self.shares, level.shares),
            ] {
                family.get_or_create(&labels).set(i64::from(value));
            }
        }
    }

    /// The levels' current limits and the demand they were set by.
    fn rebalanced(&self, (adjustments, fair): &(Vec<(&str, Adjustment)>, f64)) {
        for (name, a) in adjustments {
            let labels = LevelLabels {
                priority_level: name.to_string(),
            };
            self.current_limit
                .get_or_create(&labels)
                .set(i64::from(a.limit));
            for (family, value) in [
                (&self.demand_high_watermark, a.demand.high_watermark),
                (&self.demand_average, a.demand.average),
                (&self.demand_stdev, a.demand.deviation),
                (&self.demand_smoothed, a.demand.smoothed),
                (&self.target, a.target),
            ] {
                family.get_or_create(&labels).set(value);
            }
        }
        self.fair_frac.set(*fair);
    }
}

#[cfg(test)]
mod tests;
