//! What an engine tells the outside as runs go: run events, for `GET
//! /v1/events`, and [`Metrics`], for `GET /metrics`.
//!
//! Events are told after what they report is durable: a run's record, a
//! step's record, a wait, a wake, an end. Each has an id; ids rise within a
//! host's life and across its restarts (the first id of a start is the
//! clock's milliseconds times 1,000). The last [`KEPT`] events are kept in
//! memory, so that a client that lost its connection resumes after the id
//! it saw last. Events are per host: on a shared PostgreSQL store, a
//! client hears the runs the host it asks drives.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;
use weft_core::clock::Timestamp;
use weft_core::lock;
use weft_core::metrics::{EndLabels, Metrics, WorkflowLabels};
use weft_store::{RunRecord, RunState, StepRecord};

/// Events kept for clients that resume.
pub const KEPT: usize = 10_000;

/// Events a slow subscriber may fall behind by before it catches up from
/// the kept ones.
const BEHIND: usize = 1024;

/// What happened to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunEventKind {
    /// Its record is durable; its first step is about to start.
    Started,
    /// A step attempt's record is durable.
    StepFinished,
    /// It waits: for a timer, a retry's delay, or an answer to an `await`.
    Waiting,
    /// It was read back into memory and goes on (a timer fired, an answer
    /// came, a host picked it up).
    Resumed,
    /// It ended; its state says how.
    Ended,
}

impl RunEventKind {
    /// The name a client sees (`event:` of an SSE message).
    pub fn name(self) -> &'static str {
        match self {
            Self::Started => "started",
            Self::StepFinished => "step_finished",
            Self::Waiting => "waiting",
            Self::Resumed => "resumed",
            Self::Ended => "ended",
        }
    }
}

/// A step's part of an event.
#[derive(Debug, Clone, PartialEq)]
pub struct StepEvent {
    /// The leaf's path (`charge`, `each[2]/approve`).
    pub path: String,
    /// The step's id.
    pub step_id: String,
    /// Which attempt.
    pub attempt: u32,
    /// How long the attempt took.
    pub duration_us: u64,
    /// Its error's code, if it failed.
    pub error: Option<String>,
    /// It waits for an outside answer.
    pub awaiting: bool,
    /// It is the attempt's result (an output, an error, a skip), not the
    /// start of a wait.
    pub result: bool,
}

/// One thing that happened to a run.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEvent {
    /// Rises with every event.
    pub id: u64,
    /// What happened.
    pub kind: RunEventKind,
    /// The run's id.
    pub run: String,
    /// Its workflow, as stored (`tenant:id` outside tenant `default`).
    pub workflow: String,
    /// The run's state after it.
    pub state: RunState,
    /// When, by the engine's clock.
    pub at: Timestamp,
    /// The step, for `step_finished` and `waiting`.
    pub step: Option<StepEvent>,
}

impl RunEvent {
    /// The run's tenant.
    pub fn tenant(&self) -> &str {
        weft_core::tenant::of(&self.workflow)
    }
}

struct Kept {
    events: VecDeque<Arc<RunEvent>>,
    /// The id of this start's first event.
    first: u64,
    next: u64,
}

/// The events an engine told, and a channel to hear the next ones.
pub struct RunEvents {
    kept: Mutex<Kept>,
    sender: broadcast::Sender<Arc<RunEvent>>,
}

impl std::fmt::Debug for RunEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunEvents")
            .field("next", &lock(&self.kept).next)
            .finish_non_exhaustive()
    }
}

/// A subscription: what was missed, then what comes.
#[derive(Debug)]
pub struct Subscription {
    /// The events after the one asked for, oldest first.
    pub backlog: Vec<Arc<RunEvent>>,
    /// Events between the one asked for and the backlog were lost (they
    /// are older than the kept ones, or of another start of the host): the
    /// client should read the state again.
    pub gap: bool,
    /// The events after the backlog.
    pub receiver: broadcast::Receiver<Arc<RunEvent>>,
    /// The id of the receiver's first event.
    pub next: u64,
}

impl RunEvents {
    /// Events numbered from `first`.
    pub(crate) fn new(first: u64) -> Self {
        Self {
            kept: Mutex::new(Kept {
                events: VecDeque::with_capacity(KEPT.min(1024)),
                first: first.max(1),
                next: first.max(1),
            }),
            sender: broadcast::channel(BEHIND).0,
        }
    }

    /// Tells an event.
    fn tell(&self, kind: RunEventKind, run: &RunRecord, at: Timestamp, step: Option<StepEvent>) {
        let mut kept = lock(&self.kept);
        let event = Arc::new(RunEvent {
            id: kept.next,
            kind,
            run: run.id.clone(),
            workflow: run.workflow.clone(),
            state: run.state,
            at,
            step,
        });
        kept.next += 1;
        if kept.events.len() == KEPT {
            kept.events.pop_front();
        }
        kept.events.push_back(Arc::clone(&event));
        // Sent under the lock, so a subscriber sees each event once: in
        // its backlog or from its receiver. No receiver is no error.
        let _ = self.sender.send(event);
    }

    /// Subscribes to the events after `after` (all new ones without it;
    /// every kept one after `0`).
    pub fn subscribe(&self, after: Option<u64>) -> Subscription {
        let kept = lock(&self.kept);
        let receiver = self.sender.subscribe();
        let Some(after) = after else {
            return Subscription {
                backlog: Vec::new(),
                gap: false,
                receiver,
                next: kept.next,
            };
        };
        let oldest = kept.events.front().map_or(kept.next, |e| e.id);
        // `0` asks for every kept event: a gap only if some were dropped.
        let every = after == 0;
        let after = if every { kept.first - 1 } else { after };
        // The id must be one this host told, or the one before its first
        // kept: anything else lost events in between.
        let gap = after.saturating_add(1) < oldest || after >= kept.next;
        let backlog = if every {
            kept.events.iter().cloned().collect()
        } else if gap {
            Vec::new()
        } else {
            kept.events
                .iter()
                .skip((after + 1 - oldest) as usize)
                .cloned()
                .collect()
        };
        Subscription {
            backlog,
            gap,
            receiver,
            next: kept.next,
        }
    }

    /// The id the next event will have.
    pub fn next_id(&self) -> u64 {
        lock(&self.kept).next
    }
}

/// An engine's events and metrics.
#[derive(Debug)]
pub(crate) struct Telemetry {
    pub(crate) events: RunEvents,
    pub(crate) metrics: Option<Arc<Metrics>>,
    /// The endings told last, so that each is told once.
    told: Mutex<Endings>,
}

/// Endings told, as `(run id, its record count)`, the newest [`TOLD`].
///
/// Two paths of one host may find the same ending: a cancellation this
/// host committed in the store tells it, and a cell that read the run
/// before that commit finds it ended at its own next commit (after the
/// step call under way, at most its timeout) and tells what the store
/// holds. If more than [`TOLD`] runs end on the host in between, the
/// second is told too.
#[derive(Debug, Default)]
struct Endings {
    seen: std::collections::HashSet<(String, u32)>,
    order: VecDeque<(String, u32)>,
}

/// Endings remembered for [`Endings`].
const TOLD: usize = 4096;

impl Endings {
    /// Notes the ending of `run`: false if it was told already.
    fn first(&mut self, run: &RunRecord) -> bool {
        let ending = (run.id.clone(), run.step_records);
        if !self.seen.insert(ending.clone()) {
            return false;
        }
        self.order.push_back(ending);
        if self.order.len() > TOLD
            && let Some(oldest) = self.order.pop_front()
        {
            self.seen.remove(&oldest);
        }
        true
    }
}

impl Telemetry {
    pub(crate) fn new(first: u64, metrics: Option<Arc<Metrics>>) -> Self {
        Self {
            events: RunEvents::new(first),
            metrics,
            told: Mutex::default(),
        }
    }

    /// A run's record is durable.
    pub(crate) fn started(&self, run: &RunRecord, at: Timestamp) {
        if let Some(metrics) = &self.metrics {
            metrics
                .runs_started
                .get_or_create(&workflow_labels(run))
                .inc();
        }
        self.events.tell(RunEventKind::Started, run, at, None);
    }

    /// A step's record is durable; the run waits after it if `waiting`.
    /// (Its plugin's metrics are counted by the runner, which knows them.)
    pub(crate) fn step(&self, run: &RunRecord, record: &StepRecord, waiting: bool) {
        let at = record.started_at + Duration::from_micros(record.duration_us);
        let step = StepEvent {
            path: record.path.clone(),
            step_id: record.step_id.clone(),
            attempt: record.attempt,
            duration_us: record.duration_us,
            error: record.error.as_ref().map(|e| e.code.clone()),
            awaiting: record.awaiting,
            result: record.output.is_some() || record.error.is_some() || record.skipped,
        };
        // A record that starts a wait (a `sleep`, an `await`) is told as
        // the wait alone: nothing finished. An attempt's result after which
        // the run waits (a retry's delay) is told as both, in that order.
        if step.result || !waiting {
            self.events
                .tell(RunEventKind::StepFinished, run, at, Some(step.clone()));
        }
        if waiting {
            self.events.tell(RunEventKind::Waiting, run, at, Some(step));
        }
    }

    /// A run goes on after it waited, or after its host was gone.
    pub(crate) fn resumed(&self, run: &RunRecord, at: Timestamp) {
        self.events.tell(RunEventKind::Resumed, run, at, None);
    }

    /// A run ended: told once per ending, whichever path finds it first.
    pub(crate) fn ended(&self, run: &RunRecord, at: Timestamp) {
        if !lock(&self.told).first(run) {
            return;
        }
        if let Some(metrics) = &self.metrics {
            let (tenant, workflow) = weft_core::tenant::split(&run.workflow);
            metrics
                .runs_ended
                .get_or_create(&EndLabels {
                    tenant: tenant.to_owned(),
                    workflow: workflow.to_owned(),
                    state: run.state.to_string(),
                })
                .inc();
        }
        self.events.tell(RunEventKind::Ended, run, at, None);
    }

    /// A timer fired `lag` after its due time.
    pub(crate) fn fired(&self, lag: Duration) {
        if let Some(metrics) = &self.metrics {
            metrics.timer_fire_lag_seconds.observe(lag.as_secs_f64());
        }
    }
}

fn workflow_labels(run: &RunRecord) -> WorkflowLabels {
    let (tenant, workflow) = weft_core::tenant::split(&run.workflow);
    WorkflowLabels {
        tenant: tenant.to_owned(),
        workflow: workflow.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn run() -> RunRecord {
        serde_json::from_value(serde_json::json!({
            "id": "r1", "workflow": "acme:orders", "workflow_version": 1,
            "origin": "api", "state": "running", "input": null, "next_step": 0,
            "step_records": 0, "step_count": 1, "plugins": {}, "definition": "d",
            "created_at": 0, "updated_at": 0
        }))
        .unwrap()
    }

    #[test]
    fn a_subscriber_resumes_after_the_last_id_it_saw() {
        let events = RunEvents::new(100);
        let run = run();
        for _ in 0..5 {
            events.tell(RunEventKind::Started, &run, Timestamp(0), None);
        }
        let sub = events.subscribe(Some(102));
        assert!(!sub.gap);
        let ids: Vec<u64> = sub.backlog.iter().map(|e| e.id).collect();
        assert_eq!(ids, [103, 104]);
        // The id before the first is no gap; older ones, or ones not told
        // yet (another start's), are.
        assert!(!events.subscribe(Some(99)).gap);
        assert_eq!(events.subscribe(Some(99)).backlog.len(), 5);
        assert!(events.subscribe(Some(98)).gap);
        assert!(events.subscribe(Some(105)).gap);
        assert!(events.subscribe(Some(u64::MAX)).gap);
        assert!(!events.subscribe(Some(104)).gap);
        // `0`: everything kept.
        let all = events.subscribe(Some(0));
        assert!(!all.gap);
        assert_eq!(all.backlog.len(), 5);
        assert_eq!(events.subscribe(Some(100)).backlog[0].tenant(), "acme");
    }

    #[test]
    fn only_the_newest_events_are_kept() {
        let events = RunEvents::new(1);
        let run = run();
        let mut sub = events.subscribe(None);
        for _ in 0..KEPT + 10 {
            events.tell(RunEventKind::Ended, &run, Timestamp(0), None);
        }
        assert!(events.subscribe(Some(5)).gap);
        assert_eq!(events.subscribe(Some(10)).backlog.len(), KEPT);
        let all = events.subscribe(Some(0));
        assert!(all.gap);
        assert_eq!(all.backlog.len(), KEPT);
        // A receiver that fell behind hears that it lagged, and catches up
        // from what is kept.
        assert!(matches!(
            sub.receiver.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(_))
        ));
    }
}
