//! Fresh ids and random numbers, from one place, so that a simulation can
//! make them repeatable.
//!
//! By default every value is random (the random half of a UUIDv7). A thread
//! that calls [`repeatable`] gets values from a seeded generator instead,
//! until it calls [`repeatable`] with `None`: the simulator drives a whole
//! engine on one thread, so one seed then decides every id it makes.

use std::cell::Cell;

use crate::clock::Timestamp;

thread_local! {
    /// This thread's seeded generator, if it has one.
    static SEEDED: Cell<Option<SplitMix>> = const { Cell::new(None) };
}

/// A small, fast generator that one `u64` seeds (splitmix64): not for
/// secrets, only for repeatable choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitMix(u64);

impl SplitMix {
    /// The generator seeded by `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let n = n as u64;
        usize::try_from(self.next_u64() % n).unwrap_or(0)
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }
}

/// Makes the ids and random numbers this thread draws from now on follow
/// `seed` (`None`: random again).
pub fn repeatable(seed: Option<u64>) {
    SEEDED.with(|state| state.set(seed.map(SplitMix::new)));
}

/// A random `u64`: from this thread's seeded generator if it has one,
/// else from the system's randomness.
pub fn random_u64() -> u64 {
    SEEDED.with(|state| match state.get() {
        Some(mut generator) => {
            let value = generator.next_u64();
            state.set(Some(generator));
            value
        }
        None => uuid::Uuid::now_v7().as_u64_pair().1,
    })
}

/// A UUIDv7 for time `now`, as text: ids made later sort later, and the
/// rest of the bits are [`random_u64`].
pub fn uuid_v7(now: Timestamp) -> String {
    let mut random = [0u8; 10];
    random[..8].copy_from_slice(&random_u64().to_le_bytes());
    random[8..].copy_from_slice(&random_u64().to_le_bytes()[..2]);
    uuid::Builder::from_unix_timestamp_millis(now.as_millis(), &random)
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_repeats_its_values_and_ids_are_v7() {
        repeatable(Some(7));
        let first: Vec<u64> = (0..4).map(|_| random_u64()).collect();
        let id = uuid_v7(Timestamp(1_700_000_000_000));
        repeatable(Some(7));
        let again: Vec<u64> = (0..4).map(|_| random_u64()).collect();
        assert_eq!(first, again);
        assert_eq!(id, uuid_v7(Timestamp(1_700_000_000_000)));
        repeatable(None);
        let parsed = uuid::Uuid::parse_str(&id).unwrap();
        assert_eq!(parsed.get_version_num(), 7);
        assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
        let (secs, _) = parsed.get_timestamp().unwrap().to_unix();
        assert_eq!(secs, 1_700_000_000);
        assert_ne!(random_u64(), random_u64());
    }
}
