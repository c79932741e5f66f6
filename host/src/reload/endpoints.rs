//! The endpoint set's live reload, with the model catalogue it serves (its
//! log lines still say "provider pool", as operators' alerts know them):
//! the config file is watched (checked every second: modification time,
//! size, inode) and re-read on SIGHUP; a changed pool of `[[upstream]]`
//! endpoints or `[[model]]` catalogue is applied without dropping anything
//! in flight (a request keeps the set it was validated against).
//!
//! The file is resolved again exactly as at start (flags and environment
//! still win over it), and only the pool is applied; other settings take
//! effect at the next start. Endpoints whose configuration is unchanged
//! keep their health and their pooled connections; requests in flight
//! finish on the endpoint they are on. A file that does not resolve, or an
//! endpoint whose TLS cannot be set up, is reported at error level and the
//! pool in force stays.

use std::collections::HashMap;

use chatgate_core::{EndpointSet, ServeConfig, Sources};

use crate::error::Error;
use crate::runtime::Runtime;
use crate::serving::driver::Shared;

/// Where a running gateway's endpoint set reloads from: the config file, resolved
/// with the flags and environment it started with.
#[derive(Debug, Clone)]
pub(crate) struct EndpointsSource {
    /// The config file.
    pub path: String,
    /// The `serve` flags given, by setting key.
    pub flags: HashMap<String, String>,
    /// The environment (`CHATGATE_*`, and the variables endpoints' keys
    /// come from), read again at each reload.
    pub env: HashMap<String, String>,
    /// The file's stamp when the settings in force were read.
    pub loaded: Option<super::Stamp>,
}

/// Re-reads the config file (`why`: a change, or SIGHUP; the environment
/// is read again too) and applies its endpoint set if it changed.
pub(crate) fn apply<R: Runtime>(shared: &Shared<R>, src: &mut EndpointsSource, why: &str) {
    src.env = std::env::vars().collect();
    match reload(shared, src) {
        Ok(Some(names)) => {
            tracing::info!(
                endpoints = names.as_str(),
                "provider pool reloaded ({why}), with the model catalogue"
            )
        }
        Ok(None) => tracing::info!(
            "config file reread ({why}): the provider pool and model catalogue are unchanged; other settings apply at the next start"
        ),
        Err(e) => {
            tracing::error!(
                "provider pool reload refused ({why}): {e}; the pool and catalogue in force stay"
            )
        }
    }
}

/// Applies the file's endpoint set and catalogue; `Ok(None)` when neither changed,
/// else the new set's endpoint names.
fn reload<R: Runtime>(shared: &Shared<R>, src: &EndpointsSource) -> Result<Option<String>, Error> {
    let file = std::fs::read_to_string(&src.path).map_err(|source| Error::File {
        what: format!("cannot read the config file '{}'", src.path),
        source,
    })?;
    let sources = Sources {
        flags: src.flags.clone(),
        env: src.env.clone(),
        file: Some(file),
    };
    let cfg = ServeConfig::resolve(sources)?;
    let gateway = &shared.gateway;
    let current = gateway.endpoints();
    if current.is_made_of(&cfg.gateway.endpoints, &cfg.gateway.catalog) {
        return Ok(None);
    }
    let next = EndpointSet::new(cfg.gateway.endpoints, cfg.gateway.catalog, Some(&current));
    shared.connectors.prepare(&next)?;
    let names: Vec<&str> = next.endpoints().iter().map(|e| e.name()).collect();
    let names = names.join(",");
    gateway.replace_endpoints(next);
    Ok(Some(names))
}
