//! Where the client keys live, chosen by the `keys` setting: a path is the
//! keys file (one instance), a `postgres://` or `postgresql://` URL is a
//! table in PostgreSQL that every instance reads and watches
//! (`postgres/keys.rs`). Either way a change is made by
//! [`chatgate_core::apply_key_op`] and leaves one [`AuditRecord`]: in the
//! PostgreSQL table `chatgate_audit` with that store, and in the audit
//! file beside the ledger of whoever made it (`audit`).

use chatgate_core::{AuditRecord, KeyOp, OpError, RawKey, rfc3339_ms};

use crate::error::Error;

/// A store of keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyStore {
    /// The keys file at this path.
    File(String),
    /// The table in the PostgreSQL at this URL.
    Postgres(String),
}

/// Why a change was not made.
#[derive(Debug)]
pub(crate) enum ChangeError {
    /// The change itself is refused (unknown name, taken name, bad value).
    Refused(OpError),
    /// The store could not be read or written.
    Store(Error),
}

impl From<Error> for ChangeError {
    fn from(e: Error) -> Self {
        ChangeError::Store(e)
    }
}

impl std::fmt::Display for ChangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChangeError::Refused(e) => e.fmt(f),
            ChangeError::Store(e) => e.fmt(f),
        }
    }
}

/// Who makes a change, and from where.
#[derive(Debug, Clone)]
pub(crate) struct Actor {
    /// `token:VARIABLE`, `user:EMAIL` or `cli:USER`.
    pub(crate) name: String,
    /// The client's address, over the network.
    pub(crate) address: Option<String>,
}

impl Actor {
    /// The `keys` commands' actor: the user running them.
    pub(crate) fn cli() -> Actor {
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| {
                use std::os::unix::fs::MetadataExt;
                // The process's own directory belongs to its user.
                std::fs::metadata("/proc/self")
                    .map_or("unknown".into(), |m| format!("uid-{}", m.uid()))
            });
        Actor {
            name: format!("cli:{user}"),
            address: None,
        }
    }
}

impl KeyStore {
    /// The store the `keys` setting names.
    pub(crate) fn new(spec: &str) -> KeyStore {
        if is_postgres(spec) {
            KeyStore::Postgres(spec.to_owned())
        } else {
            KeyStore::File(spec.to_owned())
        }
    }

    /// How logs and messages name it (never a password).
    pub(crate) fn label(&self) -> String {
        match self {
            KeyStore::File(path) => format!("the keys file '{path}'"),
            KeyStore::Postgres(url) => {
                format!("PostgreSQL ({})", super::postgres::keys::redacted(url))
            }
        }
    }

    /// Every key as written, in order.
    pub(crate) fn read(&self) -> Result<Vec<RawKey>, Error> {
        match self {
            KeyStore::File(path) => super::keys_file::read_raw(path),
            KeyStore::Postgres(url) => super::postgres::keys::read(url),
        }
    }

    /// Makes `op` for `actor` at `now_ms` and records it; `audit_file`
    /// (beside the caller's ledger) gets the record too. A record that
    /// cannot be appended to the file after the change was made is
    /// reported at error level: the change stands.
    pub(crate) fn change(
        &self,
        op: &KeyOp,
        actor: &Actor,
        now_ms: u64,
        audit_file: Option<&str>,
    ) -> Result<AuditRecord, ChangeError> {
        let record = |changes| AuditRecord {
            id: None,
            at: rfc3339_ms(now_ms),
            actor: actor.name.clone(),
            address: actor.address.clone(),
            action: op.action().to_owned(),
            key: op.name().to_owned(),
            changes,
        };
        let record = match self {
            KeyStore::File(path) => record(super::keys_file::change(path, op, now_ms)?),
            KeyStore::Postgres(url) => super::postgres::keys::change(url, op, now_ms, record)?,
        };
        if let Some(path) = audit_file
            && let Err(e) = super::audit::append(path, &record)
        {
            tracing::error!(key = %record.key, action = %record.action, "{e}; the change was made");
        }
        Ok(record)
    }

    /// The audit trail, newest first: PostgreSQL's with that store, else
    /// the file beside the ledger.
    pub(crate) fn audit(
        &self,
        audit_file: Option<&str>,
        before: Option<u64>,
        limit: usize,
    ) -> Result<Vec<AuditRecord>, Error> {
        match (self, audit_file) {
            (KeyStore::Postgres(url), _) => super::postgres::keys::audit(url, before, limit),
            (KeyStore::File(_), Some(path)) => super::audit::page(path, before, limit),
            (KeyStore::File(_), None) => Ok(Vec::new()),
        }
    }
}

/// A `postgres://` or `postgresql://` URL.
pub(crate) fn is_postgres(spec: &str) -> bool {
    spec.starts_with("postgres://") || spec.starts_with("postgresql://")
}
