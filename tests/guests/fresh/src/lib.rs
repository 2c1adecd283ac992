//! `fresh`: keeps state that outlives a call, if the instance does, and
//! fails any call that finds some left: a counter in a static, a string
//! on the heap behind a static, a page of linear memory it grows, and a
//! byte on every other page of two large statics, one in the component's
//! data image and one zeroed, so that a call dirties well over a hundred
//! disjoint runs of pages (an interpreter's heap looks like that to the
//! host's reset of linear memory).
//! Every call must see the instance as it was instantiated; one that sees
//! another call's traces fails with `stale`.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};

use serde_json::{Value, json};
use weft_sdk::{Context, StepError};

/// Calls this instance has served.
static CALLS: AtomicU32 = AtomicU32::new(0);
/// The run and step of the last call, on the heap.
static LAST: Mutex<Option<String>> = Mutex::new(None);

/// Bytes between two marked bytes: every other 4 KiB page is written.
const STRIDE: usize = 8192;
/// Pages marked in each of the statics below.
const MARKED: usize = 80;
/// What the image holds in [`IMAGED`].
const IMAGE_BYTE: u8 = 0xA5;
/// A static with its bytes in the component's data image.
static IMAGED: [AtomicU8; STRIDE * MARKED] = [const { AtomicU8::new(IMAGE_BYTE) }; STRIDE * MARKED];
/// A zeroed static: not in the image.
static ZEROED: [AtomicU8; STRIDE * MARKED] = [const { AtomicU8::new(0) }; STRIDE * MARKED];

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
    let marked = mark(&IMAGED, IMAGE_BYTE) + mark(&ZEROED, 0);
    if calls > 0 || last.is_some() || marked > 0 {
        return Err(StepError::fatal(
            "stale",
            format!(
                "{me} found the instance used before: {calls} earlier calls, the last by {}; {marked} pages of its statics written",
                last.unwrap_or_default()
            ),
        ));
    }
    Ok(json!({ "fresh": true, "pages": pages }))
}

/// Writes a mark on every other page of `statics`, and counts the pages
/// that already held one (a byte other than `pristine`).
fn mark(statics: &[AtomicU8], pristine: u8) -> usize {
    statics
        .iter()
        .step_by(STRIDE)
        .map(|byte| byte.swap(pristine ^ 0xFF, Ordering::SeqCst))
        .filter(|&old| old != pristine)
        .count()
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
