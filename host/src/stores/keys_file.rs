//! The keys file as a store: read and written whole (a temporary file
//! renamed over it, mode 0600, checked to parse first), and the edits the
//! `keys` commands make: `set`, `list`, `revoke`, `rotate`. A running
//! gateway picks a change up within a second (`crate::reload::keys`).

use std::time::Duration;

use chatgate_core::KeyDefaults;
use chatgate_core::rfc3339_ms;
use chatgate_core::{KeyTable, RawKey, parse_keys_file, render_keys_file};

use crate::error::Error;

fn read_raw(path: &str) -> Result<Vec<RawKey>, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::File {
        what: format!("cannot read the keys file '{path}'"),
        source,
    })?;
    parse_keys_file(&text).map_err(|e| Error::Config(format!("{e} ({path})")))
}

/// Replaces the file's content atomically (a temporary file renamed over
/// it, mode 0600), after checking that it still parses.
pub(crate) fn write_raw(path: &str, keys: &[RawKey]) -> Result<(), Error> {
    use std::io::Write as _;
    let text = render_keys_file(keys);
    KeyTable::parse_toml(&text, KeyDefaults::default())
        .map_err(|e| Error::Config(format!("{e} ({path})")))?;
    let tmp = format!("{path}.tmp-{}", std::process::id());
    let write = || -> std::io::Result<()> {
        let mut opts = std::fs::OpenOptions::new();
        opts.create(true).write(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|source| {
        let _ = std::fs::remove_file(&tmp);
        Error::File {
            what: format!("cannot write the keys file '{path}'"),
            source,
        }
    })
}

/// What `keys set` changes (`None`: left as it is; `Some(None)`: removed,
/// so the default applies).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct KeyChanges {
    /// `--rpm`.
    pub rpm: Option<u64>,
    /// `--tpm`.
    pub tpm: Option<u64>,
    /// `--budget-usd X|none`.
    pub budget_usd: Option<Option<f64>>,
    /// `--budget-period P`.
    pub budget_period: Option<String>,
    /// `--max-in-flight N|none`.
    pub max_in_flight: Option<Option<u64>>,
    /// `--models a,b|all`.
    pub models: Option<Option<Vec<String>>>,
}

/// `keys set NAME`: changes the limits of every entry of that name (a
/// rotated key's entries share them) without minting a secret. The file
/// is written only if the result is valid; a running gateway applies it
/// within a second.
pub(crate) fn set(path: &str, name: &str, c: &KeyChanges) -> Result<(), Error> {
    let mut raw = read_raw(path)?;
    let mut found = false;
    for k in raw.iter_mut().filter(|k| k.name == name) {
        found = true;
        if let Some(n) = c.rpm {
            k.requests_per_minute = Some(n);
        }
        if let Some(n) = c.tpm {
            k.tokens_per_minute = Some(n);
        }
        if let Some(b) = c.budget_usd {
            k.budget_usd = b;
        }
        if let Some(p) = &c.budget_period {
            k.budget_period = Some(p.clone());
        }
        if let Some(n) = c.max_in_flight {
            k.max_in_flight = n;
        }
        if let Some(m) = &c.models {
            k.models.clone_from(m);
        }
    }
    if !found {
        return Err(Error::Config(format!("no key named '{name}' in '{path}'")));
    }
    write_raw(path, &raw)
}

/// `keys list`: one line per entry: name, limits, budget, in-flight cap,
/// created, expires, and the first 8 hexadecimal characters of the hash
/// (never the full hash).
pub(crate) fn list(path: &str, now_unix: u64) -> Result<String, Error> {
    let raw = read_raw(path)?;
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
    for k in &raw {
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
    Ok(out)
}

/// `keys revoke NAME`: removes every entry of that name (a rotated key's
/// old entry included). Returns how many were removed.
pub(crate) fn revoke(path: &str, name: &str) -> Result<usize, Error> {
    let mut raw = read_raw(path)?;
    let before = raw.len();
    raw.retain(|k| k.name != name);
    let removed = before - raw.len();
    if removed == 0 {
        return Err(Error::Config(format!("no key named '{name}' in '{path}'")));
    }
    write_raw(path, &raw)?;
    Ok(removed)
}

/// `keys rotate NAME`: adds a new key under the same name and limits; the
/// current one stays valid for `grace`, then is refused (its entry gets
/// `expires`). Older expired entries of that name are dropped. Returns the
/// new key and when the old one expires.
pub(crate) fn rotate(
    path: &str,
    name: &str,
    grace: Duration,
    now_unix_ms: u64,
    new_key: &str,
) -> Result<String, Error> {
    let mut raw = read_raw(path)?;
    let now_unix = now_unix_ms / 1000;
    let current = raw
        .iter()
        .position(|k| k.name == name && k.expires.is_none())
        .ok_or_else(|| {
            Error::Config(format!(
                "no unexpiring key named '{name}' in '{path}' to rotate"
            ))
        })?;
    let expires = rfc3339_ms(now_unix_ms + grace.as_millis() as u64);
    // Entries of this name that already expired are of no use any more.
    raw.retain(|k| {
        k.name != name
            || k.expires
                .as_deref()
                .and_then(chatgate_core::parse_rfc3339)
                .is_none_or(|t| t > now_unix)
    });
    let current = raw
        .iter()
        .position(|k| k.name == name && k.expires.is_none())
        .unwrap_or(current);
    let mut fresh = raw[current].clone();
    raw[current].expires = Some(expires.clone());
    fresh.sha256 = chatgate_core::key_hash_hex(new_key);
    fresh.created = Some(rfc3339_ms(now_unix_ms));
    fresh.expires = None;
    raw.push(fresh);
    write_raw(path, &raw)?;
    Ok(expires)
}
