//! `fresh`: keeps state that outlives a call, if the instance does, and
//! fails any call that finds some left: a counter in a static, a string
//! on the heap behind a static, and a page of linear memory it grows.
//! Every call must see the instance as it was instantiated; one that sees
//! another call's traces fails with `stale`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

/// Calls this instance has served.
static CALLS: AtomicU32 = AtomicU32::new(0);
/// The run and step of the last call, on the heap.
static LAST: Mutex<Option<String>> = Mutex::new(None);

fn fresh(ctx: &Context, _input: Value) -> Result<Value, StepError> {
    let calls = CALLS.fetch_add(1, Ordering::SeqCst);
    let me = format!("{}/{}#{}", ctx.run_id, ctx.step_id, ctx.attempt);
    let last = LAST
        .lock()
        .map_err(|_| StepError::fatal("stale", "a poisoned lock"))?
        .replace(me.clone());
    let pages = pages();
    // One more page for the next call to find, if it shares this instance.
    grow();
    if calls > 0 || last.is_some() {
        return Err(StepError::fatal(
            "stale",
            format!(
                "{me} found the instance used before: {calls} earlier calls, the last by {}",
                last.unwrap_or_default()
            ),
        ));
    }
    Ok(json!({ "fresh": true, "pages": pages }))
}

/// Pages of linear memory now.
fn pages() -> usize {
    #[cfg(target_arch = "wasm32")]
    {
        core::arch::wasm32::memory_size(0)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        0
    }
}

/// Grows linear memory by one page.
fn grow() {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::memory_grow(0, 1);
}

weft_sdk::export_step!(fresh, name = "fresh");
