//! The one door through which the delivery side of a host (the hub)
//! writes: subscriptions and delivery moves, committed in the engine's
//! group commit with everything else. It cannot write a run's records.

use std::sync::Arc;

use weft_core::Signal;
use weft_store::{DeliveryOp, Store, StoreError, SubscriptionRecord, Write};

use crate::scheduler::Scheduler;

/// A write the delivery side may make.
#[derive(Debug, Clone)]
pub enum DeliveryWrite {
    /// Records a subscription (the same one again is a no-op).
    Subscribe(SubscriptionRecord),
    /// Removes the subscription with this key and its deliveries.
    Unsubscribe(String),
    /// Moves delivery `id` on.
    Move(String, DeliveryOp),
}

impl From<DeliveryWrite> for Write {
    fn from(write: DeliveryWrite) -> Self {
        match write {
            DeliveryWrite::Subscribe(record) => Write::Subscribe(Box::new(record)),
            DeliveryWrite::Unsubscribe(key) => Write::Unsubscribe(key),
            DeliveryWrite::Move(id, op) => Write::Delivery(id, op),
        }
    }
}

/// Commits [`DeliveryWrite`]s through an engine's group commit. Cheap to
/// clone.
#[derive(Clone)]
pub struct Committer {
    core: Arc<Scheduler>,
}

impl std::fmt::Debug for Committer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Committer").finish_non_exhaustive()
    }
}

impl Committer {
    pub(crate) fn new(core: Arc<Scheduler>) -> Self {
        Self { core }
    }

    /// Commits `write` and waits until it is durable, or refused. Blocking.
    pub fn commit(&self, write: DeliveryWrite) -> Result<(), StoreError> {
        self.core.commits.commit(write.into())
    }

    /// Commits every write (they usually share a transaction) and waits
    /// for all; one answer per write, in order. Blocking.
    pub fn commit_all(&self, writes: Vec<DeliveryWrite>) -> Vec<Result<(), StoreError>> {
        self.core
            .commits
            .commit_all(writes.into_iter().map(Write::from).collect())
    }

    /// Takes subscription `key`'s delivery queue for this host, unless
    /// another live host holds it: one host at a time delivers a queue,
    /// so its order holds. `Ok` if this host holds it now;
    /// [`Refused::Fenced`](weft_store::Refused::Fenced) while another host does. Blocking.
    pub fn hold(&self, key: &str) -> Result<(), StoreError> {
        let host = self.core.host();
        let current = self.store().lease(&weft_store::queue_lease(key))?;
        let lease = match current {
            Some(lease) if lease.host == host => return Ok(()),
            current => weft_store::Lease::after(current.as_ref(), host),
        };
        self.core.commits.commit(Write::HoldQueue {
            subscription: key.to_owned(),
            lease,
        })
    }

    /// A mark of this host's tenure, to read before [`hold`](Self::hold):
    /// [`holds_since`](Self::holds_since) tells whether what was held then
    /// is still this host's.
    pub fn tenure(&self) -> u64 {
        self.core.tenure()
    }

    /// Whether this host's row has held since `tenure` was read, without
    /// lapsing, and holds now. A host stopped past its lease (a zombie)
    /// and continued may find a queue it held taken over by a peer that
    /// delivered and acked since: it must not act on the queue as it read
    /// it before.
    pub fn holds_since(&self, tenure: u64) -> bool {
        self.core.holds_since(tenure)
    }

    /// The store the writes land in, for reading.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.core.launcher.store
    }

    /// Bumped after every commit that carries messages: what delivers them
    /// waits on it.
    pub fn messages(&self) -> Arc<Signal> {
        Arc::clone(&self.core.messages)
    }

    /// What the engine counts, if it counts: webhook requests are timed
    /// there.
    pub fn metrics(&self) -> Option<&Arc<weft_core::metrics::Metrics>> {
        self.core.telemetry.metrics.as_ref()
    }

    /// The engine's clock, which stamps what the hub writes.
    pub fn clock(&self) -> &Arc<dyn weft_core::clock::Clock> {
        &self.core.clock
    }
}
