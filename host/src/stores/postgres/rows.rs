//! The ledger's rows: a batch of records inserted in one transaction; a
//! batch PostgreSQL refuses for what a row holds inserted row by row, the
//! refused rows set aside, so that one row never stops the ones after it.
//!
//! PostgreSQL's `text` cannot hold NUL (`\u0000`, which a provider's
//! `finish_reason` or a model name may carry, and the local ledger keeps
//! escaped): a NUL is stored as U+FFFD, and the row said to be repaired.

use std::borrow::Cow;

use chatgate_core::LedgerRecord;

use super::connection::{Schema, describe, failed, is_row_fault};
use crate::error::Error;

/// What an insert did besides inserting.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Inserted {
    /// Request ids of the rows stored with U+FFFD for NUL.
    pub(crate) repaired: Vec<String>,
    /// Request ids of the rows PostgreSQL refused, and why: set aside, not
    /// stored (the local ledger has them).
    pub(crate) set_aside: Vec<(String, String)>,
}

/// The ledger's table: `ledger.sql`, probed for every column the rows
/// have and its indexes.
pub(super) const SCHEMA: Schema = Schema {
    sql: include_str!("../../../ledger.sql"),
    probe: "SELECT request_id, ts, key, model, stream, status, prompt_tokens, completion_tokens, \
        reasoning_tokens, cached_tokens, cost_nano_usd, finish_reason, complete, \
        client_disconnected, upstream_status, endpoint, attempts, error, duration_ms, ttfb_ms, \
        provider_request_id, usage_missing, charged_nano_usd, api, served_model \
        FROM chatgate_ledger LIMIT 0; \
        SELECT 'chatgate_ledger_key_ts'::regclass, 'chatgate_ledger_ts'::regclass",
    // "chatgate" in ASCII.
    lock: 0x0063_6861_7467_6174,
    file: "ledger.sql",
};

const COLUMNS: usize = 25;
/// The insert's head: its `COLUMNS` columns, in the order of the
/// parameters.
const INSERT: &str = "INSERT INTO chatgate_ledger (request_id, ts, key, model, stream, status, \
    prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens, cost_nano_usd, \
    finish_reason, complete, client_disconnected, upstream_status, endpoint, attempts, error, \
    duration_ms, ttfb_ms, provider_request_id, usage_missing, charged_nano_usd, api, \
    served_model) VALUES ";
/// The columns whose parameter is cast (1-based), and how.
const CASTS: [(usize, &str); 3] = [
    (2, "::text::timestamptz"),
    (6, "::int::smallint"),
    (15, "::int::smallint"),
];

/// The `VALUES` tuples of `rows` rows: `COLUMNS` numbered parameters each,
/// cast where the column needs it.
fn push_values(sql: &mut String, rows: usize) {
    use std::fmt::Write as _;
    for i in 0..rows {
        sql.push_str(if i == 0 { "(" } else { ",(" });
        for k in 1..=COLUMNS {
            if k > 1 {
                sql.push_str(", ");
            }
            let _ = write!(sql, "${}", i * COLUMNS + k);
            if let Some((_, cast)) = CASTS.iter().find(|(at, _)| *at == k) {
                sql.push_str(cast);
            }
        }
        sql.push(')');
    }
}

/// `records` inserted (those already there left as they are): in one
/// transaction, or, when PostgreSQL refuses what a row holds, one by one,
/// the refused ones set aside. `Err` for a failure of the connection's (the
/// same rows are sent again once it is back).
pub(crate) fn insert(
    c: &mut postgres::Client,
    records: &[LedgerRecord],
) -> Result<Inserted, Error> {
    let mut done = Inserted::default();
    let stored: Vec<Cow<'_, LedgerRecord>> = records
        .iter()
        .map(|r| {
            let s = storable(r);
            if let Cow::Owned(_) = s {
                done.repaired.push(r.request_id.clone());
            }
            s
        })
        .collect();
    let stored: Vec<&LedgerRecord> = stored.iter().map(|r| &**r).collect();
    match insert_batch(c, &stored) {
        Ok(()) => return Ok(done),
        Err(e) if !is_row_fault(&e) => return Err(failed(e)),
        Err(_) => {}
    }
    // A row the server refuses: each on its own, so that the others go.
    for r in stored {
        match insert_batch(c, &[r]) {
            Ok(()) => {}
            Err(e) if is_row_fault(&e) => done.set_aside.push((r.request_id.clone(), describe(&e))),
            Err(e) => return Err(failed(e)),
        }
    }
    Ok(done)
}

/// `r` as PostgreSQL's `text` columns can hold it: a NUL anywhere in its
/// strings replaced by U+FFFD (borrowed when there is none).
fn storable(r: &LedgerRecord) -> Cow<'_, LedgerRecord> {
    let nul = |s: &str| s.contains('\0');
    let opt = |s: &Option<String>| s.as_deref().is_some_and(nul);
    let any = [&r.request_id, &r.ts, &r.key, &r.model]
        .iter()
        .any(|s| nul(s))
        || [
            &r.finish_reason,
            &r.endpoint,
            &r.error,
            &r.provider_request_id,
            &r.api,
            &r.served_model,
        ]
        .iter()
        .any(|s| opt(s));
    if !any {
        return Cow::Borrowed(r);
    }
    let fix = |s: &mut String| {
        if nul(s) {
            *s = s.replace('\0', "\u{FFFD}");
        }
    };
    let mut r = r.clone();
    for s in [&mut r.request_id, &mut r.ts, &mut r.key, &mut r.model] {
        fix(s);
    }
    for s in [
        &mut r.finish_reason,
        &mut r.endpoint,
        &mut r.error,
        &mut r.provider_request_id,
        &mut r.api,
        &mut r.served_model,
    ]
    .into_iter()
    .flatten()
    {
        fix(s);
    }
    Cow::Owned(r)
}

/// One transaction of `records`, the driver's error as it came.
fn insert_batch(
    c: &mut postgres::Client,
    records: &[&LedgerRecord],
) -> Result<(), postgres::Error> {
    if records.is_empty() {
        return Ok(());
    }
    let mut sql = String::from(INSERT);
    push_values(&mut sql, records.len());
    sql.push_str(" ON CONFLICT (request_id) DO NOTHING");
    struct Row {
        status: i32,
        prompt: i64,
        completion: i64,
        reasoning: i64,
        cached: i64,
        cost: i64,
        charged: i64,
        upstream: Option<i32>,
        attempts: i32,
        duration: i64,
        ttfb: Option<i64>,
    }
    let num = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let rows: Vec<Row> = records
        .iter()
        .map(|r| Row {
            status: i32::from(r.status),
            prompt: num(r.prompt_tokens),
            completion: num(r.completion_tokens),
            reasoning: num(r.reasoning_tokens),
            cached: num(r.cached_tokens),
            cost: num(r.cost_nano_usd),
            charged: num(r.charged_nano_usd),
            upstream: r.upstream_status.map(i32::from),
            attempts: i32::try_from(r.attempts).unwrap_or(i32::MAX),
            duration: num(r.duration_ms),
            ttfb: r.ttfb_ms.map(num),
        })
        .collect();
    let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> =
        Vec::with_capacity(records.len() * COLUMNS);
    for (r, n) in records.iter().zip(&rows) {
        params.extend_from_slice(&[
            &r.request_id,
            &r.ts,
            &r.key,
            &r.model,
            &r.stream,
            &n.status,
            &n.prompt,
            &n.completion,
            &n.reasoning,
            &n.cached,
            &n.cost,
            &r.finish_reason,
            &r.complete,
            &r.client_disconnected,
            &n.upstream,
            &r.endpoint,
            &n.attempts,
            &r.error,
            &n.duration,
            &n.ttfb,
            &r.provider_request_id,
            &r.usage_missing,
            &n.charged,
            &r.api,
            &r.served_model,
        ]);
    }
    debug_assert_eq!(
        params.len(),
        records.len() * COLUMNS,
        "a parameter per column"
    );
    let mut tx = c.transaction()?;
    tx.execute(sql.as_str(), &params)?;
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_is_stored_as_the_replacement_character() {
        let clean = LedgerRecord::new(1_795_000_000_000, "r1", "k");
        assert!(matches!(storable(&clean), Cow::Borrowed(_)));
        let mut r = clean.clone();
        r.finish_reason = Some("st\0op".into());
        r.served_model = Some("m\0".into());
        let fixed = storable(&r);
        assert!(matches!(fixed, Cow::Owned(_)));
        assert_eq!(fixed.finish_reason.as_deref(), Some("st\u{FFFD}op"));
        assert_eq!(fixed.served_model.as_deref(), Some("m\u{FFFD}"));
        assert_eq!(fixed.request_id, "r1");
        assert_eq!(fixed.key, r.key);
    }

    #[test]
    fn the_probe_reads_every_column_inserted() {
        let inserted = &INSERT[INSERT.find('(').unwrap() + 1..INSERT.find(')').unwrap()];
        let probed = &SCHEMA.probe["SELECT ".len()..SCHEMA.probe.find(" FROM").unwrap()];
        let names = |s: &str| {
            let mut v: Vec<String> = s.split(',').map(|c| c.trim().to_owned()).collect();
            v.sort();
            v
        };
        assert_eq!(names(inserted), names(probed));
        for index in ["chatgate_ledger_key_ts", "chatgate_ledger_ts"] {
            assert!(SCHEMA.sql.contains(index) && SCHEMA.probe.contains(index));
        }
    }

    #[test]
    fn every_column_has_its_parameter() {
        let columns = INSERT[INSERT.find('(').unwrap() + 1..INSERT.find(')').unwrap()]
            .split(',')
            .count();
        assert_eq!(columns, COLUMNS);
        let mut sql = String::new();
        push_values(&mut sql, 2);
        assert_eq!(sql.matches('$').count(), 2 * COLUMNS);
        assert!(sql.starts_with("($1, $2::text::timestamptz, $3"), "{sql}");
        assert!(sql.ends_with(&format!(", ${})", 2 * COLUMNS)), "{sql}");
        assert!(sql.contains(&format!(",(${}, ", COLUMNS + 1)), "{sql}");
    }
}
