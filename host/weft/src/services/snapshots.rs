//! Snapshot stores: publishing a revision, for `POST /v1/snapshots/{name}`
//! and `weft snapshots publish` without a server alike. Blocking.

use std::io::BufRead;

use weft_engine::snapshots::{FileFormat, PublishError, PublishOptions};
use weft_store::SnapshotRecord;

use super::Services;

impl Services {
    /// Publishes `reader` (in `format`, named `source_name` in errors) as
    /// the next revision of `tenant`'s snapshot store `name`, through the
    /// engine's group commit: see
    /// [`Engine::publish_snapshot`](weft_engine::Engine::publish_snapshot).
    /// The tenant's quotas on size and rate are the adapter's to check
    /// while the bytes come in.
    pub fn publish_snapshot(
        &self,
        tenant: &str,
        name: &str,
        reader: impl BufRead,
        format: FileFormat,
        source_name: &str,
        options: &PublishOptions,
    ) -> Result<SnapshotRecord, PublishError> {
        self.engine
            .publish_snapshot(tenant, name, reader, format, source_name, options)
    }
}
