//! Time as core sees it: passed in, never read.
//!
//! [`Instant`] is a point on the runtime's monotonic timeline (time elapsed
//! since the runtime started it at zero). Core never reads a clock: every
//! `handle_*` call takes `now`, tests drive a virtual clock by adding
//! durations, and integer milliseconds make the rate-limit math identical
//! wherever it runs. [`WallClock`] turns an `Instant` into Unix time from one
//! reading of the system clock taken by the runtime at start.

use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point in monotonic time: the duration since the runtime's start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(Duration);

impl Instant {
    /// The runtime's start.
    pub const ZERO: Instant = Instant(Duration::ZERO);

    /// The instant `since_start` after the start.
    pub const fn from_start(since_start: Duration) -> Instant {
        Instant(since_start)
    }

    /// Time since the start.
    pub const fn since_start(self) -> Duration {
        self.0
    }

    /// Whole milliseconds since the start.
    pub fn as_millis(self) -> u64 {
        u64::try_from(self.0.as_millis()).unwrap_or(u64::MAX)
    }

    /// `self - earlier`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_duration_since(earlier)
    }
}

/// Unix time for monotonic instants, from one reading taken at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    unix_ms_at_start: u64,
}

impl WallClock {
    /// `unix_ms_at_start` is the Unix time, in milliseconds, at [`Instant::ZERO`].
    pub fn new(unix_ms_at_start: u64) -> Self {
        WallClock { unix_ms_at_start }
    }

    /// Unix milliseconds at `now`.
    pub fn unix_ms(&self, now: Instant) -> u64 {
        self.unix_ms_at_start.saturating_add(now.as_millis())
    }

    /// Unix nanoseconds at `now` (for spans).
    pub fn unix_ns(&self, now: Instant) -> u64 {
        let since = u64::try_from(now.since_start().as_nanos()).unwrap_or(u64::MAX);
        self.unix_ms_at_start
            .saturating_mul(1_000_000)
            .saturating_add(since)
    }

    /// Unix seconds at `now`.
    pub fn unix_secs(&self, now: Instant) -> u64 {
        self.unix_ms(now) / 1000
    }
}

thread_local! {
    /// The last second formatted by [`rfc3339_ms_cached`] on this thread.
    static RFC3339: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((u64::MAX, String::new())) };
}

/// [`rfc3339_ms`], with the date and time of day formatted once per second
/// per thread.
pub(crate) fn rfc3339_ms_cached(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    RFC3339.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != secs {
            let full = rfc3339_ms(unix_ms);
            *cached = (secs, full[..19].to_owned());
        }
        let mut out = String::with_capacity(24);
        out.push_str(&cached.1);
        let ms = unix_ms % 1000;
        out.push('.');
        out.push((b'0' + (ms / 100) as u8) as char);
        out.push((b'0' + (ms / 10 % 10) as u8) as char);
        out.push((b'0' + (ms % 10) as u8) as char);
        out.push('Z');
        out
    })
}

/// Formats Unix milliseconds as RFC 3339 UTC with milliseconds,
/// e.g. `2026-11-22T03:34:00.123Z`.
pub fn rfc3339_ms(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        unix_ms % 1000
    )
}

thread_local! {
    /// The last second formatted by [`push_http_date`] on this thread.
    static HTTP_DATE: std::cell::RefCell<(u64, String)> = const { std::cell::RefCell::new((u64::MAX, String::new())) };
}

/// Appends the HTTP date of `unix_secs`, formatting each second once per
/// thread (a response head is written many times a second).
pub(crate) fn push_http_date(out: &mut Vec<u8>, unix_secs: u64) {
    HTTP_DATE.with(|cell| {
        let mut cached = cell.borrow_mut();
        if cached.0 != unix_secs {
            *cached = (unix_secs, http_date(unix_secs));
        }
        out.extend_from_slice(cached.1.as_bytes());
    });
}

/// Formats Unix seconds as an HTTP date (IMF-fixdate),
/// e.g. `Sun, 22 Nov 2026 03:34:00 GMT`.
pub(crate) fn http_date(unix_secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = unix_secs / 86_400;
    let (y, m, d) = civil_from_days(days as i64);
    let rem = unix_secs % 86_400;
    format!(
        "{}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// [`parse_rfc3339`] to Unix milliseconds, keeping the first three digits
/// of a fraction (`…:05.123Z`).
pub(crate) fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let secs = parse_rfc3339(s)?;
    let frac = s
        .get(20..)
        .filter(|_| s.as_bytes().get(19) == Some(&b'.'))
        .map_or(0, |f| {
            let digits: Vec<u8> = f.bytes().take_while(u8::is_ascii_digit).take(3).collect();
            let n: u64 = digits.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0'));
            n * 10u64.pow(3 - digits.len() as u32)
        });
    Some(secs * 1000 + frac)
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fff]Z` (or `+00:00`), or a bare date
/// `YYYY-MM-DD` (midnight UTC), to Unix seconds.
pub fn parse_rfc3339(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<u32> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let days = days_from_civil(i64::from(y), m, d);
    let mut secs = 0u64;
    if b.len() > 10 {
        if !matches!(b[10], b'T' | b't' | b' ') || b.len() < 20 || b[13] != b':' || b[16] != b':' {
            return None;
        }
        let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if h > 23 || mi > 59 || se > 60 {
            return None;
        }
        let mut rest = &s[19..];
        if let Some(frac) = rest.strip_prefix('.') {
            let n = frac.bytes().take_while(u8::is_ascii_digit).count();
            if n == 0 {
                return None;
            }
            rest = &frac[n..];
        }
        if !matches!(rest, "Z" | "z" | "+00:00" | "-00:00") {
            return None;
        }
        secs = u64::from(h) * 3600 + u64::from(mi) * 60 + u64::from(se);
    }
    u64::try_from(days).ok().map(|d| d * 86_400 + secs)
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (H. Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) to days since 1970-01-01; inverse of [`civil_from_days`].
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            parse_rfc3339("2026-11-22T03:34:00.123Z"),
            Some(1_795_318_440)
        );
        assert_eq!(parse_rfc3339("2026-11-22T03:34:00Z"), Some(1_795_318_440));
        assert_eq!(
            parse_rfc3339("2026-11-22T03:34:00+00:00"),
            Some(1_795_318_440)
        );
        assert_eq!(parse_rfc3339("2026-11-22"), Some(1_795_305_600));
        for bad in [
            "2026-11-22T03:34:00",
            "2026-13-01",
            "2026-11-22T25:00:00Z",
            "x",
            "2026-11-22T03:34:00.Z",
            "2026-11-22T03:34:00+02:00",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
        assert_eq!(rfc3339_ms(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_795_318_440_123), "2026-11-22T03:34:00.123Z");
    }

    #[test]
    fn cached_rfc3339_matches() {
        for ms in [
            0,
            1_795_318_440_123,
            1_795_318_440_999,
            1_795_318_441_007,
            951_782_400_000,
        ] {
            assert_eq!(rfc3339_ms_cached(ms), rfc3339_ms(ms));
        }
    }

    #[test]
    fn http_dates() {
        assert_eq!(http_date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        let mut out = Vec::new();
        push_http_date(&mut out, 784_111_777);
        push_http_date(&mut out, 784_111_777);
        push_http_date(&mut out, 0);
        assert_eq!(
            out,
            b"Sun, 06 Nov 1994 08:49:37 GMTSun, 06 Nov 1994 08:49:37 GMTThu, 01 Jan 1970 00:00:00 GMT"
        );
    }

    #[test]
    fn days_round_trip() {
        for z in [-800_000i64, -1, 0, 1, 59, 60, 11_016, 20_000, 2_000_000] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
    }

    #[test]
    fn instants_and_wall_clock() {
        let t = Instant::ZERO + Duration::from_millis(1500);
        assert_eq!(t.as_millis(), 1500);
        assert_eq!(t - Instant::ZERO, Duration::from_millis(1500));
        assert_eq!(Instant::ZERO - t, Duration::ZERO);
        let c = WallClock::new(1_000_000);
        assert_eq!(c.unix_ms(t), 1_001_500);
        assert_eq!(c.unix_secs(t), 1001);
    }
}
