//! Deterministic noise for hostile inputs, reproducible from a seed.

/// A small deterministic generator for hostile inputs (xorshift64*), so a
/// failing input can be reproduced from its seed.
pub struct Noise(u64);

impl Noise {
    /// Seeded (0 is replaced by a fixed odd constant).
    pub fn new(seed: u64) -> Noise {
        Noise(seed.max(1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}
