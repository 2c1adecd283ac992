//! Who drives a run: leases with an epoch, and the hosts that hold them.
//!
//! Each process that drives runs is a host, with a row that it renews
//! ([`Write::Renew`](crate::Write::Renew)) and that expires unless renewed.
//! A run's lease names the host that drives it and an epoch, a fencing
//! token: every commit of a run names the lease its writer holds, and the
//! store refuses it ([`Refused::Fenced`](crate::Refused::Fenced))
//! unless that is the run's lease now. A host takes a run
//! ([`Write::Claim`](crate::Write::Claim), or the fire or answer that wakes
//! it) only when nobody drives it: the run is suspended, has no lease, or
//! its host was declared gone ([`Write::Forget`](crate::Write::Forget),
//! after its row expired). Taking a run moves its epoch on, so the host
//! that held it before cannot commit it again.

use serde::{Deserialize, Serialize};

use weft_core::clock::Timestamp;

/// A run's lease: the host that drives it, and the epoch of that hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lease {
    /// The host's id.
    pub host: String,
    /// Moves on each time the run changes hands, from 1.
    pub epoch: u64,
}

impl Lease {
    /// The lease `host` takes over from `current` (none: the first).
    pub fn after(current: Option<&Lease>, host: &str) -> Self {
        Self {
            host: host.to_owned(),
            epoch: current.map_or(1, |lease| lease.epoch + 1),
        }
    }
}

/// A host that drives runs on this store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    /// Its id, fresh each time a process starts.
    pub id: String,
    /// The machine it runs on.
    pub machine: String,
    /// Its process id on that machine.
    pub pid: u32,
    /// When it started.
    pub started_at: Timestamp,
    /// Its leases hold until then, unless it renews them.
    pub expires_at: Timestamp,
}
