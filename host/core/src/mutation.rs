//! Deliberate bugs, each a fix taken back or a check left out, that a test
//! turns on one at a time to check that the simulator finds it
//! (`host/sim/tests/mutations.rs`, which names each and what it undoes).
//!
//! Without the `mutations` feature, [`on`] is `false` and compiles away; no
//! build of weft itself turns the feature on.

#[cfg(feature = "mutations")]
static ACTIVE: std::sync::RwLock<Option<&'static str>> = std::sync::RwLock::new(None);

/// Whether mutation `name` is on.
#[inline(always)]
pub fn on(name: &str) -> bool {
    #[cfg(feature = "mutations")]
    {
        let active = ACTIVE
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *active == Some(name)
    }
    #[cfg(not(feature = "mutations"))]
    {
        let _ = name;
        false
    }
}

/// Turns mutation `name` on (and every other off), or all off with `None`.
#[cfg(feature = "mutations")]
pub fn set(name: Option<&'static str>) {
    *ACTIVE
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = name;
}
