//! The deliberate bugs the simulator must find: each is a fix taken back or
//! a check left out, switched on by name at one place in the engine or the
//! store ([`weft_core::mutation::on`]), and only in a build with the
//! `mutations` feature. `tests/mutations.rs` plays seeds from 0 with each
//! on in turn, and fails unless every one breaks an invariant within its
//! `within` seeds. The docs cite these names, never a seed.

use crate::Shape;

/// One deliberate bug.
#[derive(Debug, Clone, Copy)]
pub struct Mutation {
    /// Its name, as the code that checks for it spells it.
    pub name: &'static str,
    /// What it takes back.
    pub undoes: &'static str,
    /// The simulator must find it among seeds `0..within`.
    pub within: u64,
    /// In worlds of this shape: the default, or one with more lost
    /// answers for the bugs only they show.
    pub shape: Shape,
}

/// Worlds in which one event in ten loses a commit's answer.
const LOSSY: Shape = Shape {
    events: 300,
    runs: 6,
    lost_answers: 100,
};

/// Worlds as `weft sim` plays them.
const PLAIN: Shape = Shape {
    events: 300,
    runs: 6,
    lost_answers: 15,
};

/// Every mutation, each with the seeds the simulator has to find it in.
pub const LIST: &[Mutation] = &[
    Mutation {
        name: "lease-unchecked",
        undoes: "the store's fencing: a write under a lease that is no longer the run's lands",
        within: 50,
        shape: PLAIN,
    },
    Mutation {
        name: "lost-start-not-read-back",
        undoes: "a run whose creating commit's answer was lost is read back (else it is stored under a live host's lease and never driven)",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "lost-fire-not-woken",
        undoes: "a store-side fire whose answer was lost wakes its run",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "lost-answer-not-woken",
        undoes: "a store-side answer whose commit's answer was lost wakes its run",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "lost-retry-not-woken",
        undoes: "a retry whose commit's answer was lost wakes its run",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "lost-resume-not-woken",
        undoes: "a resume of a paused run whose commit's answer was lost wakes its run",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "lost-cancel-children-left",
        undoes: "a store-side cancellation whose commit's answer was lost is read back, and its children cancelled",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "lost-end-children-left",
        undoes: "a resident run's end whose commit's answer was lost cancels the children it fenced off, if it landed",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "own-lease-left",
        undoes: "a take-over round takes in a run whose lease names this host and that it does not hold (a claim whose answer was lost)",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "zombie-keeps-runs",
        undoes: "a host whose row lapsed before it renewed lets go of the runs taken over meanwhile",
        within: 50,
        shape: PLAIN,
    },
    Mutation {
        name: "open-outbox-row-left",
        undoes: "a parent waiting on a child that is not recorded carries out the child's open outbox row",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "outbox-row-carried-twice",
        undoes: "an outbox row carried out already is not carried out again",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "fenced-child-awaited",
        undoes: "a parent waiting on a child its cancellation fenced off is read back",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "forgotten-host-left",
        undoes: "a host forgotten outside a take-over round has its runs taken over at the next round",
        within: 50,
        shape: LOSSY,
    },
    Mutation {
        name: "tenant-index-dropped",
        undoes: "a new run's row in its tenant's index of runs",
        within: 50,
        shape: PLAIN,
    },
    Mutation {
        name: "timer-count-kept",
        undoes: "a removed timer is taken off its tenant's count of pending timers",
        within: 50,
        shape: PLAIN,
    },
    Mutation {
        name: "fire-wakes-paused",
        undoes: "a fire or an answer decided before a pause landed keeps the run paused (`still_paused`)",
        within: 50,
        shape: PLAIN,
    },
    Mutation {
        name: "refusal-not-undone",
        undoes: "a result refused for a quota is undone in the drive before its failure is stored",
        within: 50,
        shape: PLAIN,
    },
    Mutation {
        name: "emit-unqualified",
        undoes: "an `emit:` step's channel is its run's tenant's",
        within: 50,
        shape: PLAIN,
    },
    Mutation {
        name: "cursor-kept",
        undoes: "the walk's cursor is forgotten when a result under a step it passed changes",
        within: 50,
        shape: PLAIN,
    },
];
