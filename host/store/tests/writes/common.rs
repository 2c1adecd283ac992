//! What the cases share: the run, keys and times they use; records, built
//! from their JSON as stored, and the writes that carry them; the setups
//! more than one table starts from; the reads that prove a write stored;
//! and the refusals more than one table expects.

use std::sync::Arc;

use serde_json::json;
use weft_core::{Emission, KvEffects, Timestamp};
use weft_store::RunState;
use weft_store::TimerKind::{self, Deadline, Sleep};
use weft_store::{
    DefinitionRecord, DeliveryRecord, OutboxRecord, Refused, RunRecord, Spawn, StepRecord, Store,
    SubscriptionRecord, Target, TimerRef, What, Write,
};

use crate::table::put;

/// 2026-11-30T00:00:00Z.
pub(crate) const T0: Timestamp = Timestamp(1_795_996_800_000);
/// The run most cases write.
pub(crate) const R: &str = "r";
/// The unrelated run each refused write is batched with.
pub(crate) const SIBLING: &str = "sibling";
pub(crate) const SPACE: &str = "sp";

// Records and writes. Records are built from their JSON, as stored.

pub(crate) fn at(secs: u64) -> Timestamp {
    Timestamp(T0.0 + secs * 1_000)
}

pub(crate) fn run(id: &str) -> RunRecord {
    serde_json::from_value(json!({
        "id": id, "workflow": "wf", "workflow_version": 1, "origin": "test", "state": "running",
        "input": {}, "next_step": 0, "step_records": 0, "step_count": 2, "plugins": {},
        "definition": "d0", "created_at": T0, "updated_at": T0,
    }))
    .unwrap()
}

pub(crate) fn with_deadline(id: &str) -> RunRecord {
    let mut run = run(id);
    run.deadline = Some(timer(Deadline));
    run
}

/// The timer of kind `kind` the cases set: a deadline at 1 h, the others
/// at 1 min.
pub(crate) fn timer(kind: TimerKind) -> TimerRef {
    let (id, due) = match kind {
        Deadline => (1, at(3_600)),
        _ => (7, at(60)),
    };
    TimerRef { id, due, kind }
}

pub(crate) fn def(digest: &str, source: &str) -> DefinitionRecord {
    let definition =
        json!({ "digest": digest, "origin": "test", "format": "yaml", "source": source });
    serde_json::from_value(definition).unwrap()
}

pub(crate) fn create(run: &RunRecord) -> Write {
    Write::create_run(run, &def("d0", "id: wf"), Vec::new())
}

/// `write` (a `CreateRun`), started with idempotency key `key`.
pub(crate) fn keyed(mut write: Write, key: &str) -> Write {
    if let Write::CreateRun { idempotency, .. } = &mut write {
        *idempotency = Some(key.to_owned());
    }
    write
}

pub(crate) fn step(id: &str, seq: u32, path: &str) -> StepRecord {
    let mut step = StepRecord::empty(id, seq, (0, path, path), 1, T0);
    step.output = Some(json!({ "seq": seq }));
    step
}

/// What a commit carries besides its record and run.
#[derive(Default)]
pub(crate) struct Extras {
    pub(crate) kv: Option<KvEffects>,
    pub(crate) spawn: Option<Spawn>,
    pub(crate) fired: Option<TimerRef>,
    pub(crate) emitted: Vec<Emission>,
}

/// Run `id`'s next commit: a record at `path` with the next seq, the stored
/// run one record on, and what `edit` makes of them.
pub(crate) fn commit_with(
    s: &dyn Store,
    id: &str,
    path: &str,
    edit: impl FnOnce(&mut StepRecord, &mut RunRecord, &mut Extras),
) -> Write {
    let mut run = s.run(id).unwrap().unwrap();
    let mut record = step(id, run.step_records, path);
    let mut x = Extras::default();
    run.step_records += 1;
    edit(&mut record, &mut run, &mut x);
    Write::commit_step(&record, &run, x.kv, x.spawn, x.fired, x.emitted)
}

pub(crate) fn commit(s: &dyn Store, id: &str, path: &str) -> Write {
    commit_with(s, id, path, |_, _, _| {})
}

/// Run `r`'s next commit sets a timer of kind `kind` at `nap` and leaves
/// the run asleep (waiting for timers only).
pub(crate) fn nap(s: &dyn Store, kind: TimerKind) -> Write {
    commit_with(s, R, "nap", |step, run, _| {
        (step.output, step.timer) = (None, Some(timer(kind)));
        run.suspended = true;
    })
}

pub(crate) fn child() -> RunRecord {
    let mut child = run("c");
    child.workflow = "child".to_owned();
    child
}

pub(crate) fn outbox_row() -> OutboxRecord {
    let effect = json!({ "kind": "start_run", "run": child() });
    serde_json::from_value(json!({ "id": "o1", "created_at": T0, "effect": effect })).unwrap()
}

pub(crate) fn spawn() -> Spawn {
    let component = ("c2".to_owned(), Arc::from(&b"child"[..]));
    Spawn::new(&outbox_row(), &def("d2", "id: child"), vec![component])
}

/// Run `r` as stored, or as it would be made when there is none.
pub(crate) fn current(s: &dyn Store) -> RunRecord {
    s.run(R).unwrap().unwrap_or_else(|| run(R))
}

/// Run `r`'s cancel at `secs`, decided on the run as stored.
pub(crate) fn cancel(s: &dyn Store, secs: u64) -> Write {
    let run = current(s);
    let mut ended = run.clone();
    (ended.state, ended.suspended) = (RunState::Cancelled, false);
    ended.updated_at = at(secs);
    Write::cancel_run(run.step_records, &ended)
}

/// `decide`'s write, decided on the store as it is, after which run `r`
/// moves on by one record: the write is stale when it lands.
pub(crate) fn stale(s: &dyn Store, decide: fn(&dyn Store) -> Write) -> Write {
    let write = decide(s);
    put(s, commit(s, R, "later"));
    write
}

/// Decides `decide` on run `r`, then moves the run to another revision (a
/// migration adds no record): the write as decided before the move.
pub(crate) fn migrated(s: &dyn Store, decide: fn(&dyn Store) -> Write) -> Write {
    let write = decide(s);
    let mut moved = stored_run(s, R);
    moved.definition = "d1".to_owned();
    put(
        s,
        Write::migrate_run(&moved, &def("d1", "id: wf"), Vec::new()),
    );
    write
}

/// Run `r` as stored, in state `state`, awake.
pub(crate) fn update(s: &dyn Store, state: RunState) -> Write {
    let mut run = stored_run(s, R);
    (run.state, run.suspended) = (state, false);
    Write::update_run(&run)
}

pub(crate) fn sub(key: &str, target: Target) -> SubscriptionRecord {
    let (channel, name) = key.split_once('/').unwrap();
    serde_json::from_value(json!({
        "key": key, "channel": channel, "name": name, "target": target, "max_attempts": 3,
        "backoff_ms": 1_000, "max_backoff_ms": 60_000, "ack_timeout_ms": 30_000, "created_at": T0,
    }))
    .unwrap()
}

pub(crate) fn subscribe(key: &str) -> Write {
    Write::Subscribe(Box::new(sub(key, Target::Sse)))
}

pub(crate) fn emission(id: &str, channel: &str) -> Emission {
    serde_json::from_value(json!({ "id": id, "channel": channel, "payload": { "id": id } }))
        .unwrap()
}

pub(crate) fn emit(s: &dyn Store, emitted: Vec<Emission>) -> Write {
    commit_with(s, R, "say", |_, _, x| x.emitted = emitted)
}

// Setups and reads.

pub(crate) fn started(s: &dyn Store) {
    put(s, create(&run(R)));
}

/// Run `r`, with a deadline, asleep.
pub(crate) fn dozing(s: &dyn Store) {
    put(s, create(&with_deadline(R)));
    put(s, nap(s, Sleep));
}

pub(crate) fn stored_run(s: &dyn Store, id: &str) -> RunRecord {
    s.run(id).unwrap().unwrap()
}

pub(crate) fn is_running(s: &dyn Store, id: &str) -> bool {
    s.running().unwrap().iter().any(|run| run.id == id)
}

/// Run `r` at a glance: its state and number of records, whether it is
/// asleep, and whether it is listed as running.
pub(crate) fn glance(s: &dyn Store) -> (RunState, u32, bool, bool) {
    let run = stored_run(s, R);
    (run.state, run.step_records, run.suspended, is_running(s, R))
}

/// Run `id`'s pending timers, with their paths.
pub(crate) fn timers(s: &dyn Store, id: &str) -> Vec<(TimerRef, String)> {
    let timers = s.run_timers(id).unwrap().into_iter();
    timers.map(|t| (t.timer, t.path)).collect()
}

pub(crate) fn armed(kind: TimerKind, path: &str) -> (TimerRef, String) {
    (timer(kind), path.to_owned())
}

/// No timer is pending, anywhere.
pub(crate) fn no_timers(s: &dyn Store) -> bool {
    s.timer_keys().unwrap().is_empty() && timers(s, R).is_empty()
}

pub(crate) fn queued(s: &dyn Store, subscription: &str, dead: bool) -> Vec<DeliveryRecord> {
    s.queued(subscription, dead, 0, usize::MAX).unwrap()
}

// Refusals.

pub(crate) fn ended(e: &Refused) -> bool {
    matches!(e, Refused::RunEnded(id) if id == R)
}

pub(crate) fn duplicate(e: &Refused, used: &str, by: &str) -> bool {
    matches!(e, Refused::Duplicate { key, run } if key == used && run == by)
}

pub(crate) fn exists(e: &Refused, what: What) -> bool {
    matches!(e, Refused::Exists(found) if *found == what)
}

/// The refusal of a write decided on run `r` before it moved on.
pub(crate) fn changed(e: &Refused) -> bool {
    matches!(e, Refused::Changed(What::Run(id)) if id == R)
}

pub(crate) fn not_found(e: &Refused, what: What) -> bool {
    matches!(e, Refused::NotFound(found) if *found == what)
}
