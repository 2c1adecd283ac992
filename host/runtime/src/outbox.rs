//! The `outbox` capability: messages a call emits, buffered and returned in
//! the [`CallOutcome`](super::CallOutcome); the engine commits them with
//! the step's result, only if the step succeeds.

use wasmtime::component::{HasSelf, Linker};

use super::bindings;
use super::budget::{HostBytes, json_weight};
use super::sandbox::StepState;
use weft_core::Emission;
use weft_core::names::check_emit;

/// The largest payload.
pub const MAX_PAYLOAD: usize = 1 << 20;
/// The most messages one call may emit.
pub const MAX_MESSAGES: usize = 10_000;

/// The messages of one call.
#[derive(Debug, Default)]
pub(super) struct OutboxState {
    pub(super) emitted: Vec<Emission>,
}

impl OutboxState {
    /// Buffers one message; its id is returned to the guest.
    pub(super) fn emit(
        &mut self,
        channel: String,
        payload: &str,
        held: &HostBytes,
    ) -> Result<String, String> {
        check_emit("channel", &channel)?;
        if payload.len() > MAX_PAYLOAD {
            return Err(format!(
                "the payload is {} bytes; the limit is {MAX_PAYLOAD}",
                payload.len()
            ));
        }
        if self.emitted.len() >= MAX_MESSAGES {
            return Err(format!("a step may emit at most {MAX_MESSAGES} messages"));
        }
        held.refused()?;
        let weight = json_weight(payload).saturating_add(channel.len());
        held.charge("a message", weight)?;
        let payload = serde_json::from_str(payload).map_err(|e| {
            held.release(weight);
            format!("the payload is not JSON: {e}")
        })?;
        let id = uuid::Uuid::now_v7().to_string();
        self.emitted.push(Emission {
            id: id.clone(),
            channel,
            payload,
        });
        Ok(id)
    }
}

/// Links `weft:plugin/outbox` of every contract version into `linker`.
pub(super) fn add_to_linker(linker: &mut Linker<StepState>) -> wasmtime::Result<()> {
    bindings::v1::weft::plugin::outbox::add_to_linker::<StepState, HasSelf<StepState>>(
        linker,
        |s| s,
    )?;
    bindings::v2::weft::plugin::outbox::add_to_linker::<StepState, HasSelf<StepState>>(
        linker,
        |s| s,
    )?;
    bindings::v3::weft::plugin::outbox::add_to_linker::<StepState, HasSelf<StepState>>(
        linker,
        |s| s,
    )
}

bindings::for_each_contract!(outbox => impl contract::Host for StepState {
    fn emit(&mut self, channel: String, payload: String) -> Result<String, String> {
        self.outbox.emit(channel, &payload, &self.held)
    }
});

#[cfg(test)]
mod tests {
    use super::*;

    fn room() -> HostBytes {
        HostBytes::new(1 << 30)
    }

    #[test]
    fn emits_are_charged_as_parsed_and_refused_past_the_budget() {
        let mut outbox = OutboxState::default();
        let held = HostBytes::new(4 << 20);
        // 1 MiB of text, half a million values once parsed.
        let numbers = format!("[{}0]", "0,".repeat((MAX_PAYLOAD - 3) / 2));
        let e = outbox
            .emit("orders".to_owned(), &numbers, &held)
            .unwrap_err();
        assert!(e.contains("over its budget"), "{e}");
        assert!(outbox.emitted.is_empty());
    }

    #[test]
    fn emits_are_checked_and_kept_in_order() {
        let mut outbox = OutboxState::default();
        let a = outbox
            .emit("orders".to_owned(), r#"{"n":1}"#, &room())
            .unwrap();
        let b = outbox.emit("orders".to_owned(), "2", &room()).unwrap();
        assert_ne!(a, b);
        assert!(
            outbox
                .emit("bad/name".to_owned(), "1", &room())
                .unwrap_err()
                .contains("`/`")
        );
        assert!(
            outbox
                .emit("orders".to_owned(), "{", &room())
                .unwrap_err()
                .contains("not JSON")
        );
        let big = format!("\"{}\"", "x".repeat(MAX_PAYLOAD));
        assert!(
            outbox
                .emit("orders".to_owned(), &big, &room())
                .unwrap_err()
                .contains("limit")
        );
        let ids: Vec<_> = outbox.emitted.iter().map(|e| e.id.clone()).collect();
        assert_eq!(ids, [a, b]);
    }
}
