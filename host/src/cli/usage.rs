//! The `usage` command: a report from the ledger, read as a stream (memory stays flat
//! whatever the ledger's size); the grouping and sums are
//! `chatgate_core::report`.

use std::io::BufRead;

use chatgate_core::SpendTally;
use chatgate_core::report::{By, Filter, Format, Report};
use std::process::ExitCode;

use clap::ArgMatches;

use super::*;

/// Reads `path` (or stdin for `-`) and renders the report.
pub(crate) fn report(path: &str, by: By, filter: Filter, format: Format) -> Result<String, Error> {
    let mut r = Report::new(by, filter);
    each_line(open(path)?, |l| r.add_line(l)).map_err(|e| unreadable(path, e))?;
    warn_bad(r.bad_lines);
    Ok(r.render(format))
}

/// Reads `path` (or stdin for `-`) into a spend tally of the periods that
/// hold `unix_ms` (`usage --budgets`).
pub(crate) fn tally(path: &str, unix_ms: u64) -> Result<SpendTally, Error> {
    let mut t = SpendTally::new(unix_ms);
    let mut bad = 0;
    each_line(open(path)?, |l| {
        if !t.add_line(l) {
            bad += 1;
        }
    })
    .map_err(|e| unreadable(path, e))?;
    warn_bad(bad);
    Ok(t)
}

fn open(path: &str) -> Result<Box<dyn BufRead>, Error> {
    Ok(if path == "-" {
        Box::new(std::io::BufReader::with_capacity(1 << 20, std::io::stdin()))
    } else {
        let f = std::fs::File::open(path).map_err(|e| unreadable(path, e))?;
        Box::new(std::io::BufReader::with_capacity(1 << 20, f))
    })
}

fn unreadable(path: &str, source: std::io::Error) -> Error {
    Error::File {
        what: format!("cannot read the ledger '{path}'"),
        source,
    }
}

fn warn_bad(lines: u64) {
    if lines > 0 {
        eprintln!("warning: {lines} ledger line(s) could not be read and are not counted");
    }
}

/// Calls `f` with every line of a ledger (without its newline), streamed.
pub(crate) fn each_line(mut reader: impl BufRead, mut f: impl FnMut(&[u8])) -> std::io::Result<()> {
    let mut line = Vec::with_capacity(1024);
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        f(line.strip_suffix(b"\n").unwrap_or(&line));
    }
}

pub(super) fn usage(m: &ArgMatches) -> ExitCode {
    use chatgate_core::report::{By, Filter, Format};
    let path = m.get_one::<String>("ledger").expect("defaulted");
    let by = By::parse(m.get_one::<String>("by").expect("defaulted")).expect("checked by clap");
    let format =
        Format::parse(m.get_one::<String>("format").expect("defaulted")).expect("checked by clap");
    let time = |flag: &str| -> Result<Option<u64>, Error> {
        match m.get_one::<String>(flag) {
            None => Ok(None),
            Some(t) => chatgate_core::parse_rfc3339(t).map(Some).ok_or_else(|| {
                Error::Config(format!(
                    "--{flag} '{t}' is not a time like 2026-11-22 or 2026-11-22T10:00:00Z"
                ))
            }),
        }
    };
    let filter = match (time("since"), time("until")) {
        (Ok(since), Ok(until)) => Filter {
            since,
            until,
            key: m.get_one::<String>("key").cloned(),
        },
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    if m.get_flag("budgets") {
        return match budgets(m, filter.key.as_deref(), format) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        };
    }
    if let Some(url) = m.get_one::<String>("postgres") {
        let (since, until) = (filter.since, filter.until);
        let mut report = chatgate_core::report::Report::new(by, filter);
        return match crate::stores::postgres::report_from_postgres(url, &mut report, since, until) {
            Ok(()) => {
                print!("{}", report.render(format));
                ExitCode::SUCCESS
            }
            Err(e) => fail(format!("cannot read the ledger from PostgreSQL: {e}")),
        };
    }
    match crate::cli::usage::report(path, by, filter, format) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `usage --budgets`: the keys file's budgets (with the gateway's
/// defaults), and the spend of their current periods from the ledger the
/// gateway rebuilds its spend from (the file, or PostgreSQL).
pub(super) fn budgets(
    m: &ArgMatches,
    only: Option<&str>,
    format: chatgate_core::report::Format,
) -> Result<String, Error> {
    use chatgate_core::report::{BudgetRow, render_budgets};
    use chatgate_core::{Budget, KeyDefaults, KeyTable, Period};
    let path = m.get_one::<String>("keys").expect("required by --budgets");
    let period = m
        .get_one::<String>("default-budget-period")
        .expect("defaulted");
    let mut defaults = KeyDefaults {
        budget_period: Period::parse(period).expect("checked by clap"),
        ..KeyDefaults::default()
    };
    if let Some(usd) = m.get_one::<String>("default-budget-usd") {
        let limit_nano = usd
            .trim()
            .parse::<f64>()
            .map_err(|_| "not a number".to_owned())
            .and_then(chatgate_core::usd_to_nano)
            .map_err(|why| {
                Error::Config(format!(
                    "--default-budget-usd '{usd}' is not an amount: {why}"
                ))
            })?;
        defaults.quota.budget = Some(Budget {
            limit_nano,
            period: defaults.budget_period,
        });
    }
    let text = std::fs::read_to_string(path).map_err(|source| Error::File {
        what: format!("cannot read the keys file '{path}'"),
        source,
    })?;
    let keys = KeyTable::parse_toml(&text, defaults)
        .map_err(|e| Error::Config(format!("{e} ({path})")))?;
    let now = now_unix_ms();
    let tally = match m.get_one::<String>("postgres") {
        Some(url) => crate::stores::postgres::tally_postgres(url, now, None, None)?,
        None => {
            let ledger = m.get_one::<String>("ledger").expect("defaulted");
            crate::cli::usage::tally(ledger, now)?
        }
    };
    let rows: Vec<BudgetRow> = keys
        .entries()
        .iter()
        // A rotated key's old secret (it expires) shares its name and budget.
        .filter(|e| e.expires.is_none() && only.is_none_or(|k| k == e.name))
        .filter_map(|e| {
            let budget = e.quota.budget?;
            Some(BudgetRow {
                key: e.name.clone(),
                budget,
                spent_nano: tally.get(&e.name)[budget.period.index()],
            })
        })
        .collect();
    Ok(render_budgets(&rows, now, format))
}
