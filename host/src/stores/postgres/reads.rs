//! What is read back from the shared ledger: `usage --postgres`, the
//! console's figures of every instance, and spend rebuilt for the shared
//! limiter. What only reads changes no schema (a read-only replica, a
//! role that may only `SELECT`), and a column of another type than the
//! ledger's (a table made by hand) is an error naming it, never a panic.

use postgres::Row;
use postgres::types::FromSql;

use super::connection::{failed, open_plain};
use super::shipper::connect;
use crate::error::Error;

/// Column `i` of a row of the ledger.
fn column<'a, T: FromSql<'a>>(row: &'a Row, i: usize) -> Result<T, Error> {
    super::connection::column(row, i, "chatgate_ledger")
}

/// A count or sum read as a non-negative integer.
fn count(row: &Row, i: usize) -> Result<u64, Error> {
    Ok(column::<i64>(row, i)?.max(0) as u64)
}

/// `usage --postgres URL`: feeds the table's rows, in the filter's time
/// range, to `report` (streamed with a server-side cursor).
pub(crate) fn report_from_postgres(
    url: &str,
    report: &mut chatgate_core::report::Report,
    since: Option<u64>,
    until: Option<u64>,
) -> Result<(), Error> {
    let mut c = open_plain(url)?;
    let mut tx = c.transaction().map_err(failed)?;
    let since = since.map_or(i64::MIN / 1000, |s| s as i64);
    let until = until.map_or(i64::MAX / 1000, |u| u as i64);
    let portal = tx
        .bind(
            "SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), key, stream, complete, status::int, \
             prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens, cost_nano_usd \
             FROM chatgate_ledger WHERE ts >= to_timestamp($1::bigint) AND ts < to_timestamp($2::bigint)",
            &[&since.max(-62_135_596_800), &until.min(253_402_300_799)],
        )
        .map_err(failed)?;
    loop {
        let rows = tx.query_portal(&portal, 10_000).map_err(failed)?;
        if rows.is_empty() {
            break;
        }
        for r in rows {
            let n = |i: usize| count(&r, i);
            report.add_row(
                column::<&str>(&r, 0)?,
                column::<&str>(&r, 1)?,
                column(&r, 2)?,
                column(&r, 3)?,
                column::<i32>(&r, 4)?.clamp(0, i32::from(u16::MAX)) as u16,
                [n(5)?, n(6)?, n(7)?, n(8)?, n(9)?],
            );
        }
    }
    Ok(())
}

/// A connection to the shared ledger (its table created when missing).
pub(crate) fn connect_ledger(url: &str) -> Result<postgres::Client, Error> {
    connect(url)
}

/// Each key's tally since `since_ms` (midnight UTC: the console's "today"),
/// summed by PostgreSQL over the shared ledger, every instance's lines.
pub(crate) fn tallies_since(
    c: &mut postgres::Client,
    since_ms: u64,
) -> Result<std::collections::HashMap<String, chatgate_core::console::Tally>, Error> {
    let rows = c
        .query(
            "SELECT key, count(*), \
               COALESCE(SUM(prompt_tokens), 0)::bigint, COALESCE(SUM(completion_tokens), 0)::bigint, \
               COALESCE(SUM(reasoning_tokens), 0)::bigint, COALESCE(SUM(cached_tokens), 0)::bigint, \
               COALESCE(SUM(cost_nano_usd), 0)::bigint, \
               count(*) FILTER (WHERE error = 'rate_limit_exceeded'), \
               count(*) FILTER (WHERE error = 'insufficient_quota'), \
               count(*) FILTER (WHERE status >= 500 AND error IS DISTINCT FROM 'rate_limit_exceeded' \
                                AND error IS DISTINCT FROM 'insufficient_quota'), \
               count(*) FILTER (WHERE served_model IS NOT NULL) \
             FROM chatgate_ledger WHERE ts >= to_timestamp($1::bigint / 1000.0) GROUP BY key",
            &[&i64::try_from(since_ms).unwrap_or(i64::MAX)],
        )
        .map_err(failed)?;
    rows.iter()
        .map(|r| {
            let n = |i: usize| count(r, i);
            let tally = chatgate_core::console::Tally {
                requests: n(1)?,
                prompt_tokens: n(2)?,
                completion_tokens: n(3)?,
                reasoning_tokens: n(4)?,
                cached_tokens: n(5)?,
                cost_nano_usd: n(6)?,
                rate_limited: n(7)?,
                budget_refused: n(8)?,
                errors: n(9)?,
                fallbacks: n(10)?,
            };
            Ok((column::<String>(r, 0)?, tally))
        })
        .collect()
}

/// Every key's spend (or only `key`'s) in the periods that hold
/// `unix_ms`, summed by PostgreSQL over the shared ledger (one query, on
/// a connection of its own that changes no schema: a tally must not queue
/// behind, or in front of, the shippers' inserts).
pub(crate) fn tally_postgres(
    url: &str,
    unix_ms: u64,
    before: Option<u64>,
    key: Option<&str>,
) -> Result<chatgate_core::SpendTally, Error> {
    let unreadable = |e: &dyn std::fmt::Display| {
        Error::Postgres(format!("cannot read the ledger from PostgreSQL: {e}"))
    };
    let mut tally = chatgate_core::SpendTally::new(unix_ms);
    let [day, week, month, _] = tally.starts().map(|ms| (ms / 1000) as i64);
    // Lines before the cut-off only (a rebuild after a failover), to the
    // millisecond as the ledger's `ts`; none: all of them.
    let before = before.map_or(i64::MAX, |b| b.min(i64::MAX as u64) as i64);
    let mut c = open_plain(url).map_err(|e| unreadable(&e))?;
    let read = c
        .query(
            "SELECT key, \
               COALESCE(SUM(GREATEST(cost_nano_usd, charged_nano_usd)) FILTER (WHERE ts >= to_timestamp($1::bigint)), 0)::bigint, \
               COALESCE(SUM(GREATEST(cost_nano_usd, charged_nano_usd)) FILTER (WHERE ts >= to_timestamp($2::bigint)), 0)::bigint, \
               COALESCE(SUM(GREATEST(cost_nano_usd, charged_nano_usd)) FILTER (WHERE ts >= to_timestamp($3::bigint)), 0)::bigint, \
               COALESCE(SUM(GREATEST(cost_nano_usd, charged_nano_usd)), 0)::bigint \
             FROM chatgate_ledger \
             WHERE ($4::bigint = 9223372036854775807 OR ts < to_timestamp($4::bigint::float8 / 1000)) \
               AND ($5::text IS NULL OR key = $5::text) \
             GROUP BY key",
            &[&day, &week, &month, &before, &key],
        );
    let rows = match read {
        Ok(rows) => rows,
        // No instance has shipped a line yet (the first shipper creates
        // the table, and may be a moment behind this instance's first
        // request): nothing was spent.
        Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) => {
            return Ok(tally);
        }
        Err(e) => return Err(unreadable(&super::connection::describe(&e))),
    };
    for r in rows {
        let n = |i: usize| count(&r, i);
        tally
            .keys
            .insert(column(&r, 0)?, [n(1)?, n(2)?, n(3)?, n(4)?]);
    }
    Ok(tally)
}
