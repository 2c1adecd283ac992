//! A hostile tenant's steps against the runtime: each tries to hold what
//! is not its own, and before these bounds each succeeded.
//!
//! - A step in `std::thread::sleep` for an hour waited in the host's
//!   `wasi:io/poll`, where epoch interruption does not reach: its
//!   `timeout: 1s` did nothing, a cancel did nothing, and its worker
//!   thread was gone for the hour. Now the wait ends at the deadline
//!   (`timeout`) or within a few milliseconds of a cancel (`cancelled`).
//! - A step with a 64 MiB memory cap made the host buffer 9 GiB of
//!   key-value writes, or gigabytes of parsed messages and output. Now the
//!   host's holdings for a call are charged to a budget of the step's
//!   memory limit, and the call fails `resource_limit` past it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::common::guest_bytes;
use serde_json::json;
use weft::runtime::{CallError, CallOptions, KvAccess, KvSource, StepContext, Versioned};
use weft::{Runtime, RuntimeConfig};

fn context() -> StepContext {
    StepContext {
        tenant: "t".to_owned(),
        workflow: "wf".to_owned(),
        run_id: "run-1".to_owned(),
        step_id: "hostile".to_owned(),
        attempt: 1,
        idempotency_key: "run-1:hostile".to_owned(),
    }
}

/// A key-value space with nothing committed in it.
#[derive(Debug, Default)]
struct NoData;

impl KvSource for NoData {
    fn get(&self, _space: &str, _key: &str) -> Result<Versioned, String> {
        Ok(Versioned::default())
    }

    fn list(&self, _: &str, _: &str, _: usize, _: u64) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }

    fn now(&self) -> u64 {
        0
    }
}

#[test]
fn a_step_asleep_in_the_host_ends_at_its_deadline() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let hostile = runtime.load(&guest_bytes("hostile")).unwrap();
    let started = Instant::now();
    let outcome = hostile.call(
        &context(),
        r#"{"op": "sleep", "seconds": 3600}"#,
        &CallOptions {
            timeout: Some(Duration::from_secs(1)),
            ..CallOptions::default()
        },
    );
    let took = started.elapsed();
    assert_eq!(
        outcome.result,
        Err(CallError::Timeout {
            limit: Duration::from_secs(1)
        })
    );
    assert!(
        took < Duration::from_secs(10),
        "the sleep ended after {took:?}"
    );
    // A short sleep still ends as the guest asked.
    let outcome = hostile.call(
        &context(),
        r#"{"op": "sleep", "seconds": 0}"#,
        &CallOptions::default(),
    );
    assert_eq!(outcome.result, Ok(json!({ "slept": true })));
}

#[test]
fn a_step_asleep_in_the_host_ends_when_cancelled() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let hostile = runtime.load(&guest_bytes("hostile")).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let setter = {
        let cancel = Arc::clone(&cancel);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            cancel.store(true, Ordering::Relaxed);
            Instant::now()
        })
    };
    let outcome = hostile.call(
        &context(),
        r#"{"op": "sleep", "seconds": 3600}"#,
        &CallOptions {
            timeout: Some(Duration::from_secs(3600)),
            cancel: Some(cancel),
            ..CallOptions::default()
        },
    );
    let ended = Instant::now();
    let cancelled_at = setter.join().unwrap();
    assert_eq!(outcome.result, Err(CallError::Cancelled));
    let after = ended.duration_since(cancelled_at);
    assert!(
        after < Duration::from_secs(5),
        "ended {after:?} after the cancel"
    );
}

/// A call that tries to make the host buffer 9 GiB of key-value writes
/// (9,216 distinct keys of 1 MiB, going on after each refusal) fails
/// `resource_limit`, and the host held no more than its budget.
#[test]
fn a_call_cannot_make_the_host_hold_more_than_its_memory_limit() {
    let runtime = Runtime::new(RuntimeConfig::default()).unwrap();
    let hostile = runtime.load(&guest_bytes("hostile")).unwrap();
    let limit: u64 = 64 << 20;
    let kv = KvAccess {
        space: "workflow/wf".to_owned(),
        source: Arc::new(NoData),
    };
    let outcome = hostile.call(
        &context(),
        r#"{"op": "kv", "count": 9216, "kib": 1024}"#,
        &CallOptions {
            memory_limit: Some(limit),
            kv: Some(kv),
            ..CallOptions::default()
        },
    );
    match &outcome.result {
        Err(error @ CallError::ResourceLimit { message }) => {
            assert_eq!(error.code(), "resource_limit");
            assert!(!error.is_retryable());
            assert!(message.contains("budget of 67108864 bytes"), "{message}");
        }
        other => panic!("expected resource_limit, got {other:?}"),
    }
    let held: usize = outcome
        .kv
        .writes
        .iter()
        .map(|(k, v)| k.len() + v.as_ref().map_or(0, String::len))
        .sum();
    assert!(held as u64 <= limit, "the host held {held} bytes");
    assert!(
        outcome.kv.writes.len() >= 32,
        "{} writes",
        outcome.kv.writes.len()
    );

    // Messages are charged as parsed: 10,000 lists of 100,000 numbers is
    // about 10 GiB of parsed values from 2 GB of text.
    let outcome = hostile.call(
        &context(),
        r#"{"op": "emit", "count": 10000, "values": 100000}"#,
        &CallOptions {
            memory_limit: Some(limit),
            ..CallOptions::default()
        },
    );
    assert_eq!(
        outcome.result.as_ref().map_err(CallError::code),
        Err("resource_limit")
    );
    assert!(
        outcome.emitted.len() < 20,
        "{} messages",
        outcome.emitted.len()
    );

    // So is the output: 1.4 million numbers, 2.8 MB of text, are about
    // 70 MB parsed (the guest holds them in about 45 MB).
    let outcome = hostile.call(
        &context(),
        r#"{"op": "output", "values": 1400000}"#,
        &CallOptions {
            memory_limit: Some(limit),
            ..CallOptions::default()
        },
    );
    assert_eq!(
        outcome.result.as_ref().map_err(CallError::code),
        Err("resource_limit")
    );
    // Under the budget, the same step succeeds.
    let outcome = hostile.call(
        &context(),
        r#"{"op": "output", "values": 1000}"#,
        &CallOptions::default(),
    );
    assert_eq!(
        outcome.result.map(|v| v.as_array().map(Vec::len)),
        Ok(Some(1000))
    );
}
