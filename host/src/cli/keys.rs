//! The `keys` commands: `new`, `set`, `list`, `revoke`, `rotate` and
//! `import`, on the store the `--keys` setting names (a keys file or a
//! PostgreSQL URL: `crate::stores::keys`). Each change is recorded in the
//! audit trail, as `cli:$USER`.

use std::process::ExitCode;

use chatgate_core::{KeyChanges, KeyOp, key_hash_hex, mint_key};
use clap::ArgMatches;

use crate::runtime::random_32;
use crate::stores::keys::{Actor, KeyStore};

use super::*;

/// The quota flags given, as changes to a key (`none` removes a value).
pub(super) fn quota_changes(m: &ArgMatches) -> Result<KeyChanges, Error> {
    let budget_usd = match m.get_one::<String>("budget_usd").map(String::as_str) {
        None => None,
        Some("none") => Some(None),
        Some(v) => {
            let usd = v.trim().parse::<f64>().map_err(|_| {
                Error::Config(format!(
                    "--budget-usd '{v}' is not an amount of USD (or none)"
                ))
            })?;
            chatgate_core::usd_to_nano(usd)
                .map_err(|e| Error::Config(format!("--budget-usd: {e}")))?;
            Some(Some(usd))
        }
    };
    let max_in_flight = match m.get_one::<String>("max_in_flight").map(String::as_str) {
        None => None,
        Some("none") => Some(None),
        Some(v) => Some(Some(v.trim().parse::<u64>().map_err(|_| {
            Error::Config(format!(
                "--max-in-flight '{v}' is not a whole number (or none)"
            ))
        })?)),
    };
    let models = match m.get_one::<String>("models").map(String::as_str) {
        None => None,
        Some("all") => Some(None),
        Some(list) => {
            let names: Vec<String> = list
                .split(',')
                .map(|n| n.trim().to_owned())
                .filter(|n| !n.is_empty())
                .collect();
            if names.is_empty() {
                return Err(Error::Config(format!(
                    "--models '{list}' names no model (give ids or aliases, comma-separated, or all)"
                )));
            }
            Some(Some(names))
        }
    };
    let changes = KeyChanges {
        models,
        rpm: m.get_one::<u64>("rpm").map(|n| Some(*n)),
        tpm: m.get_one::<u64>("tpm").map(|n| Some(*n)),
        budget_usd,
        budget_period: m
            .get_one::<String>("budget_period")
            .map(|p| Some(p.clone())),
        max_in_flight,
    };
    changes
        .check()
        .map_err(|e| Error::Config(format!("--{}", e.to_string().replace('_', "-"))))?;
    Ok(changes)
}

/// The store `--keys` names, and the audit file beside `--ledger`.
fn store(m: &ArgMatches) -> (KeyStore, Option<String>) {
    let keys = m.get_one::<String>("keys").expect("required");
    let audit = m
        .try_get_one::<String>("ledger")
        .ok()
        .flatten()
        .and_then(|l| crate::stores::audit::path_beside(l));
    (KeyStore::new(keys), audit)
}

/// Makes `op` on the command's store for the user running it.
fn change(m: &ArgMatches, op: &KeyOp) -> Result<chatgate_core::AuditRecord, ExitCode> {
    let (store, audit) = store(m);
    let record = store
        .change(op, &Actor::cli(), now_unix_ms(), audit.as_deref())
        .map_err(|e| fail(format!("{e} ({})", store.label())))?;
    if audit.is_none() && matches!(store, KeyStore::File(_)) {
        eprintln!(
            "Note: not recorded in an audit trail; give --ledger (the gateway's ledger) or set CHATGATE_LEDGER, and the console shows it."
        );
    }
    Ok(record)
}

pub(super) fn set(m: &ArgMatches) -> ExitCode {
    let name = m.get_one::<String>("name").expect("required");
    let changes = match quota_changes(m) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if changes.is_empty() {
        return fail(
            "keys set: nothing to change (give --rpm, --tpm, --budget-usd, --budget-period, --max-in-flight or --models)",
        );
    }
    let op = KeyOp::Update {
        name: name.clone(),
        changes,
    };
    match change(m, &op) {
        Ok(_) => {
            eprintln!(
                "Updated key '{name}' in {}; a running gateway applies it within a second.",
                store(m).0.label()
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

pub(super) fn list(m: &ArgMatches) -> ExitCode {
    let (store, _) = store(m);
    match store.read() {
        Ok(raw) => {
            print!("{}", table(&raw, now_unix_ms() / 1000));
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `keys list`'s table: one line per entry: name, limits, budget,
/// in-flight cap, created, expires, models, and the first 8 hexadecimal
/// characters of the hash (never the full hash).
fn table(raw: &[chatgate_core::RawKey], now_unix: u64) -> String {
    let mut rows = vec![[
        "name".to_owned(),
        "requests/min".into(),
        "tokens/min".into(),
        "budget".into(),
        "in-flight".into(),
        "created".into(),
        "expires".into(),
        "models".into(),
        "sha256".into(),
    ]];
    for k in raw {
        let expires = match &k.expires {
            None => "never".to_owned(),
            Some(e) => match chatgate_core::parse_rfc3339(e) {
                Some(t) if t <= now_unix => format!("{e} (expired)"),
                _ => e.clone(),
            },
        };
        rows.push([
            k.name.clone(),
            k.requests_per_minute
                .map_or("default".into(), |n| n.to_string()),
            k.tokens_per_minute
                .map_or("default".into(), |n| n.to_string()),
            match (k.budget_usd, &k.budget_period) {
                (Some(usd), Some(p)) => format!("{usd} USD/{p}"),
                (Some(usd), None) => format!("{usd} USD/default period"),
                (None, Some(p)) => format!("default/{p}"),
                (None, None) => "default".into(),
            },
            k.max_in_flight.map_or("default".into(), |n| n.to_string()),
            k.created.clone().unwrap_or_else(|| "-".into()),
            expires,
            k.models.as_ref().map_or("all".into(), |m| m.join(",")),
            format!("{}…", k.sha256.get(..8).unwrap_or(&k.sha256)),
        ]);
    }
    let mut widths = [0usize; 9];
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for r in &rows {
        let line: Vec<String> = r
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    out
}

pub(super) fn revoke(m: &ArgMatches) -> ExitCode {
    let name = m.get_one::<String>("name").expect("required");
    match change(m, &KeyOp::Revoke { name: name.clone() }) {
        Ok(_) => {
            eprintln!("Revoked key '{name}' in {}.", store(m).0.label());
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

pub(super) fn rotate(m: &ArgMatches) -> ExitCode {
    let name = m.get_one::<String>("name").expect("required");
    let grace = m.get_one::<String>("grace").expect("defaulted");
    let Some(grace) = chatgate_core::parse_duration(grace) else {
        return fail(format!(
            "--grace '{grace}' is not a duration like 30m or 24h"
        ));
    };
    let key = mint_key(&random_32());
    let op = KeyOp::Rotate {
        name: name.clone(),
        grace_ms: grace.as_millis() as u64,
        sha256: key_hash_hex(&key),
    };
    match change(m, &op) {
        Ok(record) => {
            let expires = record
                .changes
                .first()
                .and_then(|c| c.after.as_str())
                .unwrap_or_default()
                .to_owned();
            println!("{key}");
            eprintln!(
                "Rotated key '{name}' in {}: the new key is printed above (only this once); \
                 the old key is accepted until {expires}.",
                store(m).0.label()
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

pub(super) fn new(m: &ArgMatches) -> ExitCode {
    let name = m.get_one::<String>("name").expect("required");
    let changes = match quota_changes(m) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if matches!(changes.budget_usd, Some(None)) || matches!(changes.max_in_flight, Some(None)) {
        return fail("keys new: 'none' is for keys set; leave the flag out instead");
    }
    let key = mint_key(&random_32());
    let op = KeyOp::Create {
        name: name.clone(),
        changes,
        sha256: key_hash_hex(&key),
    };
    match change(m, &op) {
        Ok(_) => {
            println!("{key}");
            eprintln!(
                "Added key '{name}' to {}. This is the only time the key is shown.",
                store(m).0.label()
            );
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `keys import --from FILE`: every key of a keys file into the store
/// `--keys` names (PostgreSQL), hashes and times as they are. A name the
/// store has with the same entries is skipped, so the import can be run
/// again; a name it has with others stops the import there.
pub(super) fn import(m: &ArgMatches) -> ExitCode {
    let from = m.get_one::<String>("from").expect("required");
    let (store, audit) = store(m);
    if store == KeyStore::File(from.clone()) {
        return fail("keys import: --from and --keys name the same file");
    }
    let (raw, have) = match (crate::stores::keys_file::read_raw(from), store.read()) {
        (Ok(r), Ok(h)) => (r, h),
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    let mut names: Vec<&str> = Vec::new();
    for k in &raw {
        if !names.contains(&k.name.as_str()) {
            names.push(&k.name);
        }
    }
    let (mut imported, mut skipped) = (0, 0);
    for name in names {
        let entries: Vec<chatgate_core::RawKey> =
            raw.iter().filter(|k| k.name == name).cloned().collect();
        let there: Vec<&chatgate_core::RawKey> = have.iter().filter(|k| k.name == name).collect();
        if !there.is_empty()
            && there.len() == entries.len()
            && there.iter().zip(&entries).all(|(a, b)| *a == b)
        {
            skipped += 1;
            continue;
        }
        let op = KeyOp::Import {
            name: name.to_owned(),
            entries,
        };
        if let Err(e) = store.change(&op, &Actor::cli(), now_unix_ms(), audit.as_deref()) {
            return fail(format!(
                "{e} ({}); {imported} key(s) imported before this one",
                store.label()
            ));
        }
        imported += 1;
    }
    eprintln!(
        "Imported {imported} key(s) from {from} into {} ({skipped} already there).",
        store.label()
    );
    ExitCode::SUCCESS
}
