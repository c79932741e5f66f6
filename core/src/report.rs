//! Usage reports from the ledger: totals per key and per hour, day or month,
//! fed one line at a time (memory grows with keys × periods, never with the
//! ledger's size), rendered as a table, CSV or JSON. Sums are integers
//! (tokens, nano-dollars), so totals are exact and equal the sum of the
//! lines.

use crate::ledger::Line;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// How rows are grouped in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// `YYYY-MM-DDTHH` (UTC).
    Hour,
    /// `YYYY-MM-DD` (UTC).
    Day,
    /// `YYYY-MM` (UTC).
    Month,
}

impl By {
    /// Parses `hour`, `day` or `month`.
    pub fn parse(s: &str) -> Option<By> {
        match s {
            "hour" => Some(By::Hour),
            "day" => Some(By::Day),
            "month" => Some(By::Month),
            _ => None,
        }
    }

    fn width(self) -> usize {
        match self {
            By::Hour => 13,
            By::Day => 10,
            By::Month => 7,
        }
    }
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// RFC 4180 CSV with a header row.
    Csv,
    /// `{"rows": [...], "total": {...}}`.
    Json,
}

impl Format {
    /// Parses `table`, `csv` or `json`.
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "table" => Some(Format::Table),
            "csv" => Some(Format::Csv),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

/// Which lines count.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only lines at or after this time (RFC 3339 or a date), inclusive.
    pub since: Option<u64>,
    /// Only lines before this time, exclusive.
    pub until: Option<u64>,
    /// Only this key.
    pub key: Option<String>,
}

/// Sums over a group of ledger lines.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Lines.
    pub requests: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens (reasoning included).
    pub completion_tokens: u64,
    /// Reasoning tokens.
    pub reasoning_tokens: u64,
    /// Cached prompt tokens.
    pub cached_tokens: u64,
    /// Streams that ended without `finish_reason`.
    pub incomplete_streams: u64,
    /// Cost, nano-dollars.
    pub cost_nano_usd: u64,
}

impl Totals {
    fn add(&mut self, o: &Totals) {
        self.requests += o.requests;
        self.prompt_tokens += o.prompt_tokens;
        self.completion_tokens += o.completion_tokens;
        self.reasoning_tokens += o.reasoning_tokens;
        self.cached_tokens += o.cached_tokens;
        self.incomplete_streams += o.incomplete_streams;
        self.cost_nano_usd += o.cost_nano_usd;
    }
}

/// A report being built.
#[derive(Debug)]
pub struct Report {
    by: By,
    filter: Filter,
    rows: BTreeMap<(String, String), Totals>,
    /// Lines that could not be read (reported, not counted).
    pub bad_lines: u64,
}

impl Report {
    /// An empty report.
    pub fn new(by: By, filter: Filter) -> Report {
        Report {
            by,
            filter,
            rows: BTreeMap::new(),
            bad_lines: 0,
        }
    }

    /// Adds one ledger line (without its newline). Blank lines are skipped;
    /// unreadable ones are counted in `bad_lines`.
    pub fn add_line(&mut self, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        let Ok(l) = serde_json::from_slice::<Line<'_>>(line) else {
            self.bad_lines += 1;
            return;
        };
        self.add_row(
            l.ts,
            &l.key,
            l.stream,
            l.complete,
            l.status,
            [
                l.prompt_tokens,
                l.completion_tokens,
                l.reasoning_tokens,
                l.cached_tokens,
                l.cost_nano_usd,
            ],
        );
    }

    /// Adds one record read from elsewhere (a database row): `ts` in RFC
    /// 3339; `counts` are prompt, completion, reasoning and cached tokens
    /// and the cost in nano-dollars.
    pub fn add_row(
        &mut self,
        ts: &str,
        key: &str,
        stream: bool,
        complete: bool,
        status: u16,
        counts: [u64; 5],
    ) {
        let Some(at) = crate::time::parse_rfc3339(ts) else {
            self.bad_lines += 1;
            return;
        };
        if self.filter.since.is_some_and(|s| at < s) || self.filter.until.is_some_and(|u| at >= u) {
            return;
        }
        if self.filter.key.as_deref().is_some_and(|k| k != key) {
            return;
        }
        let period = ts.get(..self.by.width()).unwrap_or(ts);
        let [
            prompt_tokens,
            completion_tokens,
            reasoning_tokens,
            cached_tokens,
            cost_nano_usd,
        ] = counts;
        let t = Totals {
            requests: 1,
            prompt_tokens,
            completion_tokens,
            reasoning_tokens,
            cached_tokens,
            incomplete_streams: u64::from(stream && !complete && status == 200),
            cost_nano_usd,
        };
        match self.rows.get_mut(&(key.to_owned(), period.to_owned())) {
            Some(row) => row.add(&t),
            None => {
                self.rows.insert((key.to_owned(), period.to_owned()), t);
            }
        }
    }

    /// The rows: (key, period, totals), by key then period.
    pub fn rows(&self) -> impl Iterator<Item = (&str, &str, &Totals)> {
        self.rows
            .iter()
            .map(|((k, p), t)| (k.as_str(), p.as_str(), t))
    }

    /// The sum of every row.
    pub fn total(&self) -> Totals {
        let mut t = Totals::default();
        for row in self.rows.values() {
            t.add(row);
        }
        t
    }

    /// Renders the report.
    pub fn render(&self, format: Format) -> String {
        let mut out = String::new();
        let period = match self.by {
            By::Hour => "hour",
            By::Day => "day",
            By::Month => "month",
        };
        let columns = [
            "key",
            period,
            "requests",
            "prompt_tokens",
            "completion_tokens",
            "reasoning_tokens",
            "cached_tokens",
            "incomplete_streams",
            "cost_usd",
        ];
        let cells = |key: &str, p: &str, t: &Totals| -> [String; 9] {
            [
                key.to_owned(),
                p.to_owned(),
                t.requests.to_string(),
                t.prompt_tokens.to_string(),
                t.completion_tokens.to_string(),
                t.reasoning_tokens.to_string(),
                t.cached_tokens.to_string(),
                t.incomplete_streams.to_string(),
                usd(t.cost_nano_usd),
            ]
        };
        let total = self.total();
        match format {
            Format::Csv => {
                let _ = writeln!(out, "{}", columns.join(","));
                for (k, p, t) in self.rows() {
                    let c = cells(k, p, t);
                    let _ = writeln!(out, "{}", c.map(|v| csv_field(&v)).join(","));
                }
                let _ = writeln!(out, "{}", cells("TOTAL", "", &total).join(","));
            }
            Format::Json => {
                // By hand: `cost_usd` is an exact decimal literal, which a
                // float would not keep.
                let obj = |out: &mut String, row: Option<(&str, &str)>, t: &Totals| {
                    out.push('{');
                    if let Some((k, p)) = row {
                        let key = serde_json::to_string(k).unwrap_or_default();
                        let _ = write!(out, "\"key\":{key},\"{period}\":\"{p}\",");
                    }
                    let _ = write!(
                        out,
                        "\"requests\":{},\"prompt_tokens\":{},\"completion_tokens\":{},\"reasoning_tokens\":{},\"cached_tokens\":{},\"incomplete_streams\":{},\"cost_usd\":{},\"cost_nano_usd\":{}}}",
                        t.requests,
                        t.prompt_tokens,
                        t.completion_tokens,
                        t.reasoning_tokens,
                        t.cached_tokens,
                        t.incomplete_streams,
                        usd(t.cost_nano_usd),
                        t.cost_nano_usd
                    );
                };
                let _ = write!(out, "{{\"by\":\"{period}\",\"rows\":[");
                for (i, (k, p, t)) in self.rows().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    obj(&mut out, Some((k, p)), t);
                }
                out.push_str("],\"total\":");
                obj(&mut out, None, &total);
                out.push_str("}\n");
            }
            Format::Table => {
                let mut table: Vec<[String; 9]> = vec![columns.map(str::to_owned)];
                table.extend(self.rows().map(|(k, p, t)| cells(k, p, t)));
                table.push(cells("TOTAL", "", &total));
                aligned(&mut out, &table, 2);
            }
        }
        out
    }
}

/// Aligned columns: the first `left` to the left, numbers to the right.
fn aligned<const N: usize>(out: &mut String, table: &[[String; N]], left: usize) {
    let mut widths = [0usize; N];
    for r in table {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in table {
        let mut line = String::new();
        for (i, (c, w)) in r.iter().zip(widths).enumerate() {
            if i < left {
                let _ = write!(line, "{c:<w$}  ");
            } else {
                let _ = write!(line, "{c:>w$}  ");
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// One key's budget and what it spent in the current period
/// (`usage --budgets`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetRow {
    /// The key's name.
    pub key: String,
    /// Its budget.
    pub budget: crate::quota::Budget,
    /// Metered spend in the budget's current period, nano-dollars.
    pub spent_nano: u64,
}

/// Renders each key's budget, spend and what remains in the period that
/// holds `unix_ms` (when it started and when it resets). Spend past the
/// budget (the overshoot of requests without `max_tokens`) leaves nothing
/// remaining and shows in `spent_usd`.
pub fn render_budgets(rows: &[BudgetRow], unix_ms: u64, format: Format) -> String {
    let mut out = String::new();
    let columns = [
        "key",
        "period",
        "started",
        "resets",
        "budget_usd",
        "spent_usd",
        "remaining_usd",
    ];
    let second = |ms: u64| {
        let t = crate::time::rfc3339_ms(ms);
        format!("{}Z", &t[..19])
    };
    let cells = |r: &BudgetRow| -> [String; 7] {
        let p = r.budget.period;
        [
            r.key.clone(),
            p.as_str().to_owned(),
            // `total` has neither a start nor a reset.
            p.reset(unix_ms)
                .map_or_else(|| "-".to_owned(), |_| second(p.start(unix_ms))),
            p.reset(unix_ms).map_or_else(|| "-".to_owned(), second),
            usd(r.budget.limit_nano),
            usd(r.spent_nano),
            usd(r.budget.limit_nano.saturating_sub(r.spent_nano)),
        ]
    };
    match format {
        Format::Csv => {
            let _ = writeln!(out, "{}", columns.join(","));
            for r in rows {
                let _ = writeln!(out, "{}", cells(r).map(|v| csv_field(&v)).join(","));
            }
        }
        Format::Json => {
            let _ = write!(
                out,
                "{{\"as_of\":\"{}\",\"budgets\":[",
                crate::time::rfc3339_ms(unix_ms)
            );
            for (i, r) in rows.iter().enumerate() {
                let [key, period, started, resets, budget, spent, remaining] = cells(r);
                if i > 0 {
                    out.push(',');
                }
                let time = |t: String| {
                    if t == "-" {
                        "null".to_owned()
                    } else {
                        format!("\"{t}\"")
                    }
                };
                let (started, resets) = (time(started), time(resets));
                let _ = write!(
                    out,
                    "{{\"key\":{},\"period\":\"{period}\",\"started\":{started},\"resets\":{resets},\
                     \"budget_usd\":{budget},\"spent_usd\":{spent},\"remaining_usd\":{remaining},\
                     \"budget_nano_usd\":{},\"spent_nano_usd\":{}}}",
                    serde_json::to_string(&key).unwrap_or_default(),
                    r.budget.limit_nano,
                    r.spent_nano
                );
            }
            out.push_str("]}\n");
        }
        Format::Table => {
            let mut table: Vec<[String; 7]> = vec![columns.map(str::to_owned)];
            table.extend(rows.iter().map(cells));
            aligned(&mut out, &table, 4);
        }
    }
    out
}

/// Nano-dollars as an exact decimal with nine places.
pub fn usd(nano: u64) -> String {
    format!("{}.{:09}", nano / 1_000_000_000, nano % 1_000_000_000)
}

fn csv_field(v: &str) -> String {
    if v.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(
        ts: &str,
        key: &str,
        prompt: u64,
        completion: u64,
        cost: u64,
        stream: bool,
        complete: bool,
    ) -> String {
        format!(
            r#"{{"ts":"{ts}","request_id":"r","key":"{key}","model":"m","stream":{stream},"status":200,"prompt_tokens":{prompt},"completion_tokens":{completion},"reasoning_tokens":1,"cached_tokens":0,"cost_usd":0,"cost_nano_usd":{cost},"finish_reason":null,"complete":{complete},"client_disconnected":false}}"#
        )
    }

    fn sample(by: By, filter: Filter) -> Report {
        let mut r = Report::new(by, filter);
        for l in [
            line(
                "2026-11-21T23:59:59.999Z",
                "alice",
                10,
                20,
                313_500,
                false,
                true,
            ),
            line(
                "2026-11-22T00:00:00.000Z",
                "alice",
                1,
                2,
                31_350,
                true,
                false,
            ),
            line("2026-11-22T10:30:00.000Z", "bob", 5, 5, 85_500, true, true),
            line(
                "2026-12-01T00:00:00.000Z",
                "alice",
                1,
                1,
                17_100,
                false,
                true,
            ),
        ] {
            r.add_line(l.as_bytes());
        }
        r.add_line(b"");
        r.add_line(b"not json");
        r
    }

    #[test]
    fn groups_filters_and_sums_exactly() {
        let r = sample(By::Day, Filter::default());
        assert_eq!(r.bad_lines, 1);
        let rows: Vec<_> = r.rows().map(|(k, p, t)| (k, p, t.requests)).collect();
        assert_eq!(
            rows,
            [
                ("alice", "2026-11-21", 1),
                ("alice", "2026-11-22", 1),
                ("alice", "2026-12-01", 1),
                ("bob", "2026-11-22", 1)
            ]
        );
        let t = r.total();
        assert_eq!(
            (t.requests, t.prompt_tokens, t.incomplete_streams),
            (4, 17, 1)
        );
        assert_eq!(t.cost_nano_usd, 447_450);
        let m = sample(By::Month, Filter::default());
        assert_eq!(m.rows().count(), 3);
        let f = sample(
            By::Day,
            Filter {
                since: crate::time::parse_rfc3339("2026-11-22"),
                until: crate::time::parse_rfc3339("2026-12-01"),
                key: Some("alice".into()),
            },
        );
        assert_eq!(f.total().requests, 1);
    }

    #[test]
    fn renders_every_format() {
        let r = sample(By::Hour, Filter::default());
        let csv = r.render(Format::Csv);
        assert!(csv.starts_with("key,hour,requests,"), "{csv}");
        assert!(
            csv.contains("\nTOTAL,,4,17,28,4,0,1,0.000447450\n"),
            "{csv}"
        );
        let json: serde_json::Value = serde_json::from_str(&r.render(Format::Json)).unwrap();
        assert_eq!(json["total"]["cost_nano_usd"], 447_450);
        assert_eq!(json["rows"][3]["key"], "bob");
        assert_eq!(json["rows"][3]["hour"], "2026-11-22T10");
        let table = r.render(Format::Table);
        assert!(
            table.lines().last().unwrap().starts_with("TOTAL"),
            "{table}"
        );
        assert_eq!(usd(1_000_000_001), "1.000000001");
    }

    #[test]
    fn renders_budgets_with_their_periods() {
        use crate::quota::{Budget, Period};
        let now = crate::time::parse_rfc3339("2026-11-25T13:00:00Z").unwrap() * 1000;
        let row = |key: &str, usd: u64, period, spent_nano| BudgetRow {
            key: key.into(),
            budget: Budget {
                limit_nano: usd * 1_000_000_000,
                period,
            },
            spent_nano,
        };
        let rows = [
            row("alice", 5, Period::Week, 1_234_567),
            row("carol", 1, Period::Total, 1_500_000_000),
        ];
        let csv = render_budgets(&rows, now, Format::Csv);
        assert_eq!(
            csv,
            "key,period,started,resets,budget_usd,spent_usd,remaining_usd\n\
             alice,week,2026-11-23T00:00:00Z,2026-11-30T00:00:00Z,5.000000000,0.001234567,4.998765433\n\
             carol,total,-,-,1.000000000,1.500000000,0.000000000\n"
        );
        let text = render_budgets(&rows, now, Format::Json);
        assert!(text.contains(r#""remaining_usd":0.000000000,"#), "{text}");
        let j: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(j["as_of"], "2026-11-25T13:00:00.000Z");
        assert_eq!(j["budgets"][0]["spent_nano_usd"], 1_234_567);
        assert_eq!(j["budgets"][1]["resets"], serde_json::Value::Null);
        let table = render_budgets(&rows, now, Format::Table);
        assert!(table.starts_with("key    period  started"), "{table}");
        assert_eq!(
            render_budgets(&[], now, Format::Json),
            "{\"as_of\":\"2026-11-25T13:00:00.000Z\",\"budgets\":[]}\n"
        );
    }
}
