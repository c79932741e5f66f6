//! What one translated answer may make a translator hold: the same limits
//! for every dialect. A provider's stream is the provider's to shape, and
//! a hostile or broken one could otherwise open tool call after tool call
//! (each an item the translator keeps, looks through on every delta and
//! repeats at the end) or send text without end. A stream past the limits
//! ends as any invalid provider stream ends: the client gets the dialect's
//! failure event.

/// Most output items (tool calls, text and reasoning blocks) one answer
/// may open.
pub const MAX_ITEMS: usize = 256;

/// Most bytes one answer's translation may keep (texts repeated at the
/// end, arguments waiting for their block, reasoning kept for its
/// signature or sealing).
pub const MAX_KEPT: usize = 16 << 20;

/// The answer went past [`MAX_ITEMS`] or [`MAX_KEPT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverBudget;

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the provider's answer holds more than a translation keeps \
             ({MAX_ITEMS} items, {} MiB)",
            MAX_KEPT >> 20
        )
    }
}

/// What a translator holds so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Budget {
    items: usize,
    kept: usize,
}

impl Budget {
    /// One more item.
    pub fn item(&mut self) -> Result<(), OverBudget> {
        if self.items >= MAX_ITEMS {
            return Err(OverBudget);
        }
        self.items += 1;
        Ok(())
    }

    /// `n` more bytes kept.
    pub fn keep(&mut self, n: usize) -> Result<(), OverBudget> {
        if self.kept + n > MAX_KEPT {
            return Err(OverBudget);
        }
        self.kept += n;
        Ok(())
    }

    /// `n` bytes kept are given up.
    pub fn release(&mut self, n: usize) {
        self.kept = self.kept.saturating_sub(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_and_bytes_are_bounded() {
        let mut b = Budget::default();
        for _ in 0..MAX_ITEMS {
            b.item().unwrap();
        }
        assert_eq!(b.item(), Err(OverBudget));
        b.keep(MAX_KEPT - 1).unwrap();
        assert_eq!(b.keep(2), Err(OverBudget));
        b.release(10);
        b.keep(2).unwrap();
    }
}
