//! The fixture and the tables: the store under test, a case's
//! `given(..)[.then(..)].write(..).stored(..)` or `.refused(..)` row, the
//! walk that runs each row on a store of its own, and the snapshot of all
//! the `Store` trait reads back, which a refused write must leave as it was.

use std::sync::Arc;

use weft_store::{Refused, RunFilter, Store, Write};

use crate::common::{SIBLING, SPACE, def, queued, run};

/// The kv keys, digests and idempotency keys the cases use, for snapshots.
const KEYS: [&str; 2] = ["a", "b"];
const DIGESTS: [&str; 6] = ["d0", "d1", "d2", "d3", "c1", "c2"];
const IDEMPOTENCY: [&str; 2] = ["k1", "k2"];

/// An empty store of the backend under test (the test binary's
/// `open_store`), and what must live as long as it.
pub(crate) fn open() -> (tempfile::TempDir, Arc<dyn Store>) {
    crate::open_store()
}

/// A case's name and setup: what `setup` stores, then each write `then`
/// builds in turn; all of it must land.
pub(crate) struct Given {
    name: &'static str,
    setup: fn(&dyn Store),
    then: Vec<fn(&dyn Store) -> Write>,
}

/// A case's setup and the write under test, built once the setup is stored.
pub(crate) struct When(Given, fn(&dyn Store) -> Write);

/// A row of a table: `given(..)[.then(..)].write(..)`, then `.stored(..)`
/// or `.refused(..)`.
pub(crate) struct Case(When, Expect);

enum Expect {
    /// It lands; the reads that prove what it stored.
    Stored(fn(&dyn Store)),
    /// It is refused, with a refusal this accepts.
    Refused(fn(&Refused) -> bool),
}

pub(crate) fn given(name: &'static str, setup: fn(&dyn Store)) -> Given {
    let then = Vec::new();
    Given { name, setup, then }
}

impl Given {
    pub(crate) fn then(mut self, write: fn(&dyn Store) -> Write) -> Self {
        self.then.push(write);
        self
    }

    pub(crate) fn write(self, write: fn(&dyn Store) -> Write) -> When {
        When(self, write)
    }
}

impl When {
    pub(crate) fn stored(self, check: fn(&dyn Store)) -> Case {
        Case(self, Expect::Stored(check))
    }

    pub(crate) fn refused(self, refusal: fn(&Refused) -> bool) -> Case {
        Case(self, Expect::Refused(refusal))
    }
}

/// Runs each case on a store of its own.
pub(crate) fn walk(cases: &[Case]) {
    for Case(When(given, write), expect) in cases {
        let name = given.name;
        eprintln!("case: {name}");
        let (_dir, handle) = open();
        let s = handle.as_ref();
        (given.setup)(s);
        for then in &given.then {
            put(s, then(s));
        }
        let write = write(s);
        match expect {
            Expect::Stored(check) => {
                let answer = apply(s, &write);
                assert!(answer.is_ok(), "{name}: {answer:?}");
                check(s);
            }
            Expect::Refused(refusal) => {
                let before = snapshot(s);
                let answers = s.apply(&[&write, &sibling()]).unwrap();
                let refused = matches!(&answers[0], Err(e) if refusal(e));
                assert!(refused, "{name}: {answers:?}");
                assert!(answers[1].is_ok(), "{name}: the sibling: {answers:?}");
                assert!(s.run(SIBLING).unwrap().is_some(), "{name}: no sibling");
                assert_eq!(snapshot(s), before, "{name}: the refusal wrote");
            }
        }
    }
}

/// Applies `write` alone and answers for it.
fn apply(s: &dyn Store, write: &Write) -> Result<(), Refused> {
    let mut answers = s.apply(&[write]).unwrap();
    assert_eq!(answers.len(), 1);
    answers.pop().unwrap()
}

/// Stores `write`, which must land.
pub(crate) fn put(s: &dyn Store, write: Write) {
    let answer = apply(s, &write);
    assert!(answer.is_ok(), "setup: {answer:?}");
}

fn sibling() -> Write {
    Write::create_run(&run(SIBLING), &def("d-sibling", "id: sibling"), Vec::new())
}

/// Everything the `Store` trait reads back, but the sibling run, as text.
fn snapshot(s: &dyn Store) -> Vec<String> {
    let all = usize::MAX;
    let runs = s.runs(&RunFilter::default(), all).unwrap();
    let mut seen: Vec<String> = runs
        .iter()
        .filter(|run| run.id != SIBLING)
        .map(|run| {
            let id = run.id.as_str();
            let steps = s.steps(id).unwrap();
            let timers = s.run_timers(id).unwrap();
            let messages = s.run_messages(id).unwrap();
            format!("{run:?} {steps:?} {timers:?} {messages:?}")
        })
        .collect();
    for sub in s.subscriptions(None).unwrap() {
        let (queue, dead) = (queued(s, &sub.key, false), queued(s, &sub.key, true));
        seen.push(format!("{sub:?} {queue:?} {dead:?}"));
    }
    let listed = s.running().unwrap().into_iter().map(|run| run.id);
    let listed: Vec<String> = listed.filter(|id| id != SIBLING).collect();
    let keys = s.timer_keys().unwrap();
    let timers: Vec<_> = keys.iter().map(|key| s.timer(*key).unwrap()).collect();
    seen.extend([
        format!("{listed:?} {keys:?} {timers:?}"),
        format!("{:?}", s.outbox().unwrap()),
        format!("{:?}", s.deliveries(all).unwrap()),
        format!("{:?}", s.dead_letters(all).unwrap()),
        format!("{:?}", s.schedules().unwrap()),
        format!("{:?}", s.deployments(None).unwrap()),
        format!("{:?}", s.plugins().unwrap()),
    ]);
    seen.extend(KEYS.map(|key| format!("{:?}", s.kv_get(SPACE, key).unwrap())));
    seen.extend(DIGESTS.map(|d| {
        let (definition, component) = (s.definition(d).unwrap(), s.component(d).unwrap());
        format!("{definition:?} {component:?}")
    }));
    seen.extend(IDEMPOTENCY.map(|k| format!("{:?}", s.idempotent_run(k).unwrap())));
    seen
}
