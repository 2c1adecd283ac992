//! Deliberate bugs, each a fix taken back or a check left out, that a test
//! turns on one at a time to check that the simulator finds it
//! (`host/sim/tests/mutations.rs`, which names each and what it undoes).
//!
//! Without the `mutations` feature, [`on`] is `false` and compiles away; no
//! build of weft itself turns the feature on.

#[cfg(feature = "mutations")]
static ACTIVE: std::sync::RwLock<&'static [&'static str]> = std::sync::RwLock::new(&[]);

/// Whether mutation `name` is on.
#[inline(always)]
pub fn on(name: &str) -> bool {
    #[cfg(feature = "mutations")]
    {
        let active = ACTIVE
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        active.contains(&name)
    }
    #[cfg(not(feature = "mutations"))]
    {
        let _ = name;
        false
    }
}

/// Turns the mutations `names` on, and every other off (all, with `&[]`).
#[cfg(feature = "mutations")]
pub fn set(names: &'static [&'static str]) {
    *ACTIVE
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = names;
}
