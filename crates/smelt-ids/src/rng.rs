//! The one seeded random number generator of the workspace: SplitMix64 (Steele, Lea
//! and Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014). Small,
//! fast and deterministic: the same seed gives the same sequence on every machine,
//! which is what workloads, simulations and tests need (it is not for cryptography).
//!
//! [`mix`] is its output function on its own, for hashing a value (a key, a task, a
//! node of a tree) to a well-spread one without keeping a state.

/// The golden-ratio increment SplitMix64 adds to its state at every step.
pub const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finaliser: a bijection of `u64` that spreads every input bit over
/// every output bit.
pub fn finalize(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One SplitMix64 step from state `x`: `finalize(x + GOLDEN)`, the value a
/// [`SplitMix64`] seeded with `x` returns first.
pub fn mix(x: u64) -> u64 {
    finalize(x.wrapping_add(GOLDEN))
}

/// A SplitMix64 generator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        finalize(self.0)
    }

    /// A uniform value in `[0, 1)` (53 random bits).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A value in `0..n` (`n > 0`; the modulo bias is below `n / 2^64`). Panics when
    /// `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "SplitMix64::below(0)");
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_sequence() {
        // The first outputs of the reference implementation seeded with 1234567.
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
        assert_eq!(r.next_u64(), 9817491932198370423);
        assert_eq!(mix(1234567), 6457827717110365317);
    }

    #[test]
    fn same_seed_same_sequence_and_ranges() {
        let (mut a, mut b) = (SplitMix64::new(7), SplitMix64::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
            let f = a.next_f64();
            assert!((0.0..1.0).contains(&f));
            b.next_u64();
            assert!(a.below(10) < 10);
            b.next_u64();
        }
        assert_ne!(SplitMix64::new(1).next_u64(), SplitMix64::new(2).next_u64());
    }
}
