//! The audit log: who changed what. Blocking.

use weft_store::{AccessWrite, AuditRecord, Write};

use super::Services;

impl Services {
    /// Appends to the audit log that `actor`, acting for `tenant`, did
    /// `action` to `object`. Written after the change committed: a
    /// failure is logged, and the change stands.
    pub fn audit(
        &self,
        tenant: &str,
        actor: &str,
        action: &str,
        object: &str,
        detail: serde_json::Value,
    ) {
        let at = self.engine.clock().now();
        let record = AuditRecord {
            at,
            tenant: tenant.to_owned(),
            actor: actor.to_owned(),
            action: action.to_owned(),
            object: object.to_owned(),
            detail,
        };
        // Two entries in one millisecond keep their own keys.
        let key = (at.0.saturating_mul(1000), weft_core::ids::random_u64());
        let write = Write::Access(AccessWrite::Audit {
            key,
            record: weft_store::encode(&record),
        });
        match self.engine.store().apply(&[&write]) {
            Ok(results) if results.iter().all(Result::is_ok) => {}
            Ok(results) => {
                tracing::warn!(action, object, "cannot write the audit log: {:?}", results)
            }
            Err(e) => tracing::warn!(action, object, "cannot write the audit log: {e}"),
        }
    }
}
