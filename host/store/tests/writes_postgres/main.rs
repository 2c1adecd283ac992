//! The contract of `Store::apply` on PostgreSQL: the cases of the `writes`
//! binary, unchanged, each on an empty store of its own (a schema of its
//! own in the database that `WEFT_TEST_POSTGRES` names; `scripts/test`
//! starts a throwaway cluster and sets it). Without that variable the
//! tests fail: they do not skip.
//!
//! `damaged` is redb's alone: it damages a redb file's rows by hand.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../writes/common.rs"]
mod common;
#[path = "../writes/delete.rs"]
mod delete;
#[path = "../writes/group.rs"]
mod group;
#[path = "../writes/listing.rs"]
mod listing;
#[path = "../writes/messages.rs"]
mod messages;
mod news;
#[path = "../writes/parked.rs"]
mod parked;
#[path = "../writes/quota.rs"]
mod quota;
#[path = "../writes/registry.rs"]
mod registry;
#[path = "../writes/runs.rs"]
mod runs;
#[path = "../writes/secrets.rs"]
mod secrets;
#[path = "../writes/snapshots.rs"]
mod snapshots;
#[path = "../writes/steps.rs"]
mod steps;
#[path = "../writes/table.rs"]
mod table;
mod tls;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

/// The test server's URL.
fn url() -> String {
    std::env::var("WEFT_TEST_POSTGRES").expect(
        "WEFT_TEST_POSTGRES names no PostgreSQL server: run scripts/test, or start one with scripts/postgres-dev",
    )
}

/// A name no other test's schema or connections have: `prefix`, this
/// process and the time.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

/// An empty store in a schema of its own.
fn open_store() -> (tempfile::TempDir, Arc<dyn weft_store::Store>) {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let url = url();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let schema = format!(
        "writes_{}_{nanos}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    let store = weft_store::PostgresStore::open_in(&url, Some(&schema)).unwrap();
    (tempfile::tempdir().unwrap(), Arc::new(store))
}
