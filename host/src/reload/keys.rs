//! The keys in force in a running gateway, kept in step with their store
//! (`crate::stores::keys`).
//!
//! A keys file is re-read when it changes (checked every second:
//! modification time, size, inode) or on SIGHUP. Keys in PostgreSQL are
//! re-read by a thread that listens for the changes every instance
//! announces (`crate::stores::postgres::keys::watch`). A change made through this
//! gateway's admin API is applied at once. Keys that do not load (a file
//! that does not parse or is empty, or, with `--redis`, a limit above what
//! the shared limiter computes exactly) are reported at error level and
//! the previous keys stay in force; a store whose keys were all revoked is
//! applied. Connections are never dropped: a reload only swaps the table
//! new requests are checked against.

use std::sync::Arc;

use chatgate_core::{Gateway, KeyDefaults, KeyTable, RawKey};

use super::Stamp;
use crate::error::Error;
use crate::runtime::Runtime;
use crate::serving::driver::Shared;
use crate::stores::keys::KeyStore;

/// Where a running gateway's keys come from, and where changes to them
/// are recorded.
#[derive(Debug, Clone)]
pub(crate) struct KeysSource {
    /// The store.
    pub(crate) store: KeyStore,
    /// Limits, budget and in-flight cap for keys that set none.
    pub(crate) defaults: KeyDefaults,
    /// The audit file beside the ledger, when the ledger is a file.
    pub(crate) audit: Option<String>,
    /// The keys file's stamp when the keys in force were read.
    pub(crate) loaded: Option<Stamp>,
}

impl KeysSource {
    /// The keys file's path, when the keys are in a file.
    pub(crate) fn file(&self) -> Option<&str> {
        match &self.store {
            KeyStore::File(path) => Some(path),
            KeyStore::Postgres(_) => None,
        }
    }
}

/// Reads and checks the keys. A keys file without a single byte but
/// blanks is refused (it is what a truncated or half-written file looks
/// like); one with content and no key is accepted: every key was revoked,
/// and every request now gets 401.
pub(crate) fn load(src: &KeysSource) -> Result<KeyTable, Error> {
    if let Some(path) = src.file() {
        let text = std::fs::read_to_string(path).map_err(|source| Error::File {
            what: format!("cannot read the keys file '{path}'"),
            source,
        })?;
        if text.trim().is_empty() {
            return Err(Error::Config(format!("the keys file '{path}' is empty")));
        }
    }
    table(&src.store.read()?, src)
}

/// The table of `raw` keys with the gateway's defaults.
fn table(raw: &[RawKey], src: &KeysSource) -> Result<KeyTable, Error> {
    KeyTable::from_raw(raw, &src.defaults)
        .map_err(|e| Error::Config(format!("{e} ({})", src.store.label())))
}

/// Re-reads the keys (`why`: a change, SIGHUP, the admin API) and swaps
/// the table new requests are checked against; keys that do not load
/// leave the keys in force.
pub(crate) fn reload<R: Runtime>(shared: &Shared<R>, src: &KeysSource, why: &str) {
    install(
        &shared.gateway,
        shared.shared_limits.is_some(),
        load(src),
        src,
        why,
    );
}

fn install(
    gateway: &Gateway,
    shared_limits: bool,
    loaded: Result<KeyTable, Error>,
    src: &KeysSource,
    why: &str,
) {
    let loaded = loaded.and_then(|keys| match shared_limits {
        true => crate::stores::redis::check_keys(&keys)
            .map(|()| keys)
            .map_err(|e| Error::Config(format!("{e} ({})", src.store.label()))),
        false => Ok(keys),
    });
    match loaded {
        Ok(keys) => {
            let n = keys.len();
            gateway.replace_keys(keys);
            gateway.metrics().key_reload(true);
            tracing::info!(keys = n, store = %src.store.label(), "keys reloaded ({why})");
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

/// With keys in PostgreSQL: a thread that applies every change any
/// instance makes, starting from `initial` (the keys read at start).
pub(crate) fn watch_postgres<R: Runtime>(
    shared: &Arc<Shared<R>>,
    src: &KeysSource,
    initial: Vec<RawKey>,
) {
    let KeyStore::Postgres(url) = &src.store else {
        return;
    };
    let gateway = Arc::clone(&shared.gateway);
    let shared_limits = shared.shared_limits.is_some();
    let src = src.clone();
    crate::stores::postgres::keys::watch(url.clone(), initial, move |raw| {
        install(
            &gateway,
            shared_limits,
            table(&raw, &src),
            &src,
            "a change in PostgreSQL",
        );
    });
}
