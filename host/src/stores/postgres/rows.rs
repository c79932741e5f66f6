//! The ledger's rows: one insert of a batch of records.

use chatgate_core::LedgerRecord;

use super::connection::failed;
use crate::error::Error;

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

pub(crate) fn insert(c: &mut postgres::Client, records: &[LedgerRecord]) -> Result<(), Error> {
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
    let mut tx = c.transaction().map_err(failed)?;
    tx.execute(sql.as_str(), &params).map_err(failed)?;
    tx.commit().map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

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
