//! The keys file's live reload in a running gateway (the file itself, and
//! the edits the `keys` commands make to it, are `crate::stores::keys_file`).
//!
//! A running gateway re-reads the file when it changes (checked every
//! second: modification time, size, inode) or on SIGHUP. A file that does
//! not parse, or is empty, or (with `--redis`) has a limit above what the
//! shared limiter computes exactly, is reported at error level and the
//! previous keys stay in force (a file whose keys were all revoked is
//! applied). Connections are never dropped: a reload only swaps
//! the table new requests are checked against.

use chatgate_core::{KeyDefaults, KeyTable};

use super::Stamp;
use crate::error::Error;
use crate::runtime::Runtime;
use crate::serving::driver::Shared;

/// Where a running gateway's keys come from.
#[derive(Debug, Clone)]
pub(crate) struct KeysSource {
    /// The keys file.
    pub path: String,
    /// Limits, budget and in-flight cap for keys that set none.
    pub defaults: KeyDefaults,
    /// The file's stamp when the keys in force were read.
    pub loaded: Option<Stamp>,
}

/// Reads and checks the keys file for a reload. A file without a single
/// byte but blanks is refused (it is what a truncated or half-written file
/// looks like); a file with content and no key is accepted: every key was
/// revoked, and every request now gets 401.
pub(crate) fn load(src: &KeysSource) -> Result<KeyTable, Error> {
    let text = std::fs::read_to_string(&src.path).map_err(|source| Error::File {
        what: format!("cannot read the keys file '{}'", src.path),
        source,
    })?;
    if text.trim().is_empty() {
        return Err(Error::Config(format!(
            "the keys file '{}' is empty",
            src.path
        )));
    }
    KeyTable::parse_toml(&text, src.defaults)
        .map_err(|e| Error::Config(format!("{e} ({})", src.path)))
}

/// Re-reads the keys file (`why`: a change, or SIGHUP) and swaps the
/// table new requests are checked against; a file that does not load
/// leaves the keys in force.
pub(crate) fn reload<R: Runtime>(shared: &Shared<R>, src: &KeysSource, why: &str) {
    let gateway = &shared.gateway;
    let loaded = load(src).and_then(|keys| match &shared.shared_limits {
        Some(_) => crate::stores::redis::check_keys(&keys)
            .map(|()| keys)
            .map_err(|e| Error::Config(format!("{e} ({})", src.path))),
        None => Ok(keys),
    });
    match loaded {
        Ok(keys) => {
            let n = keys.len();
            gateway.replace_keys(keys);
            gateway.metrics().key_reload(true);
            tracing::info!(keys = n, path = %src.path, "keys reloaded ({why})");
        }
        Err(e) => {
            gateway.metrics().key_reload(false);
            tracing::error!(
                keys_in_force = gateway.keys().len(),
                "keys reload refused ({why}): {e}; the previous keys stay in force"
            );
        }
    }
}
