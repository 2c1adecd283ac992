//! What a host counts and times, for `GET /metrics`: one [`Metrics`] per
//! engine, shared by its scheduler, its group commit and its delivery
//! side, and encoded in the Prometheus text format by `prometheus-client`.
//!
//! Labels are bounded: a tenant, a workflow, a plugin, a run's end state,
//! never a run's or step's id. A host without metrics holds none
//! (`Option<Arc<Metrics>>` is `None`), and counting costs nothing.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// A workflow of a tenant.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkflowLabels {
    /// The tenant.
    pub tenant: String,
    /// The workflow's id within it.
    pub workflow: String,
}

/// A run's end, by workflow.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndLabels {
    /// The tenant.
    pub tenant: String,
    /// The workflow's id within it.
    pub workflow: String,
    /// How it ended: `succeeded`, `failed`, `cancelled`, `timed_out`.
    pub state: String,
}

/// A plugin of a tenant.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    /// The tenant.
    pub tenant: String,
    /// The plugin's name.
    pub plugin: String,
}

/// A step attempt's outcome, by plugin.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// The tenant.
    pub tenant: String,
    /// The plugin's name.
    pub plugin: String,
    /// `ok`, or `error`.
    pub outcome: &'static str,
}

/// A tenant alone.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    /// The tenant.
    pub tenant: String,
}

/// Where a plugin's compiled code came from.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LoadLabels {
    /// `cache` (a hit), or `compiled`.
    pub source: &'static str,
}

/// A count of deliveries in one state.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DeliveryLabels {
    /// `pending`, `in_flight`, or `dead`.
    pub state: &'static str,
}

/// I/O failures of a store in this process (`weft_store_failures_total`).
static STORE_FAILURES: std::sync::LazyLock<Counter> = std::sync::LazyLock::new(Counter::default);

/// Counts an I/O failure of the store (a full disk among them).
pub fn count_store_failure() {
    STORE_FAILURES.inc();
}

type Timings<L> = Family<L, Histogram, fn() -> Histogram>;

/// Guest and step times: 10 µs to about 80 s.
fn call_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 2.5, 18))
}

/// Lags and commits: 100 µs to about 50 s.
fn lag_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-4, 2.0, 20))
}

/// Everything a host counts. Cheap to share behind an `Arc`; every field is
/// a handle on atomics.
#[derive(Debug)]
pub struct Metrics {
    /// Runs recorded, by workflow.
    pub runs_started: Family<WorkflowLabels, Counter>,
    /// Runs ended, by workflow and end state.
    pub runs_ended: Family<EndLabels, Counter>,
    /// Plugin step attempts run, by plugin and outcome (an attempt run again
    /// after a key-value conflict counts again).
    pub step_attempts: Family<AttemptLabels, Counter>,
    /// A plugin step attempt's time on the host: its secrets, its
    /// instantiation and its call.
    pub step_seconds: Timings<PluginLabels>,
    /// A guest's instantiation.
    pub guest_instantiate_seconds: Timings<PluginLabels>,
    /// A guest's call, after it was instantiated.
    pub guest_call_seconds: Timings<PluginLabels>,
    /// Writes per committed batch.
    pub commit_batch_writes: Histogram,
    /// A batch's transaction, its sync included.
    pub commit_seconds: Histogram,
    /// Runs waiting for a worker now.
    pub runs_ready: Gauge,
    /// Runs in memory now.
    pub runs_resident: Gauge,
    /// Runs waiting for a place now.
    pub runs_parked: Gauge,
    /// Timers armed on this host now.
    pub timers_pending: Gauge,
    /// How late a timer fired, behind its due time.
    pub timer_fire_lag_seconds: Histogram,
    /// Deliveries by state, read from the store at each scrape.
    pub deliveries: Family<DeliveryLabels, Gauge>,
    /// A webhook delivery's request, by tenant.
    pub webhook_seconds: Timings<TenantLabels>,
    /// Plugins loaded, by where their compiled code came from.
    pub component_loads: Family<LoadLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            runs_started: Family::default(),
            runs_ended: Family::default(),
            step_attempts: Family::default(),
            step_seconds: Family::new_with_constructor(call_buckets),
            guest_instantiate_seconds: Family::new_with_constructor(call_buckets),
            guest_call_seconds: Family::new_with_constructor(call_buckets),
            commit_batch_writes: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            commit_seconds: lag_buckets(),
            runs_ready: Gauge::default(),
            runs_resident: Gauge::default(),
            runs_parked: Gauge::default(),
            timers_pending: Gauge::default(),
            timer_fire_lag_seconds: lag_buckets(),
            deliveries: Family::default(),
            webhook_seconds: Family::new_with_constructor(call_buckets),
            component_loads: Family::default(),
        }
    }
}

impl Metrics {
    /// A registry holding every metric, under the `weft_` prefix.
    pub fn registry(&self) -> Registry {
        let mut registry = Registry::with_prefix("weft");
        registry.register("runs_started", "Runs recorded", self.runs_started.clone());
        registry.register("runs_ended", "Runs ended", self.runs_ended.clone());
        registry.register(
            "step_attempts",
            "Plugin step attempts run",
            self.step_attempts.clone(),
        );
        registry.register_with_unit(
            "step",
            "A plugin step attempt's time on the host: its secrets, instantiation and call",
            Unit::Seconds,
            self.step_seconds.clone(),
        );
        registry.register_with_unit(
            "guest_instantiate",
            "A guest's instantiation (for a call that found a spare instance, the spare's, made ahead of the call)",
            Unit::Seconds,
            self.guest_instantiate_seconds.clone(),
        );
        registry.register_with_unit(
            "guest_call",
            "A guest's call, after its instantiation",
            Unit::Seconds,
            self.guest_call_seconds.clone(),
        );
        registry.register(
            "commit_batch_writes",
            "Writes per committed batch",
            self.commit_batch_writes.clone(),
        );
        registry.register_with_unit(
            "commit",
            "A batch's transaction, its sync included",
            Unit::Seconds,
            self.commit_seconds.clone(),
        );
        registry.register(
            "runs_ready",
            "Runs waiting for a worker",
            self.runs_ready.clone(),
        );
        registry.register(
            "runs_resident",
            "Runs in memory",
            self.runs_resident.clone(),
        );
        registry.register(
            "runs_parked",
            "Runs waiting for a place",
            self.runs_parked.clone(),
        );
        registry.register(
            "timers_pending",
            "Timers armed on this host",
            self.timers_pending.clone(),
        );
        registry.register_with_unit(
            "timer_fire_lag",
            "How late a timer fired, behind its due time",
            Unit::Seconds,
            self.timer_fire_lag_seconds.clone(),
        );
        registry.register("deliveries", "Deliveries by state", self.deliveries.clone());
        registry.register_with_unit(
            "webhook",
            "A webhook delivery's request",
            Unit::Seconds,
            self.webhook_seconds.clone(),
        );
        registry.register(
            "component_loads",
            "Plugins loaded, by where their compiled code came from",
            self.component_loads.clone(),
        );
        registry.register(
            "store_failures",
            "I/O failures of the store (a full disk among them), after each of which it was opened again",
            STORE_FAILURES.clone(),
        );
        registry.register(
            "panics",
            "Panics contained, by thread: each failed one unit of work (a host bug)",
            crate::panics::PANICS.clone(),
        );
        registry
    }

    /// Every metric in the text format (OpenMetrics 1.0, which Prometheus
    /// reads), ending in `# EOF`.
    pub fn encode(&self) -> String {
        let mut text = String::with_capacity(16 << 10);
        // Writing to a `String` cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry());
        text
    }
}

/// The metrics of one plugin of one tenant, looked up once: observing
/// them is a few atomic operations, with no label to hash.
#[derive(Debug, Clone)]
pub struct PluginMeters {
    /// [`Metrics::guest_instantiate_seconds`].
    pub instantiate: Histogram,
    /// [`Metrics::guest_call_seconds`].
    pub call: Histogram,
    /// [`Metrics::step_seconds`].
    pub step: Histogram,
    /// [`Metrics::step_attempts`] that succeeded.
    pub ok: Counter,
    /// [`Metrics::step_attempts`] that failed.
    pub error: Counter,
}

impl Metrics {
    /// The metrics of `tenant`'s plugin `plugin`.
    pub fn plugin(&self, tenant: &str, plugin: &str) -> PluginMeters {
        let labels = PluginLabels {
            tenant: tenant.to_owned(),
            plugin: plugin.to_owned(),
        };
        let attempts = |outcome| {
            self.step_attempts
                .get_or_create(&AttemptLabels {
                    tenant: tenant.to_owned(),
                    plugin: plugin.to_owned(),
                    outcome,
                })
                .clone()
        };
        PluginMeters {
            instantiate: self
                .guest_instantiate_seconds
                .get_or_create(&labels)
                .clone(),
            call: self.guest_call_seconds.get_or_create(&labels).clone(),
            step: self.step_seconds.get_or_create(&labels).clone(),
            ok: attempts("ok"),
            error: attempts("error"),
        }
    }
}
