//! The W3C trace context of runs: a run's trace id is its UUID's bits, and
//! an attempt's span id is derived from the run, the step's path and the
//! attempt, so the host's exported spans and the `traceparent` a step's
//! outgoing requests carry name the same trace and span, across restarts.

use sha2::{Digest as _, Sha256};

/// The trace of run `run`: its UUID's bits, or (for an id that is not a
/// UUID) the first 16 bytes of its SHA-256.
pub fn trace_id(run: &str) -> [u8; 16] {
    let hex: String = run.chars().filter(|c| *c != '-').collect();
    if hex.len() == 32
        && let Ok(n) = u128::from_str_radix(&hex, 16)
    {
        return n.to_be_bytes();
    }
    let digest = Sha256::digest(run.as_bytes());
    let mut id = [0; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

/// The span of attempt `attempt` of the step at `path` of run `run`; the
/// run's own span with an empty `path`.
pub fn span_id(run: &str, path: &str, attempt: u32) -> [u8; 8] {
    let mut hash = Sha256::new();
    hash.update(run.as_bytes());
    hash.update([0]);
    hash.update(path.as_bytes());
    hash.update(attempt.to_be_bytes());
    let digest = hash.finalize();
    let mut id = [0; 8];
    id.copy_from_slice(&digest[..8]);
    id
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `traceparent` header of attempt `attempt` of the step at `path` of
/// run `run` (sampled).
pub fn traceparent(run: &str, path: &str, attempt: u32) -> String {
    format!(
        "00-{}-{}-01",
        hex(&trace_id(run)),
        hex(&span_id(run, path, attempt))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_trace_is_its_uuid_and_its_spans_are_stable() {
        let run = "01a24208-7dbd-7dda-9ee7-df274aaed050";
        assert_eq!(hex(&trace_id(run)), "01a242087dbd7dda9ee7df274aaed050");
        assert_eq!(span_id(run, "a", 1), span_id(run, "a", 1));
        assert_ne!(span_id(run, "a", 1), span_id(run, "a", 2));
        assert_ne!(span_id(run, "", 0), span_id(run, "a", 1));
        assert_ne!(trace_id("not-a-uuid"), [0; 16]);
        let header = traceparent(run, "a", 1);
        assert_eq!(header.len(), 55, "{header}");
        assert!(
            header.starts_with("00-01a242087dbd7dda9ee7df274aaed050-"),
            "{header}"
        );
        assert!(header.ends_with("-01"), "{header}");
    }
}
