//! `serve`: the settings resolved, keys and ledger opened, every task
//! started, the address announced, and the drain on SIGTERM.

use std::collections::HashMap;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use chatgate_core::Gateway;
use chatgate_core::KeyTable;
use chatgate_core::WallClock;
use chatgate_core::{SERVE_SETTINGS, ServeConfig, Sources};
use clap::ArgMatches;

use crate::provider::connector::Connectors;
use crate::reload::keys::KeysSource;
use crate::runtime::{Runtime, raise_fd_limit, random_u64, unix_ms_at_start};
use crate::serving::driver::Shared;
use crate::serving::listener::{bind, bind_shared, run_gateway};
use crate::stores::keys::KeyStore;
use crate::stores::ledger::Ledger;
use crate::telemetry::logging::init_logging;
use crate::tls::listener::ListenerTls;

use super::*;

/// Descriptors kept for what is not a connection: listeners, the ledger,
/// logs, stores.
const RESERVED_FILES: u64 = 64;

pub(super) fn serve<R: Runtime>(
    runtime: impl FnOnce(Option<usize>) -> Result<R, ExitCode>,
    m: &ArgMatches,
    bin: &str,
) -> ExitCode {
    match start_serving(runtime, m, bin) {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

/// `serve`: resolves the configuration, loads the keys, opens the ledger,
/// the provider connector, the listeners and the shared limiter, then
/// serves until a signal; `Err` is a start-up problem, in one line.
pub(super) fn start_serving<R: Runtime>(
    runtime: impl FnOnce(Option<usize>) -> Result<R, ExitCode>,
    m: &ArgMatches,
    bin: &str,
) -> Result<ExitCode, Error> {
    // Stamped before the reads: a change that lands between a read and
    // its watcher's first look is still a change.
    let config_stamp = config_path(m).and_then(|p| crate::reload::stamp(&p));
    let cfg = resolve_serve_config(m)?;
    init_logging(&cfg.log_level, cfg.log_json);
    let rt = match runtime(cfg.worker_threads) {
        Ok(rt) => rt,
        Err(code) => return Ok(code),
    };
    // The certificates before any file is opened or socket bound: a pair that does not load is
    // the one line the operator reads.
    let tls = match cfg.tls.clone() {
        Some(files) => Some(ListenerTls::open("public listener", files)?),
        None => None,
    };
    let admin_tls = match cfg.admin_tls.clone() {
        Some(files) => Some(ListenerTls::open("admin listener", files)?),
        None => None,
    };
    let keys_stamp = crate::reload::stamp(&cfg.keys_path);
    let keys_src = KeysSource {
        store: KeyStore::new(&cfg.keys_path),
        defaults: cfg.gateway.key_defaults(),
        audit: crate::stores::audit::path_beside(&cfg.ledger_path),
        loaded: keys_stamp,
    };
    let (keys, raw_keys) = load_keys(&cfg, &keys_src, bin)?;
    let summary = cfg.summary(keys.len());
    let ledger = Ledger::open(&cfg.ledger_path)?;
    let responses = match &cfg.responses_store {
        Some(at) => Some(crate::stores::responses::ResponsesStore::open(at)?),
        None => None,
    };
    let gateway = Gateway::new(
        with_signing_secret(cfg.gateway.clone()),
        keys,
        WallClock::new(unix_ms_at_start()),
        random_u64(),
    );
    let connectors = Connectors::new(
        rt.clone(),
        &gateway.endpoints(),
        cfg.pool_max_idle,
        cfg.pool_idle_timeout,
    )?;
    let listener = bind_shared(&cfg.listen, cfg.reuse_port)?;
    let admin = match cfg.admin_listen.as_deref().map(bind) {
        None => None,
        Some(Ok(l)) => Some(l),
        // `bind` fails only with `Error::Net`.
        Some(Err(Error::Net { what, source })) => {
            return Err(Error::Net {
                what: format!("admin listener: {what}"),
                source,
            });
        }
        Some(Err(e)) => return Err(e),
    };
    let spend = match &cfg.ledger_postgres {
        Some(url) => crate::stores::spend::SpendSource::Postgres(url.clone()),
        None => crate::stores::spend::SpendSource::File(cfg.ledger_path.clone()),
    };
    // This process's book of spend (and its console) starts from its
    // ledger, so a restart forgets nothing. With Redis the shared store
    // decides admission; this book is what the console shows as this
    // instance's spend, and what the fail-open fallback admits on.
    seed_spend(&gateway, &cfg.ledger_path)?;
    let shared_limits = match cfg.redis.clone() {
        None => None,
        Some(redis) => Some(Arc::new(crate::stores::redis::SharedLimiter::new(
            rt.clone(),
            redis,
            cfg.upstream_ca.as_deref(),
            cfg.redis_timeout,
            spend,
        )?)),
    };
    let bound = Bound {
        listener,
        admin,
        keys_src: Some(keys_src),
        raw_keys,
        endpoints_src: config_path(m).map(|path| crate::reload::endpoints::EndpointsSource {
            path,
            flags: serve_flags(m),
            env: std::env::vars().collect(),
            loaded: config_stamp,
        }),
        ledger_postgres: cfg
            .ledger_postgres
            .clone()
            .map(|url| (url, cfg.ledger_path.clone())),
        otlp: cfg.otlp.clone().map(|e| (e, cfg.upstream_ca.clone())),
        tls,
        admin_tls,
        responses,
    };
    Ok(run_bound(
        rt,
        bound,
        (gateway, shared_limits),
        connectors,
        ledger,
        &summary,
    ))
}

/// `config` with the secret that signs thinking blocks and seals reasoning:
/// the one `signing_secret_env` names, else one made now, for this process
/// only (said in the log: its signatures survive neither a restart nor
/// another instance).
pub(super) fn with_signing_secret(
    mut config: chatgate_core::GatewayConfig,
) -> chatgate_core::GatewayConfig {
    let r = &mut config.reasoning;
    match &r.secret_env {
        Some(var) => tracing::info!(
            variable = var.as_str(),
            "thinking signatures and sealed reasoning use the shared signing secret"
        ),
        None => {
            let hex: String = crate::runtime::random_32()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            r.secret = Some(chatgate_core::Secret::new(hex));
            tracing::info!(
                "no signing_secret_env: this process made its own signing secret; the thinking signatures and sealed reasoning it gives clients hold for it alone, not after a restart nor on another instance (set signing_secret_env to the same secret on every instance)"
            );
        }
    }
    config
}

/// Seeds the process's book of spend, and the console's last day, from the
/// local ledger.
pub(super) fn seed_spend(gateway: &Gateway, ledger: &str) -> Result<(), Error> {
    let unix_ms = now_unix_ms();
    let console = gateway.console();
    let routes = gateway.endpoints();
    let tally = crate::stores::spend::tally_file(ledger, unix_ms, |line| {
        // An unreadable line is counted (and warned about) by the tally.
        let _ = console.seed_line(line, unix_ms, routes.catalog());
    })?;
    for (key, spent) in &tally.keys {
        gateway.quota().seed(key, *spent, unix_ms);
    }
    Ok(())
}

/// The `serve` flags given, by setting key.
pub(super) fn serve_flags(m: &ArgMatches) -> HashMap<String, String> {
    SERVE_SETTINGS
        .iter()
        .filter_map(|s| {
            m.get_one::<String>(s.key)
                .map(|v| (s.key.to_owned(), v.clone()))
        })
        .collect()
}

/// The config file's path (`--config`, or `CHATGATE_CONFIG`).
pub(super) fn config_path(m: &ArgMatches) -> Option<String> {
    m.get_one::<String>("config")
        .cloned()
        .or_else(|| std::env::var("CHATGATE_CONFIG").ok())
}

/// Flags, `CHATGATE_*` variables and the config file, resolved.
pub(super) fn resolve_serve_config(m: &ArgMatches) -> Result<ServeConfig, Error> {
    // All of it: `[[upstream]]` tables name the variables their keys are in.
    let env: HashMap<String, String> = std::env::vars().collect();
    let flags = serve_flags(m);
    let file = match &config_path(m) {
        Some(p) => Some(std::fs::read_to_string(p).map_err(|source| Error::File {
            what: format!("cannot read the config file '{p}'"),
            source,
        })?),
        None => None,
    };
    Ok(ServeConfig::resolve(Sources { flags, env, file })?)
}

/// The keys: a keys file readable, valid, not empty, or the keys in
/// PostgreSQL (none is fine: the admin API adds them), and within what the
/// shared limiter computes exactly, with Redis. With PostgreSQL, the keys
/// as written too, for its watcher.
pub(super) fn load_keys(
    cfg: &ServeConfig,
    src: &KeysSource,
    bin: &str,
) -> Result<(KeyTable, Option<Vec<chatgate_core::RawKey>>), Error> {
    let path = &cfg.keys_path;
    let label = src.store.label();
    let (keys, raw) = match &src.store {
        KeyStore::File(_) => {
            let new = format!("`{bin} keys new --keys {path} --name NAME`");
            // A whole message, not `Error::File`: the way out comes after the cause.
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::Config(format!(
                    "cannot read the keys file '{path}': {e}; create it with {new}"
                ))
            })?;
            let keys = KeyTable::parse_toml(&text, cfg.gateway.key_defaults())
                .map_err(|e| Error::Config(format!("{e} ({path})")))?;
            if keys.is_empty() {
                return Err(Error::Config(format!(
                    "the keys file '{path}' has no keys; create one with {new}"
                )));
            }
            (keys, None)
        }
        KeyStore::Postgres(_) => {
            let raw = src.store.read()?;
            let keys = KeyTable::from_raw(&raw, &src.defaults)
                .map_err(|e| Error::Config(format!("{e} ({label})")))?;
            (keys, Some(raw))
        }
    };
    if cfg.redis.is_some() {
        crate::stores::redis::check_keys(&keys)
            .map_err(|e| Error::Config(format!("{e} ({label})")))?;
    }
    Ok((keys, raw))
}

/// The sockets a gateway serves, and where its keys reload from.
pub(super) struct Bound {
    pub(super) listener: std::net::TcpListener,
    pub(super) admin: Option<std::net::TcpListener>,
    pub(super) keys_src: Option<KeysSource>,
    /// The keys as read from PostgreSQL at start (their watcher's first
    /// version), when they live there.
    pub(super) raw_keys: Option<Vec<chatgate_core::RawKey>>,
    /// Where the provider pool reloads from (the config file).
    pub(super) endpoints_src: Option<crate::reload::endpoints::EndpointsSource>,
    /// PostgreSQL URL and the local ledger it ships from.
    pub(super) ledger_postgres: Option<(String, String)>,
    /// Where traces go (and the extra CA for TLS to the collector).
    pub(super) otlp: Option<(chatgate_core::OtlpExport, Option<String>)>,
    /// TLS on the public listener.
    pub(super) tls: Option<Arc<ListenerTls>>,
    /// TLS on the admin listener.
    pub(super) admin_tls: Option<Arc<ListenerTls>>,
    /// The Responses API's store, when it keeps responses.
    pub(super) responses: Option<Arc<crate::stores::responses::ResponsesStore>>,
}

pub(super) fn run_bound<R: Runtime>(
    rt: R,
    bound: Bound,
    (gateway, shared_limits): (
        Arc<Gateway>,
        Option<Arc<crate::stores::redis::SharedLimiter<R>>>,
    ),
    connectors: Connectors<R>,
    ledger: Ledger,
    summary: &str,
) -> ExitCode {
    let Bound {
        listener,
        admin,
        keys_src,
        raw_keys,
        endpoints_src,
        ledger_postgres,
        otlp,
        tls,
        admin_tls,
        responses,
    } = bound;
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => return fail(format!("cannot read the listening address: {e}")),
    };
    let shared = Arc::new(Shared {
        rt: rt.clone(),
        gateway,
        connectors,
        ledger,
        shared_limits,
        keys: keys_src.clone(),
        ledger_postgres: ledger_postgres.as_ref().map(|(url, _)| url.clone()),
        draining: event_listener::Event::new(),
        tls,
        admin_tls,
        responses,
        runs: crate::serving::runs::Runs::default(),
    });
    if let (Some(src), Some(raw)) = (&keys_src, raw_keys) {
        crate::reload::keys::watch_postgres(&shared, src, raw);
    }
    let listener = match rt.listener(listener) {
        Ok(l) => l,
        Err(e) => return fail(format!("cannot listen on {addr}: {e}")),
    };
    let mut admin_addr = None;
    if let Some(admin) = admin {
        admin_addr = admin.local_addr().ok();
        match rt.listener(admin) {
            Ok(l) => rt.spawn(crate::serving::admin::run_admin(Arc::clone(&shared), l)),
            Err(e) => return fail(format!("admin listener: {e}")),
        }
    }
    rt.spawn(crate::reload::watch(
        Arc::clone(&shared),
        keys_src,
        endpoints_src,
    ));
    if let Some(l) = &shared.shared_limits {
        rt.spawn(Arc::clone(l).renew_leases());
    }
    if let Some((export, ca)) = otlp.clone() {
        rt.spawn(crate::telemetry::exporter::run(
            rt.clone(),
            Arc::clone(&shared.gateway),
            export,
            ca,
        ));
    }
    rt.spawn(crate::provider::probe::run(Arc::clone(&shared)));
    if let Some(store) = &shared.responses {
        rt.spawn(Arc::clone(store).reap(rt.clone(), Arc::clone(&shared.gateway)));
    }
    let limit = raise_fd_limit();
    let files = limit.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
    tracing::info!("starting: {summary} open_files={files}");
    // A proxied stream holds two descriptors (the client's and the
    // provider's): say so when they, not max_connections, set how many
    // streams this instance holds (by more than a tenth), rather than let
    // accept fail later.
    let max = shared.gateway.config().max_connections as u64;
    let holds = |files: u64| files.saturating_sub(RESERVED_FILES) / 2;
    if let Some(files) = limit.filter(|&f| holds(f) < max - max / 10) {
        let streams = holds(files);
        tracing::warn!(
            open_files = files,
            max_connections = max,
            "the open-files limit holds about {streams} proxied streams, fewer than max_connections: raise it (ulimit -n, LimitNOFILE=) to twice max_connections or more"
        );
    }
    // The handlers go in before the address is announced: whoever reads the
    // line may signal at once, and that must drain, not kill.
    let stop = rt.shutdown_signal();
    let scheme = |tls: &Option<Arc<ListenerTls>>| if tls.is_some() { "https" } else { "http" };
    println!("chatgate listening on {}://{addr}/v1", scheme(&shared.tls));
    if let Some(a) = admin_addr {
        println!(
            "chatgate admin listening on {}://{a}",
            scheme(&shared.admin_tls)
        );
    }
    let _ = std::io::stdout().flush();
    let shipper = ledger_postgres
        .map(|(url, path)| crate::stores::postgres::start(url, path, Arc::clone(&shared.gateway)));
    let gateway = Arc::clone(&shared.gateway);
    rt.block_on(run_gateway(shared, listener, stop));
    if let Some((export, ca)) = otlp {
        // The spans of the requests the drain finished, before exit.
        rt.block_on(crate::telemetry::exporter::flush(
            rt.clone(),
            gateway,
            export,
            ca,
            Duration::from_secs(5),
        ));
    }
    if let Some((state, thread)) = shipper {
        // A last pass ships what the drain appended; what PostgreSQL cannot
        // take now stays in the local ledger for the next start.
        state.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !thread.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    ExitCode::SUCCESS
}
