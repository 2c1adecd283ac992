//! The leaf of weft's crates: what every layer shares and nothing of weft's
//! own is needed to define.
//!
//! - [`clock`]: time, injected ([`Clock`], [`Timestamp`]).
//! - [`Digest`]: a component's or definition's content digest.
//! - [`egress`]: where outgoing HTTP may go.
//! - [`names`]: the checks of ids and names people choose.
//! - [`InputSchema`]: a compiled JSON Schema.
//! - [`effects`]: what an attempt buffers until its commit.
//! - [`ScheduleSpec`], [`Overlap`] and [`CatchUp`]: a cron trigger as
//!   written (weft-model compiles it).
//! - [`ErrorRecord`]: how an error is recorded and shown.
//! - [`metrics`]: what a host counts and times, for `GET /metrics`.
//! - [`trace`]: the W3C trace context of runs and their attempts.
//! - [`tenant`]: whose an object is, and its name as stored.
//! - [`fair`]: items of several tenants, taken in turn.
//! - [`ids`]: fresh ids and random numbers, repeatable under a seed.
//! - [`Signal`], [`lock`], [`read`] and [`write`]: waiting for news, locking
//!   without poison.

pub mod clock;
mod digest;
pub mod effects;
pub mod egress;
mod error;
pub mod fair;
pub mod ids;
pub mod metrics;
pub mod mutation;
pub mod names;
pub mod panics;
mod schedule;
mod schema;
mod signal;
pub mod tenant;
pub mod trace;

pub use clock::{Clock, SimClock, SystemClock, Timestamp};
pub use digest::{Digest, Hashing};
pub use effects::{Emission, HttpCall, KvEffects, LogLevel, LogLine, LogSource, Versioned};
pub use error::ErrorRecord;
pub use schedule::{CatchUp, Overlap, ScheduleSpec};
pub use schema::InputSchema;
pub use signal::{Signal, lock, read, write};
