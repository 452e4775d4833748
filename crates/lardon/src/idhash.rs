//! A hasher for the engine's own sequential ids (reservation and task
//! ids): the hottest maps (the ledger's active reservations, the queue's
//! live tasks) are keyed by them, and SipHash's protection against chosen
//! keys costs more than the rest of a lookup. The splitmix64 finaliser is
//! a bijection with full avalanche, so ids that differ only in their high
//! bits (a caller's preassigned task ids) still spread over the buckets.

use std::hash::{BuildHasherDefault, Hasher};

/// Builds [`IdHasher`]s.
pub(crate) type Ids = BuildHasherDefault<IdHasher>;

/// Hashes one `u64` id with the splitmix64 finaliser.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        let mut z = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used by integer keys; kept correct for any other key.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::Ids;

    #[test]
    fn ids_apart_only_in_high_bits_spread_over_the_low_bits() {
        let low: std::collections::HashSet<u64> =
            (0..1024u64).map(|i| Ids::default().hash_one(i << 40) & 1023).collect();
        assert!(low.len() > 500, "only {} distinct buckets of 1024", low.len());
    }
}
