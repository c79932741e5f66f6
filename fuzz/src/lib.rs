//! Helpers shared by the fuzz targets: deterministic splitting of an input
//! into reads, and a byte reader for operation-sequence targets.

/// A small deterministic generator (xorshift64*), seeded from input bytes.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded from (at most) the first eight bytes of `data`, so the fuzzer
    /// controls the split points through them.
    pub fn from_prefix(data: &[u8]) -> Rng {
        let seed = data.iter().take(8).fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        Rng(seed | 1)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..=max`.
    pub fn upto(&mut self, max: usize) -> usize {
        (self.next_u64() % (max as u64 + 1)) as usize
    }
}

/// Splits `data` into reads as a network might deliver them: lengths mixed
/// between tiny (0..=8, empty reads included) and large (0..=512), chosen by
/// a generator seeded from the first bytes of `data`. The pieces always
/// concatenate back to `data`.
pub fn split(data: &[u8]) -> Vec<&[u8]> {
    let mut rng = Rng::from_prefix(data);
    let mut rest = data;
    let mut out = Vec::new();
    while !rest.is_empty() {
        if out.len() > 4096 {
            out.push(rest);
            break;
        }
        let cap = if rng.next_u64() & 1 == 0 { 8 } else { 512 };
        let n = rng.upto(cap).min(rest.len());
        let (a, b) = rest.split_at(n);
        out.push(a);
        rest = b;
    }
    out
}

/// One byte at a time.
pub fn bytewise(data: &[u8]) -> Vec<&[u8]> {
    data.chunks(1).collect()
}

/// Reads an operation sequence out of fuzz input; exhausted input reads as
/// zeros.
#[derive(Debug)]
pub struct Reader<'a> {
    data: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Reader { data }
    }

    /// Bytes left.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The next byte (0 once exhausted).
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// A little-endian u16.
    pub fn u16(&mut self) -> u16 {
        u16::from(self.byte()) | (u16::from(self.byte()) << 8)
    }

    /// Up to `n` bytes.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.data.len());
        let (a, b) = self.data.split_at(n);
        self.data = b;
        a
    }
}
