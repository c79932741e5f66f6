//! What each key spent, rebuilt from the ledger: the local file (this
//! instance's lines), or PostgreSQL (every instance's, with
//! `--ledger-postgres`). Without Redis it seeds this process's book before
//! serving; with Redis it seeds a key's shared spend when the shared store
//! does not have it (first use of a budget, a new budget, a Redis that lost
//! its data).

use chatgate_core::SpendTally;

use crate::error::Error;

/// Where spend is rebuilt from.
#[derive(Debug, Clone)]
pub(crate) enum SpendSource {
    /// The local ledger file.
    File(String),
    /// The shared ledger's PostgreSQL URL.
    Postgres(String),
}

impl SpendSource {
    /// Every key's spend (or only `key`'s, where the source can filter)
    /// in the periods that hold `unix_ms`, counting only lines before
    /// `before` if given (blocking: call it off the executor).
    pub(crate) fn tally(
        &self,
        unix_ms: u64,
        before: Option<u64>,
        key: Option<&str>,
    ) -> Result<SpendTally, Error> {
        match self {
            SpendSource::File(path) => {
                let mut tally = SpendTally::new(unix_ms);
                if let Some(b) = before {
                    tally.cut_off(b);
                }
                tally_file_into(path, tally, |_| {})
            }
            SpendSource::Postgres(url) => {
                crate::stores::postgres::tally_postgres(url, unix_ms, before, key)
            }
        }
    }
}

/// Sums a ledger file's costs per key and period, and shows `each` line
/// too (the console reads its last day in the same pass). A file that does
/// not exist yet (or is not a regular file) has spent nothing; unreadable
/// lines are skipped (and counted in a warning), as the usage report does.
pub(crate) fn tally_file(
    path: &str,
    unix_ms: u64,
    each: impl FnMut(&[u8]),
) -> Result<SpendTally, Error> {
    tally_file_into(path, SpendTally::new(unix_ms), each)
}

fn tally_file_into(
    path: &str,
    mut tally: SpendTally,
    mut each: impl FnMut(&[u8]),
) -> Result<SpendTally, Error> {
    let unreadable = |source| Error::File {
        what: format!("cannot read the ledger '{path}'"),
        source,
    };
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(tally),
        Err(e) => return Err(unreadable(e)),
    };
    // A ledger that is not a regular file (a pipe, a device) cannot be read
    // back: nothing to rebuild from.
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        tracing::warn!(
            path,
            "the ledger is not a regular file: spend is not rebuilt from it"
        );
        return Ok(tally);
    }
    let reader = std::io::BufReader::with_capacity(1 << 20, f);
    let mut bad = 0u64;
    crate::cli::usage::each_line(reader, |line| {
        each(line);
        if !tally.add_line(line) {
            bad += 1;
        }
    })
    .map_err(unreadable)?;
    if bad > 0 {
        tracing::warn!(
            lines = bad,
            path,
            "ledger lines that could not be read are not counted in the spend"
        );
    }
    Ok(tally)
}
