//! Budget periods: a UTC day, an ISO week (from Monday), a UTC calendar
//! month, or no period at all (`total`). Time comes in as Unix
//! milliseconds.

use crate::time::{civil_from_days, days_from_civil};

const DAY_MS: u64 = 86_400_000;

/// The period a budget applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Period {
    /// A UTC day, from midnight.
    Day,
    /// An ISO week: Monday 00:00 UTC to the next Monday.
    Week,
    /// A UTC calendar month, from the first day's midnight.
    Month,
    /// Everything ever spent: the budget never resets.
    Total,
}

impl Period {
    /// Every period, in the order the spend table keeps them.
    pub const ALL: [Period; 4] = [Period::Day, Period::Week, Period::Month, Period::Total];

    /// `day`, `week`, `month` or `total` (as written in the keys file).
    pub fn parse(s: &str) -> Option<Period> {
        Some(match s {
            "day" => Period::Day,
            "week" => Period::Week,
            "month" => Period::Month,
            "total" => Period::Total,
            _ => return None,
        })
    }

    /// Its name in the keys file.
    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Total => "total",
        }
    }

    /// Its place in [`Period::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The start (Unix ms) of the period that holds `unix_ms`; 0 for
    /// `total`.
    pub fn start(self, unix_ms: u64) -> u64 {
        let day = unix_ms / DAY_MS;
        match self {
            Period::Day => day * DAY_MS,
            // 1970-01-01 was a Thursday: three days after a Monday.
            Period::Week => day.saturating_sub((day + 3) % 7) * DAY_MS,
            Period::Month => {
                let (y, m, _) = civil_from_days(day as i64);
                days_from_civil(y, m, 1) as u64 * DAY_MS
            }
            Period::Total => 0,
        }
    }

    /// When the period that holds `unix_ms` ends and the next begins (Unix
    /// ms); `None` for `total`.
    pub fn reset(self, unix_ms: u64) -> Option<u64> {
        let start = self.start(unix_ms);
        Some(match self {
            Period::Day => start + DAY_MS,
            Period::Week => start + 7 * DAY_MS,
            Period::Month => {
                let (y, m, _) = civil_from_days((start / DAY_MS) as i64);
                let (y, m) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
                days_from_civil(y, m, 1) as u64 * DAY_MS
            }
            Period::Total => return None,
        })
    }

    /// "this day", "this week", … for messages.
    pub fn phrase(self) -> &'static str {
        match self {
            Period::Day => "today (UTC)",
            Period::Week => "this week (UTC, from Monday)",
            Period::Month => "this month (UTC)",
            Period::Total => "in total",
        }
    }
}

impl std::fmt::Display for Period {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
