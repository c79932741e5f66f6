//! The `usage` command: a report from the ledger, read as a stream (memory stays flat
//! whatever the ledger's size); the grouping and sums are
//! `chatgate_core::report`.

use std::io::BufRead;

use chatgate_core::SpendTally;
use chatgate_core::report::{By, Filter, Format, Report};

/// Reads `path` (or stdin for `-`) and renders the report.
pub(crate) fn report(path: &str, by: By, filter: Filter, format: Format) -> Result<String, String> {
    let mut r = Report::new(by, filter);
    each_line(open(path)?, |l| r.add_line(l))
        .map_err(|e| format!("cannot read the ledger '{path}': {e}"))?;
    warn_bad(r.bad_lines);
    Ok(r.render(format))
}

/// Reads `path` (or stdin for `-`) into a spend tally of the periods that
/// hold `unix_ms` (`usage --budgets`).
pub(crate) fn tally(path: &str, unix_ms: u64) -> Result<SpendTally, String> {
    let mut t = SpendTally::new(unix_ms);
    let mut bad = 0;
    each_line(open(path)?, |l| {
        if !t.add_line(l) {
            bad += 1;
        }
    })
    .map_err(|e| format!("cannot read the ledger '{path}': {e}"))?;
    warn_bad(bad);
    Ok(t)
}

fn open(path: &str) -> Result<Box<dyn BufRead>, String> {
    Ok(if path == "-" {
        Box::new(std::io::BufReader::with_capacity(1 << 20, std::io::stdin()))
    } else {
        let f = std::fs::File::open(path)
            .map_err(|e| format!("cannot read the ledger '{path}': {e}"))?;
        Box::new(std::io::BufReader::with_capacity(1 << 20, f))
    })
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
