//! What can go wrong in host: one [`Error`], by kind.
//!
//! Each variant carries what the operator needs to act: the setting or
//! file at fault, and the cause. Its `Display` is the one line `chatgate:`
//! prints before exiting with [`crate::EXIT_CONFIG`] (or a log line says,
//! for a reload or a background task), so a variant's text is part of the
//! interface: operators' scripts and the tests read it.

use std::fmt;
use std::io;

use chatgate_core::ConfigError;

/// Why host could not do what it was asked: start, load a file, serve,
/// reach a store.
#[non_exhaustive]
#[derive(Debug)]
pub enum Error {
    /// A setting, a flag, an argument or a file's content is wrong: the
    /// config file or the environment (core's [`ConfigError`] converts
    /// into this), the keys file, a key name, an amount. The text says
    /// what to change, and where.
    Config(String),
    /// A file could not be opened, read, written or renamed.
    File {
        /// What was being done, e.g. `cannot read the keys file '/etc/keys.toml'`.
        what: String,
        /// Why the system refused.
        source: io::Error,
    },
    /// A socket could not be bound or made ready for the runtime.
    Net {
        /// What was being done, e.g. `cannot listen on 127.0.0.1:8080`.
        what: String,
        /// Why the system refused.
        source: io::Error,
    },
    /// An I/O error whose own message says all there is to say (a
    /// socket's address, a listener the runtime would not take, a file's
    /// metadata).
    Io(io::Error),
    /// TLS cannot be set up for an outbound connection: a CA file that
    /// does not load, a host that is no TLS server name.
    Tls(String),
    /// PostgreSQL (the shared ledger) could not be reached, queried or
    /// written.
    Postgres(String),
    /// The trace collector did not take an export: no connection, no
    /// answer in time, or an answer other than 2xx.
    Export(String),
    /// The runtime could not start (its threads, its reactor).
    Runtime(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(why) | Error::Tls(why) | Error::Postgres(why) | Error::Export(why) => {
                f.write_str(why)
            }
            Error::File { what, source } | Error::Net { what, source } => {
                write!(f, "{what}: {source}")
            }
            Error::Io(e) => write!(f, "{e}"),
            Error::Runtime(e) => write!(f, "cannot start the runtime: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::File { source, .. } | Error::Net { source, .. } => Some(source),
            Error::Runtime(e) => Some(e),
            // Its text is the I/O error's own: the cause is that error's.
            Error::Io(e) => e.source(),
            Error::Config(_) | Error::Tls(_) | Error::Postgres(_) | Error::Export(_) => None,
        }
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Error {
        Error::Config(e.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_the_line_the_operator_reads() {
        let denied = || io::Error::from(io::ErrorKind::PermissionDenied);
        let file = Error::File {
            what: "cannot read the keys file 'k.toml'".into(),
            source: denied(),
        };
        assert_eq!(
            file.to_string(),
            format!("cannot read the keys file 'k.toml': {}", denied())
        );
        assert!(std::error::Error::source(&file).is_some());
        let net = Error::Net {
            what: "cannot listen on 127.0.0.1:1".into(),
            source: denied(),
        };
        assert_eq!(
            net.to_string(),
            format!("cannot listen on 127.0.0.1:1: {}", denied())
        );
        assert_eq!(Error::Io(denied()).to_string(), denied().to_string());
        assert_eq!(
            Error::Runtime(denied()).to_string(),
            format!("cannot start the runtime: {}", denied())
        );
        // What runtime-smol hands back when a thread does not start.
        let thread = io::Error::other("cannot start executor thread 3: no room");
        assert_eq!(
            Error::Runtime(thread).to_string(),
            "cannot start the runtime: cannot start executor thread 3: no room"
        );
        let config = Error::from(ConfigError("config file: unknown setting 'x'".into()));
        assert_eq!(config.to_string(), "config file: unknown setting 'x'");
        assert!(std::error::Error::source(&config).is_none());
    }
}
