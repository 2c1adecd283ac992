//! What the host holds for one call on the guest's behalf, outside the
//! guest's memory: buffered key-value writes, emitted messages and the
//! output, as they will be committed, and `wasi:http` header maps (each
//! guest-made map for what it may grow to, each response's headers as they
//! came). The guest's memory cap bounds only
//! its own memory; without this bound a 64 MiB guest could make the host
//! hold gigabytes. The bytes are charged when they are taken, so the host
//! never holds more than the budget plus one item (itself bounded, 1 MiB
//! for a value or a message).

/// Bytes a parsed JSON value costs the host beyond its text: the value
/// itself and its place in a list or map.
const PER_VALUE: usize = 48;

/// The trap of a call stopped past its budget (the call's error is
/// `resource_limit`, from [`HostBytes::over`]).
#[derive(Debug, thiserror::Error)]
#[error("the call went past the host's budget for it")]
pub(crate) struct OverBudget;

/// A call's budget of host-held bytes. Clones share it: the HTTP hooks
/// charge it from the tasks that receive responses.
#[derive(Debug, Clone)]
pub(crate) struct HostBytes(std::sync::Arc<std::sync::Mutex<Held>>);

#[derive(Debug)]
struct Held {
    limit: u64,
    held: u64,
    /// The first refusal: the call fails `resource_limit` with it, whatever
    /// the guest made of the error it was given.
    over: Option<String>,
}

impl HostBytes {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: u64) -> Self {
        Self(std::sync::Arc::new(std::sync::Mutex::new(Held {
            limit,
            held: 0,
            over: None,
        })))
    }

    /// Takes `bytes` more for `what` (`a key-value write`, ...), or refuses
    /// them, and every later charge, naming the budget.
    pub(crate) fn charge(&self, what: &str, bytes: usize) -> Result<(), String> {
        let mut budget = weft_core::lock(&self.0);
        if let Some(over) = &budget.over {
            return Err(over.clone());
        }
        let held = budget
            .held
            .saturating_add(u64::try_from(bytes).unwrap_or(u64::MAX));
        if held > budget.limit {
            let message = format!(
                "{what} of {bytes} bytes would make the host hold {held} bytes for this call, \
                 over its budget of {} bytes (the step's memory limit)",
                budget.limit
            );
            budget.over = Some(message.clone());
            return Err(message);
        }
        budget.held = held;
        Ok(())
    }

    /// The refusal that failed the call, if one did.
    pub(crate) fn over(&self) -> Option<String> {
        weft_core::lock(&self.0).over.clone()
    }

    /// The refusal that failed the call, if one did: checked before work
    /// that would only be charged after it.
    pub(crate) fn refused(&self) -> Result<(), String> {
        self.over().map_or(Ok(()), Err)
    }

    /// Gives back `bytes` charged before (a key written again).
    pub(crate) fn release(&self, bytes: usize) {
        let mut budget = weft_core::lock(&self.0);
        budget.held = budget
            .held
            .saturating_sub(u64::try_from(bytes).unwrap_or(u64::MAX));
    }
}

/// What JSON `text` will cost the host once parsed, counted without
/// parsing it: its length, and [`PER_VALUE`] for each value it may hold
/// (one more than its separators and openers outside strings). An upper
/// bound for valid JSON, read in one pass over the bytes.
pub(crate) fn json_weight(text: &str) -> usize {
    let (mut values, mut in_string, mut escaped) = (1usize, false, false);
    for &byte in text.as_bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b',' | b':' | b'[' | b'{' => values += 1,
                _ => {}
            }
        }
    }
    text.len().saturating_add(values.saturating_mul(PER_VALUE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_past_the_budget_are_refused_and_stay_refused() {
        let bytes = HostBytes::new(100);
        bytes.charge("a write", 60).unwrap();
        let refused = bytes.charge("a write", 60).unwrap_err();
        assert!(refused.contains("budget of 100 bytes"), "{refused}");
        bytes.release(60);
        // Refused once, the call has failed: later charges are refused too.
        assert_eq!(bytes.charge("a write", 1).unwrap_err(), refused);
        assert_eq!(bytes.over().as_deref(), Some(refused.as_str()));
    }

    #[test]
    fn json_weight_counts_the_values_a_parse_would_make() {
        assert_eq!(json_weight("1"), 1 + PER_VALUE);
        // Five values: the list and four numbers.
        assert_eq!(json_weight("[1,2,3,4]"), 9 + 5 * PER_VALUE);
        // Separators inside strings are text, escaped quotes included.
        assert_eq!(json_weight(r#""a,\"[b""#), 8 + PER_VALUE);
        // Over-counts `{"a":1}` (key and value, 3), never under-counts.
        assert!(json_weight(r#"{"a":1}"#) >= 7 + 2 * PER_VALUE);
        let flat = format!("[{}0]", "0,".repeat(1000));
        assert!(json_weight(&flat) > 1001 * PER_VALUE);
    }
}
