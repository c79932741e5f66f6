//! Helpers shared by the fuzz targets: deterministic splitting of an input
//! into reads, a byte reader for operation-sequence targets, and the keys
//! the translators sign and seal reasoning with.

use std::sync::Arc;

use chatgate_core::dialect::Carry;
use chatgate_core::reasoning::ReasoningSeal;

/// The fuzz targets' deployment secret.
pub const SECRET: &[u8] = b"the fuzz targets' own deployment secret";

/// The keys made from [`SECRET`].
pub fn seal() -> Arc<ReasoningSeal> {
    Arc::new(ReasoningSeal::new(SECRET))
}

/// A translator's carry with those keys, nothing remembered.
pub fn carry() -> Carry {
    Carry::new(seal())
}

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

/// Whether the chat request `with` (translated with reasoning replay) is
/// `without` (translated without) but for a `reasoning_content` string
/// on some assistant messages: replay adds reasoning, nothing else.
pub fn only_reasoning_added(without: &[u8], with: &[u8]) -> Result<(), String> {
    let a: serde_json::Value = serde_json::from_slice(without).map_err(|e| e.to_string())?;
    let mut b: serde_json::Value = serde_json::from_slice(with).map_err(|e| e.to_string())?;
    if let Some(messages) = b["messages"].as_array_mut() {
        for m in messages {
            let Some(o) = m.as_object_mut() else { continue };
            if let Some(r) = o.remove("reasoning_content") {
                if o.get("role").and_then(|r| r.as_str()) != Some("assistant") || !r.is_string() {
                    return Err(format!("reasoning on {o:?}: {r}"));
                }
            }
        }
    }
    if a == b {
        Ok(())
    } else {
        Err(format!("{a}\n!=\n{b}"))
    }
}
