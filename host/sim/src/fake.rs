//! The simulated plugins, on the engine's fake runner
//! (`weft_engine::fake`, which the engine's own tests use too): no
//! WebAssembly. Each plugin is a pure function of its call and the store,
//! so a seed replays them exactly.
//!
//! - `count` reads key `n` of its workflow's key space, writes `n + 1`, and
//!   emits one message to channel `counted`: its KV write and its message
//!   must land exactly once per success.
//! - `flaky` fails its first attempt retryably, then succeeds.
//! - `echo` gives back its input.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use weft_core::{Emission, ErrorRecord, KvEffects};
use weft_engine::fake::{Behaviour, FakeSource};
use weft_engine::{StepCall, StepOutcome};
use weft_store::Store;

/// The key space of workflow `workflow`, as the real runtime names it.
pub(crate) fn space(workflow: &str) -> String {
    format!("workflow/{workflow}")
}

/// The simulated plugins, `count` on `store`.
pub(crate) fn source(store: Arc<dyn Store>) -> FakeSource {
    let count: Behaviour = Arc::new(move |call, _| count(store.as_ref(), call));
    let flaky: Behaviour = Arc::new(|call, input| {
        if call.context.attempt == 1 {
            let mut error = ErrorRecord::fatal("unavailable", "the first attempt fails");
            error.retryable = true;
            return StepOutcome::of(Err(error));
        }
        StepOutcome::of(Ok(input))
    });
    let echo: Behaviour = Arc::new(|_, input| StepOutcome::of(Ok(input)));
    FakeSource::new([("count", count), ("flaky", flaky), ("echo", echo)])
}

/// Key `n` plus one, read from the committed data with its version.
fn count(store: &dyn Store, call: &StepCall) -> StepOutcome {
    // The real runtime names the space by the workflow's stored id: its
    // tenant, then its bare id.
    let space = space(&weft_core::tenant::qualify(
        &call.context.tenant,
        &call.context.workflow,
    ));
    let read = match store.kv_get(&space, "n") {
        Ok(read) => read,
        Err(e) => return StepOutcome::of(Err(ErrorRecord::internal(e.to_string()))),
    };
    let n = read
        .value
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        + 1;
    let mut outcome = StepOutcome::of(Ok(json!({ "n": n })));
    outcome.kv = KvEffects {
        space,
        writes: BTreeMap::from([("n".to_owned(), Some(n.to_string()))]),
        reads: BTreeMap::from([("n".to_owned(), read.version)]),
        expires: BTreeMap::new(),
    };
    outcome.emitted = vec![Emission {
        id: weft_core::ids::uuid_v7(weft_core::Timestamp(0)),
        channel: "counted".to_owned(),
        payload: json!({ "run": call.context.run_id, "step": call.context.step_id }),
    }];
    outcome
}
