//! The `keys` commands: `new`, `set`, `list`, `revoke`, `rotate`, on the
//! keys file (`crate::stores::keys_file`).

use std::io::Write as _;
use std::process::ExitCode;

use chatgate_core::Limits;
use chatgate_core::rfc3339_ms;
use chatgate_core::{KeyTable, is_valid_name, key_hash_hex, mint_key};
use clap::ArgMatches;

use crate::runtime::random_32;

use super::*;

/// The quota flags given, as changes to a key (`none` removes a value).
pub(super) fn quota_changes(m: &ArgMatches) -> Result<crate::stores::keys_file::KeyChanges, Error> {
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
    Ok(crate::stores::keys_file::KeyChanges {
        models,
        rpm: m.get_one::<u64>("rpm").copied(),
        tpm: m.get_one::<u64>("tpm").copied(),
        budget_usd,
        budget_period: m.get_one::<String>("budget_period").cloned(),
        max_in_flight,
    })
}

pub(super) fn set(m: &ArgMatches) -> ExitCode {
    let path = m.get_one::<String>("keys").expect("required");
    let name = m.get_one::<String>("name").expect("required");
    let changes = match quota_changes(m) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if changes == crate::stores::keys_file::KeyChanges::default() {
        return fail(
            "keys set: nothing to change (give --rpm, --tpm, --budget-usd, --budget-period, --max-in-flight or --models)",
        );
    }
    match crate::stores::keys_file::set(path, name, &changes) {
        Ok(()) => {
            eprintln!(
                "Updated key '{name}' in {path}; a running gateway applies it within a second."
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

pub(super) fn list(m: &ArgMatches) -> ExitCode {
    let path = m.get_one::<String>("keys").expect("required");
    match crate::stores::keys_file::list(path, now_unix_ms() / 1000) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

pub(super) fn revoke(m: &ArgMatches) -> ExitCode {
    let path = m.get_one::<String>("keys").expect("required");
    let name = m.get_one::<String>("name").expect("required");
    match crate::stores::keys_file::revoke(path, name) {
        Ok(n) => {
            eprintln!(
                "Revoked key '{name}' ({n} entr{}) in {path}.",
                if n == 1 { "y" } else { "ies" }
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

pub(super) fn rotate(m: &ArgMatches) -> ExitCode {
    let path = m.get_one::<String>("keys").expect("required");
    let name = m.get_one::<String>("name").expect("required");
    let grace = m.get_one::<String>("grace").expect("defaulted");
    let Some(grace) = chatgate_core::parse_duration(grace) else {
        return fail(format!(
            "--grace '{grace}' is not a duration like 30m or 24h"
        ));
    };
    let key = mint_key(&random_32());
    match crate::stores::keys_file::rotate(path, name, grace, now_unix_ms(), &key) {
        Ok(expires) => {
            println!("{key}");
            eprintln!(
                "Rotated key '{name}' in {path}: the new key is printed above (only this once); \
                 the old key is accepted until {expires}."
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

pub(super) fn new(m: &ArgMatches) -> ExitCode {
    let path = m.get_one::<String>("keys").expect("required");
    let name = m.get_one::<String>("name").expect("required");
    if !is_valid_name(name) {
        return fail(format!(
            "'{name}' is not a valid key name: use 1 to 64 letters, digits, '-', '_', '.' or '@'"
        ));
    }
    let existing = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return fail(format!("cannot read the keys file '{path}': {e}")),
    };
    let changes = match quota_changes(m) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if matches!(changes.budget_usd, Some(None)) || matches!(changes.max_in_flight, Some(None)) {
        return fail("keys new: 'none' is for keys set; leave the flag out instead");
    }
    let key = mint_key(&random_32());
    let entry = chatgate_core::RawKey {
        requests_per_minute: changes.rpm,
        tokens_per_minute: changes.tpm,
        budget_usd: changes.budget_usd.flatten(),
        budget_period: changes.budget_period,
        max_in_flight: changes.max_in_flight.flatten(),
        models: changes.models.flatten(),
        created: Some(rfc3339_ms(now_unix_ms())),
        ..chatgate_core::RawKey::new(name, &key_hash_hex(&key))
    }
    .render();
    // The file must still parse with the new entry (no duplicate names,
    // valid limits); nothing is written otherwise.
    if let Err(e) = KeyTable::parse_toml(&format!("{existing}{entry}"), Limits::default()) {
        return fail(format!("{e} ({path})"));
    }
    if let Err(e) = append_private(path, entry.as_bytes()) {
        return fail(format!("cannot write the keys file '{path}': {e}"));
    }
    println!("{key}");
    eprintln!("Added key '{name}' to {path}. This is the only time the key is shown.");
    ExitCode::SUCCESS
}

/// Appends to a file, creating it readable by its owner only.
pub(super) fn append_private(path: &str, bytes: &[u8]) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
