use super::*;
use crate::time::{days_from_civil, parse_rfc3339};

fn ms(t: &str) -> u64 {
    parse_rfc3339(t).expect("a valid time") * 1000
}

fn budget(usd: f64, period: Period) -> Quota {
    Quota {
        budget: Some(Budget {
            limit_nano: usd_to_nano(usd).unwrap(),
            period,
        }),
        max_in_flight: None,
    }
}

#[test]
fn periods_start_and_reset_in_utc() {
    // 2026-11-25 is a Wednesday.
    let t = ms("2026-11-25T13:45:10Z") + 123;
    assert_eq!(Period::Day.start(t), ms("2026-11-25T00:00:00Z"));
    assert_eq!(Period::Day.reset(t), Some(ms("2026-11-26T00:00:00Z")));
    assert_eq!(Period::Week.start(t), ms("2026-11-23T00:00:00Z"));
    assert_eq!(Period::Week.reset(t), Some(ms("2026-11-30T00:00:00Z")));
    assert_eq!(Period::Month.start(t), ms("2026-11-01T00:00:00Z"));
    assert_eq!(Period::Month.reset(t), Some(ms("2026-12-01T00:00:00Z")));
    assert_eq!(Period::Total.start(t), 0);
    assert_eq!(Period::Total.reset(t), None);
    // December rolls into the next year; February of a leap year.
    let dec = ms("2026-12-31T23:59:59Z");
    assert_eq!(Period::Month.reset(dec), Some(ms("2027-01-01T00:00:00Z")));
    assert_eq!(Period::Week.start(dec), ms("2026-12-28T00:00:00Z"));
    let feb = ms("2028-02-29T12:00:00Z");
    assert_eq!(Period::Month.start(feb), ms("2028-02-01T00:00:00Z"));
    assert_eq!(Period::Month.reset(feb), Some(ms("2028-03-01T00:00:00Z")));
    // A Monday starts its own week; a Sunday belongs to the one before.
    let monday = ms("2026-11-30T00:00:00Z");
    assert_eq!(Period::Week.start(monday), monday);
    assert_eq!(Period::Week.start(monday - 1), ms("2026-11-23T00:00:00Z"));
    // Every day of four years: the week starts on a Monday at most six days
    // before, the month on the first.
    for day in days_from_civil(2026, 1, 1)..days_from_civil(2030, 1, 1) {
        let t = day as u64 * 86_400_000 + 3_600_000;
        let w = Period::Week.start(t) / 86_400_000;
        assert!(day as u64 - w <= 6);
        assert_eq!((w + 3) % 7, 0, "Monday");
        let (_, _, d) = crate::time::civil_from_days(Period::Month.start(t) as i64 / 86_400_000);
        assert_eq!(d, 1);
        assert!(Period::Month.reset(t).unwrap() > t);
    }
    for p in Period::ALL {
        assert_eq!(Period::parse(p.as_str()), Some(p));
    }
    assert_eq!(Period::parse("year"), None);
}

#[test]
fn dollars_are_checked() {
    assert_eq!(usd_to_nano(25.0), Ok(25_000_000_000));
    assert_eq!(usd_to_nano(0.000000001), Ok(1));
    assert_eq!(usd_to_nano(0.0), Ok(0));
    assert!(usd_to_nano(-1.0).unwrap_err().contains("negative"));
    assert!(usd_to_nano(f64::NAN).is_err());
    assert!(usd_to_nano(f64::INFINITY).is_err());
    assert!(usd_to_nano(1e7).unwrap_err().contains("largest"));
}

#[test]
fn reservations_keep_spend_within_the_budget() {
    let book = QuotaBook::new();
    let q = budget(1.0, Period::Day);
    let t = ms("2026-11-25T10:00:00Z");
    // Four requests of 0.3 USD at most: three fit, the fourth does not.
    let a = book.admit("k", &q, 300_000_000, None, t).unwrap();
    let b = book.admit("k", &q, 300_000_000, None, t).unwrap();
    let c = book.admit("k", &q, 300_000_000, None, t).unwrap();
    let QuotaRefusal::Budget(r) = book.admit("k", &q, 300_000_000, None, t).unwrap_err() else {
        panic!("a budget refusal");
    };
    assert_eq!((r.spent, r.reserved, r.cost), (0, 900_000_000, 300_000_000));
    assert_eq!(r.resets_at, Some(ms("2026-11-26T00:00:00Z")));
    let m = r.message("k");
    for needle in [
        "spent 0.000000000 USD of its 1.000000000 USD budget today (UTC)",
        "requests in flight hold 0.900000000 USD",
        "up to 0.300000000 USD",
        "resets at 2026-11-26T00:00:00.000Z",
    ] {
        assert!(m.contains(needle), "{m} lacks {needle}");
    }
    // Settled below the reservation: room again.
    assert_eq!(book.release("k", true, a, 100_000_000, t), 0);
    assert_eq!(book.release("k", true, b, 100_000_000, t), 0);
    let d = book.admit("k", &q, 300_000_000, None, t).unwrap();
    assert_eq!(d, 300_000_000);
    let s = book.status("k", t);
    assert_eq!(s.spent_in(Period::Day), 200_000_000);
    assert_eq!(s.reserved, 600_000_000);
    assert_eq!(s.in_flight, 2);
    // A request that cost more than it reserved is an overshoot.
    assert_eq!(book.release("k", true, c, 450_000_000, t), 150_000_000);
    assert_eq!(book.release("k", true, d, 0, t), 0);
    assert_eq!(book.status("k", t).spent_in(Period::Day), 650_000_000);
    // Other keys are independent; a key without a budget reserves nothing.
    assert_eq!(
        book.admit("other", &Quota::default(), 5_000_000_000, None, t),
        Ok(0)
    );
}

#[test]
fn day_and_month_roll_over_with_the_clock() {
    let book = QuotaBook::new();
    let day = budget(1.0, Period::Day);
    let month = budget(1.5, Period::Month);
    let t = ms("2026-11-30T23:59:59Z");
    let r = book.admit("k", &day, 600_000_000, None, t).unwrap();
    book.release("k", true, r, 600_000_000, t);
    assert!(book.admit("k", &day, 600_000_000, None, t).is_err());
    // A reservation taken before midnight and settled after counts in the
    // new day, where the ledger line's time puts it.
    let held = book.admit("k", &day, 300_000_000, None, t).unwrap();
    let next_day = ms("2026-12-01T00:00:00Z");
    let s = book.status("k", next_day);
    assert_eq!(s.spent_in(Period::Day), 0);
    assert_eq!(s.spent_in(Period::Month), 0, "December began too");
    assert_eq!(s.spent_in(Period::Total), 600_000_000);
    assert_eq!(s.reserved, 300_000_000);
    // The held reservation still counts against the new day.
    assert!(book.admit("k", &day, 800_000_000, None, next_day).is_err());
    book.release("k", true, held, 300_000_000, next_day);
    let r = book.admit("k", &day, 700_000_000, None, next_day).unwrap();
    book.release("k", true, r, 700_000_000, next_day);
    // The month keeps counting across days.
    let later = ms("2026-12-15T12:00:00Z");
    let s = book.status("k", later);
    assert_eq!(s.spent_in(Period::Day), 0);
    assert_eq!(s.spent_in(Period::Month), 1_000_000_000);
    assert!(book.admit("k", &month, 600_000_000, None, later).is_err());
    assert!(book.admit("k", &month, 500_000_000, None, later).is_ok());
    // A clock that goes back does not reopen a period.
    let s = book.status("k", ms("2026-11-30T12:00:00Z"));
    assert_eq!(s.spent_in(Period::Month), 1_000_000_000);
}

#[test]
fn in_flight_caps_and_their_queue() {
    let book = QuotaBook::new();
    let q = Quota {
        budget: None,
        max_in_flight: Some(2),
    };
    let t = 1_000;
    book.admit("k", &q, 0, None, t).unwrap();
    book.admit("k", &q, 0, None, t).unwrap();
    assert_eq!(
        book.admit("k", &q, 0, None, t),
        Err(QuotaRefusal::InFlight { limit: 2 })
    );
    // Two wait, in order.
    let first = book.enqueue("k", t);
    let second = book.enqueue("k", t);
    assert!(book.is_first("k", first, t));
    assert!(!book.is_first("k", second, t));
    book.release("k", false, 0, 0, t);
    // A newcomer does not pass them, nor does the second pass the first.
    assert!(book.admit("k", &q, 0, None, t).is_err());
    assert!(book.admit("k", &q, 0, Some(second), t).is_err());
    book.admit("k", &q, 0, Some(first), t).unwrap();
    assert!(book.is_first("k", second, t));
    book.release("k", false, 0, 0, t);
    // One that gives up leaves the queue.
    book.dequeue("k", second, t);
    assert_eq!(book.status("k", t).queued, 0);
    book.admit("k", &q, 0, None, t).unwrap();
    assert_eq!(book.status("k", t).in_flight, 2);
}

#[test]
fn the_ledger_tally_counts_each_period() {
    let now = ms("2026-11-25T10:00:00Z");
    let mut tally = SpendTally::new(now);
    tally.add("k", ms("2026-11-25T01:00:00Z"), 1);
    tally.add("k", ms("2026-11-24T01:00:00Z"), 10);
    tally.add("k", ms("2026-11-22T01:00:00Z"), 100);
    tally.add("k", ms("2026-10-31T01:00:00Z"), 1000);
    tally.add("other", ms("2026-11-25T02:00:00Z"), 7);
    assert_eq!(tally.get("k"), [1, 11, 111, 1111]);
    assert_eq!(tally.get("other"), [7, 7, 7, 7]);
    assert_eq!(tally.get("none"), [0; 4]);
    let book = QuotaBook::new();
    book.seed("k", tally.get("k"), now);
    assert_eq!(book.status("k", now).spent, [1, 11, 111, 1111]);
}
