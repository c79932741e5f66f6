//! The keys file as a store: read whole, and written whole (a temporary
//! file renamed over it, mode 0600, checked to parse first) after a change
//! [`chatgate_core::apply_key_op`] made, under a lock file so that the
//! `keys` commands and the admin API never write over each other. A new
//! key is appended instead, so the file's comments stay. A running
//! gateway picks a change up within a second (`crate::reload::keys`).

use std::io::Write as _;

use chatgate_core::{FieldChange, KeyDefaults, KeyOp, KeyTable, RawKey};
use chatgate_core::{apply_key_op, parse_keys_file, render_keys_file};

use super::keys::ChangeError;
use crate::error::Error;

/// The keys as written; a file that does not exist has none.
pub(crate) fn read_raw(path: &str) -> Result<Vec<RawKey>, Error> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(source) => {
            return Err(Error::File {
                what: format!("cannot read the keys file '{path}'"),
                source,
            });
        }
    };
    parse_keys_file(&text).map_err(|e| Error::Config(format!("{e} ({path})")))
}

/// Makes `op` on the file at `now_ms`, holding `<path>.lock`: what
/// changed. Nothing is written when the change is refused.
pub(crate) fn change(path: &str, op: &KeyOp, now_ms: u64) -> Result<Vec<FieldChange>, ChangeError> {
    let lock = lock(path)?;
    let mut keys = read_raw(path)?;
    let changes = apply_key_op(&mut keys, op, now_ms).map_err(ChangeError::Refused)?;
    match op {
        // Appended: whatever else the file holds (comments) stays.
        KeyOp::Create { .. } => {
            append_private(path, keys.last().expect("added").render().as_bytes()).map_err(
                |source| Error::File {
                    what: format!("cannot write the keys file '{path}'"),
                    source,
                },
            )?
        }
        _ => write_raw(path, &keys)?,
    }
    drop(lock);
    Ok(changes)
}

/// Holds an exclusive lock on `<path>.lock` until dropped.
fn lock(path: &str) -> Result<std::fs::File, Error> {
    let lock_path = format!("{path}.lock");
    let open = || -> std::io::Result<std::fs::File> {
        let f = private_options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(f)
    };
    open().map_err(|source| Error::File {
        what: format!("cannot lock the keys file ('{lock_path}')"),
        source,
    })
}

fn private_options() -> std::fs::OpenOptions {
    let mut opts = std::fs::OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts
}

/// Replaces the file's content atomically (a temporary file renamed over
/// it, mode 0600), after checking that it still parses.
pub(crate) fn write_raw(path: &str, keys: &[RawKey]) -> Result<(), Error> {
    let text = render_keys_file(keys);
    KeyTable::parse_toml(&text, KeyDefaults::default())
        .map_err(|e| Error::Config(format!("{e} ({path})")))?;
    let tmp = format!("{path}.tmp-{}", std::process::id());
    let write = || -> std::io::Result<()> {
        let mut f = private_options()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&tmp)?;
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

/// Appends to a file, creating it readable by its owner only, and syncs.
pub(crate) fn append_private(path: &str, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = private_options().create(true).append(true).open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
