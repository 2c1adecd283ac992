//! Settling deliveries: acks, and dead letters sent again or cleared.
//!
//! Each call is one durable write through the engine's group commit
//! ([`Hub::ack_all`] writes every ack of its batch at once). An ack made
//! here is also told to the subscription's current consumer, before it is
//! woken, so the consumer takes it out of what it has in flight without
//! reading the store back.

use super::{Hub, HubError};
use weft_core::lock;
use weft_engine::DeliveryWrite;
use weft_store::{DeliveryOp, DeliveryRecord, What};

impl Hub {
    /// Acks delivery `id`. A delivery acked already stays as it was (a
    /// late ack is not an error); a dead letter counts as acked.
    pub fn ack(&self, id: &str) -> Result<DeliveryRecord, HubError> {
        self.ack_all(&[id.to_owned()])
            .pop()
            .unwrap_or_else(|| Err(HubError::NotFound(What::Delivery(id.to_owned()))))
    }

    /// Acks every delivery of `ids` in one durable write (one sync); one
    /// answer per id, in order.
    pub fn ack_all(&self, ids: &[String]) -> Vec<Result<DeliveryRecord, HubError>> {
        let at = self.shared.clock.now();
        let writes = ids
            .iter()
            .map(|id| DeliveryWrite::Move(id.clone(), DeliveryOp::Ack { at }))
            .collect();
        let outcomes = self.shared.committer.commit_all(writes);
        let answers: Vec<Result<DeliveryRecord, HubError>> = ids
            .iter()
            .zip(outcomes)
            .map(|(id, outcome)| {
                outcome?;
                self.shared
                    .store
                    .delivery(id)?
                    .ok_or_else(|| HubError::NotFound(What::Delivery(id.clone())))
            })
            .collect();
        // A consumer here takes them out of what it has in flight; told
        // before it is woken.
        {
            let sessions = lock(&self.shared.sessions);
            let mut acked = lock(&self.shared.acked);
            for delivery in answers.iter().flatten() {
                if sessions.contains_key(&delivery.subscription) {
                    acked
                        .entry(delivery.subscription.clone())
                        .or_default()
                        .push(delivery.seq);
                }
            }
        }
        self.shared.signal.bump();
        answers
    }

    /// Puts dead letter `id` back in its subscription's queue, with the
    /// same id and its attempts counted afresh.
    pub fn resend(&self, id: &str) -> Result<DeliveryRecord, HubError> {
        self.change(id, DeliveryOp::Resend)
    }

    /// Drops dead letter `id`.
    pub fn clear(&self, id: &str) -> Result<(), HubError> {
        self.commit(DeliveryWrite::Move(id.to_owned(), DeliveryOp::Clear))?;
        Ok(())
    }

    fn change(&self, id: &str, op: DeliveryOp) -> Result<DeliveryRecord, HubError> {
        self.commit(DeliveryWrite::Move(id.to_owned(), op))?;
        self.shared.signal.bump();
        self.shared
            .store
            .delivery(id)?
            .ok_or_else(|| HubError::NotFound(What::Delivery(id.to_owned())))
    }
}
