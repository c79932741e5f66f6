//! The command line shared by every chatgate binary.
//!
//! ```text
//! chatgate-<runtime> serve  [--config FILE] [--listen ADDR] [--upstream URL] [--keys FILE] [--ledger FILE] ...
//! chatgate-<runtime> keys new --keys FILE --name NAME [--rpm N] [--tpm N]
//! chatgate-<runtime> keys list|revoke NAME|rotate NAME [--grace DURATION] --keys FILE
//! chatgate-<runtime> usage  --ledger FILE [--by hour|day|month] [--since T] [--until T] [--key NAME] [--format table|csv|json]
//! chatgate-<runtime> demo   [--listen ADDR]
//! chatgate-<runtime> sim    --listen ADDR [--ttft-ms N] [--token-ms N] [--fault NAME] ...
//! ```
//!
//! Flags, `CHATGATE_*` variables and the config file are resolved by
//! `chatgate_core::config` (flag > environment > file > default). Start-up
//! problems print one clear line and exit with status 2.

use std::collections::HashMap;
use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use chatgate_core::Gateway;
use chatgate_core::Limits;
use chatgate_core::{GatewayConfig, UpstreamTarget};
use chatgate_core::{KeyEntry, KeyTable, is_valid_name, key_hash_hex, key_sha256, mint_key};
use chatgate_core::{SERVE_SETTINGS, ServeConfig, Sources, env_name, flag_name};
use chatgate_core::{WallClock, rfc3339_ms};
use chatgate_sim::{Fault, SimOptions, SimServer};
use clap::{Arg, ArgAction, ArgMatches, Command};

use crate::driver::Shared;
use crate::keys::KeysSource;
use crate::ledger::Ledger;
use crate::logging::init_logging;
use crate::runtime::{Runtime, raise_fd_limit, random_32, random_u64, unix_ms_at_start};
use crate::serve::{bind, run_gateway};
use crate::sim::run_sim;
use crate::upstream::Connectors;

/// Exit status for start-up problems (bad settings, missing keys, port in use).
pub const EXIT_CONFIG: u8 = 2;

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

fn command(bin: &'static str) -> Command {
    let mut serve = Command::new("serve")
        .about("Run the gateway")
        .after_help(
            "Every flag can also be set with its CHATGATE_* environment variable or as a key in the \
             TOML --config file; a flag wins over the environment, which wins over the file. The \
             provider's API key is read only from CHATGATE_UPSTREAM_API_KEY.",
        )
        .arg(
            Arg::new("config")
                .long("config")
                .value_name("FILE")
                .help("TOML config file (keys as the flags, with '_' for '-') [env: CHATGATE_CONFIG]"),
        );
    for s in SERVE_SETTINGS {
        let mut help = format!("{} [env: {}]", s.help, env_name(s.key));
        if let Some(d) = s.default {
            help.push_str(&format!(" [default: {d}]"));
        }
        let mut arg = Arg::new(s.key)
            .long(leak(flag_name(s.key)))
            .value_name(s.value)
            .help(leak(help));
        if s.value == "BOOL" {
            // A switch: given alone it means true.
            arg = arg.num_args(0..=1).default_missing_value("true");
        }
        serve = serve.arg(arg);
    }
    let keys = Command::new("keys")
        .about("Manage client keys")
        .subcommand_required(true)
        .subcommand(
            Command::new("new")
                .about("Mint a key: prints it once on stdout, appends its SHA-256 to the keys file (mode 0600)")
                .arg(Arg::new("keys").long("keys").value_name("FILE").required(true).help("Keys file (created if missing)"))
                .arg(Arg::new("name").long("name").value_name("NAME").required(true).help("Name of the key (letters, digits, - _ . @)"))
                .arg(Arg::new("rpm").long("rpm").value_name("N").value_parser(clap::value_parser!(u64).range(1..)).help("Requests per minute for this key [default: 60]"))
                .arg(Arg::new("tpm").long("tpm").value_name("N").value_parser(clap::value_parser!(u64).range(1..)).help("Tokens per minute for this key [default: 100000]"))
                .args(quota_args(false)),
        )
        .subcommand(
            Command::new("set")
                .about("Change a key's limits without minting a new secret; a running gateway applies it within a second")
                .arg(Arg::new("name").value_name("NAME").required(true).help("Name of the key"))
                .arg(keys_file_arg())
                .arg(Arg::new("rpm").long("rpm").value_name("N").value_parser(clap::value_parser!(u64).range(1..)).help("Requests per minute"))
                .arg(Arg::new("tpm").long("tpm").value_name("N").value_parser(clap::value_parser!(u64).range(1..)).help("Tokens per minute"))
                .args(quota_args(true)),
        )
        .subcommand(
            Command::new("list")
                .about("List the keys: name, limits, creation and expiry times, the first 8 characters of the hash")
                .arg(keys_file_arg()),
        )
        .subcommand(
            Command::new("revoke")
                .about("Remove a key (every entry of that name); a running gateway refuses it within a second")
                .arg(Arg::new("name").value_name("NAME").required(true).help("Name of the key"))
                .arg(keys_file_arg()),
        )
        .subcommand(
            Command::new("rotate")
                .about("Mint a new key under the same name and limits; the old one stays valid for the grace period")
                .arg(Arg::new("name").value_name("NAME").required(true).help("Name of the key"))
                .arg(Arg::new("grace").long("grace").value_name("DURATION").default_value("24h").help("How long the old key stays valid (e.g. 30m, 24h, 0s)"))
                .arg(keys_file_arg()),
        );
    let usage = Command::new("usage")
        .about("Usage report from the ledger: requests, tokens, incomplete streams and cost per key and period")
        .arg(Arg::new("ledger").long("ledger").value_name("FILE").env("CHATGATE_LEDGER").default_value("chatgate-ledger.jsonl").help("Ledger file ('-' for stdin)"))
        .arg(Arg::new("by").long("by").value_name("PERIOD").value_parser(["hour", "day", "month"]).default_value("day").help("Group by hour, day or month (UTC)"))
        .arg(Arg::new("since").long("since").value_name("TIME").help("Only lines at or after this time (RFC 3339, or a date YYYY-MM-DD: midnight UTC)"))
        .arg(Arg::new("until").long("until").value_name("TIME").help("Only lines before this time (RFC 3339 or a date)"))
        .arg(Arg::new("key").long("key").value_name("NAME").help("Only this key"))
        .arg(Arg::new("postgres").long("postgres").value_name("URL").env("CHATGATE_LEDGER_POSTGRES").help("Read the shared ledger's table in PostgreSQL instead of a file"))
        .arg(Arg::new("format").long("format").value_name("FORMAT").value_parser(["table", "csv", "json"]).default_value("table").help("Output format"))
        .arg(Arg::new("budgets").long("budgets").action(ArgAction::SetTrue).conflicts_with_all(["since", "until"]).requires("keys").help("Instead: each key's budget, spent and remaining in its current period (needs --keys)"))
        .arg(Arg::new("keys").long("keys").value_name("FILE").env("CHATGATE_KEYS").help("Keys file: the budgets, for --budgets"))
        .arg(Arg::new("default-budget-usd").long("default-budget-usd").value_name("USD").env("CHATGATE_DEFAULT_BUDGET_USD").allow_hyphen_values(true).help("The gateway's --default-budget-usd, for keys that set none (--budgets)"))
        .arg(Arg::new("default-budget-period").long("default-budget-period").value_name("PERIOD").env("CHATGATE_DEFAULT_BUDGET_PERIOD").value_parser(["day", "week", "month", "total"]).default_value("month").help("The gateway's --default-budget-period (--budgets)"));
    let demo = Command::new("demo")
        .about("Run the gateway with a built-in simulated provider and a throwaway key: no setup, no network")
        .arg(Arg::new("listen").long("listen").value_name("ADDR").help("Address to listen on [env: CHATGATE_LISTEN] [default: 127.0.0.1:8080]"));
    let sim = Command::new("sim")
        .about("Run the simulated OpenAI-compatible reasoning provider alone (for tests and benchmarks)")
        .after_help(
            "Requests can choose their own timing and faults with an \"x_sim\" object in the body or a \
             [[sim:key=value,...]] marker in the last user message (keys: fault, after, status, message, \
             retry_after, bytes, count, die, template_tokens, ttft_ms, token_ms, reasoning_tokens, answer_tokens, framing, split_ms). \
             POST /_sim/fault {\"fault\": NAME, …, \"for_ms\": N} sets a fault for every request (for N ms), DELETE clears it. \
             GET /_sim/journal lists what was received and how each exchange ended; GET /_sim/stats \
             gives running totals (exchanges, outcomes, tokens reported, exchanges at once) and the open \
             connections; POST /v1/traces accepts any OTLP export (a trace sink for benchmarks). Set \
             CHATGATE_SIM_API_KEY to require that bearer key.",
        )
        .arg(Arg::new("listen").long("listen").value_name("ADDR").required(true).help("Address to listen on (port 0 picks a free one; the address is printed)"))
        .arg(u64_arg("ttft-ms", "Time to first token, milliseconds [default: 0]"))
        .arg(u64_arg("token-ms", "Time per token, milliseconds [default: 0: as fast as possible]"))
        .arg(u64_arg("reasoning-tokens", "Reasoning tokens per answer [default: 24-40, from the prompt]"))
        .arg(u64_arg("answer-tokens", "Answer tokens per answer [default: 12-24, from the prompt]"))
        .arg(
            Arg::new("fault")
                .long("fault")
                .value_name("NAME")
                .help("Apply this fault to every request: reject, reset, omit_done, stall_headers, stall, garbage, bad_chunk, huge_event, data_after_done, heartbeat_after_finish, error_event, no_usage, close_after_headers, json_for_stream, pings"),
        )
        .arg(u64_arg("fault-after", "Events before the fault [default: 2]"))
        .arg(u64_arg("template-tokens", "Prompt tokens a chat template adds to every reported prompt [default: 0]"))
        .arg(Arg::new("strict-request-id").long("strict-request-id").action(ArgAction::SetTrue).help("Refuse a request whose X-Request-Id is not a UUID with a 400 and no body (as llama-cpp-python's server does)"))
        .arg(u64_arg("fault-status", "Status of the reject fault [default: 500]"));
    Command::new(bin)
        .version(env!("CARGO_PKG_VERSION"))
        .about("chatgate: an OpenAI-compatible gateway for a reasoning model")
        .subcommand_required(true)
        .arg_required_else_help(true)
        .subcommand(serve)
        .subcommand(keys)
        .subcommand(usage)
        .subcommand(demo)
        .subcommand(sim)
}

fn keys_file_arg() -> Arg {
    Arg::new("keys")
        .long("keys")
        .value_name("FILE")
        .env("CHATGATE_KEYS")
        .required(true)
        .help("Keys file")
}

fn u64_arg(name: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name("N")
        .value_parser(clap::value_parser!(u64))
        .action(ArgAction::Set)
        .help(help)
}

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    crate::logging::flush();
    eprintln!("chatgate: {msg}");
    ExitCode::from(EXIT_CONFIG)
}

/// Parses the command line and runs the chosen command on the runtime
/// `runtime(threads)` builds: `threads` is `serve`'s `--worker-threads`
/// (`None`: one per core, as for every other command).
pub fn main<R: Runtime>(
    runtime: impl FnOnce(Option<usize>) -> Result<R, String>,
    bin: &'static str,
) -> ExitCode {
    let matches = match command(bin).try_get_matches() {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_CONFIG } else { 0 });
        }
    };
    let started = |threads: Option<usize>| {
        runtime(threads).map_err(|e| fail(format!("cannot start the runtime: {e}")))
    };
    let code = match matches.subcommand() {
        Some(("serve", m)) => serve(started, m, bin),
        Some(("keys", m)) => match m.subcommand() {
            Some(("new", m)) => keys_new(m),
            Some(("list", m)) => keys_list(m),
            Some(("set", m)) => keys_set(m),
            Some(("revoke", m)) => keys_revoke(m),
            Some(("rotate", m)) => keys_rotate(m),
            _ => fail("unknown keys command"),
        },
        Some(("usage", m)) => usage(m),
        Some(("demo", m)) => started(None).map_or_else(|code| code, |rt| demo(rt, m)),
        Some(("sim", m)) => started(None).map_or_else(|code| code, |rt| sim(rt, m)),
        _ => fail("unknown command"),
    };
    crate::logging::flush();
    code
}

fn serve<R: Runtime>(
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
fn start_serving<R: Runtime>(
    runtime: impl FnOnce(Option<usize>) -> Result<R, ExitCode>,
    m: &ArgMatches,
    bin: &str,
) -> Result<ExitCode, String> {
    // Stamped before the reads: a change that lands between a read and
    // its watcher's first look is still a change.
    let config_stamp = config_path(m).and_then(|p| crate::keys::stamp(&p));
    let cfg = resolve_serve_config(m)?;
    init_logging(&cfg.log_level, cfg.log_json);
    let rt = match runtime(cfg.worker_threads) {
        Ok(rt) => rt,
        Err(code) => return Ok(code),
    };
    let keys_stamp = crate::keys::stamp(&cfg.keys_path);
    let keys = load_keys(&cfg, bin)?;
    let summary = cfg.summary(keys.len());
    let ledger = Ledger::open(&cfg.ledger_path)?;
    let gateway = Gateway::new(
        cfg.gateway.clone(),
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
    let listener = bind(&cfg.listen)?;
    let admin = match cfg.admin_listen.as_deref().map(bind) {
        None => None,
        Some(Ok(l)) => Some(l),
        Some(Err(e)) => return Err(format!("admin listener: {e}")),
    };
    let keys_src = KeysSource {
        path: cfg.keys_path.clone(),
        defaults: cfg.gateway.key_defaults(),
        loaded: keys_stamp,
    };
    let spend = match &cfg.ledger_postgres {
        Some(url) => crate::spend::SpendSource::Postgres(url.clone()),
        None => crate::spend::SpendSource::File(cfg.ledger_path.clone()),
    };
    // This process's book of spend (and its console) starts from its
    // ledger, so a restart forgets nothing. With Redis the shared store
    // decides admission; this book is what the console shows as this
    // instance's spend, and what the fail-open fallback admits on.
    seed_spend(&gateway, &cfg.ledger_path)?;
    let shared_limits = match cfg.redis.clone() {
        None => None,
        Some(url) => Some(Arc::new(crate::redis::SharedLimiter::new(
            rt.clone(),
            url,
            cfg.upstream_ca.as_deref(),
            cfg.redis_timeout,
            spend,
        )?)),
    };
    let bound = Bound {
        listener,
        admin,
        keys_src: Some(keys_src),
        pool_src: config_path(m).map(|path| crate::pool::PoolSource {
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

/// Seeds the process's book of spend, and the console's last day, from the
/// local ledger.
fn seed_spend(gateway: &Gateway, ledger: &str) -> Result<(), String> {
    let unix_ms = now_unix_ms();
    let console = gateway.console();
    let tally = crate::spend::tally_file(ledger, unix_ms, |line| {
        // An unreadable line is counted (and warned about) by the tally.
        let _ = console.seed_line(line, unix_ms);
    })?;
    for (key, spent) in &tally.keys {
        gateway.quota().seed(key, *spent, unix_ms);
    }
    Ok(())
}

/// The `serve` flags given, by setting key.
fn serve_flags(m: &ArgMatches) -> HashMap<String, String> {
    SERVE_SETTINGS
        .iter()
        .filter_map(|s| {
            m.get_one::<String>(s.key)
                .map(|v| (s.key.to_owned(), v.clone()))
        })
        .collect()
}

/// The config file's path (`--config`, or `CHATGATE_CONFIG`).
fn config_path(m: &ArgMatches) -> Option<String> {
    m.get_one::<String>("config")
        .cloned()
        .or_else(|| std::env::var("CHATGATE_CONFIG").ok())
}

/// Flags, `CHATGATE_*` variables and the config file, resolved.
fn resolve_serve_config(m: &ArgMatches) -> Result<ServeConfig, String> {
    // All of it: `[[upstream]]` tables name the variables their keys are in.
    let env: HashMap<String, String> = std::env::vars().collect();
    let flags = serve_flags(m);
    let file = match &config_path(m) {
        Some(p) => Some(
            std::fs::read_to_string(p)
                .map_err(|e| format!("cannot read the config file '{p}': {e}"))?,
        ),
        None => None,
    };
    ServeConfig::resolve(Sources { flags, env, file }).map_err(|e| e.to_string())
}

/// The keys file: readable, valid, not empty (and within what the shared
/// limiter computes exactly, with Redis).
fn load_keys(cfg: &ServeConfig, bin: &str) -> Result<KeyTable, String> {
    let path = &cfg.keys_path;
    let new = format!("`{bin} keys new --keys {path} --name NAME`");
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the keys file '{path}': {e}; create it with {new}"))?;
    let keys = KeyTable::parse_toml(&text, cfg.gateway.key_defaults())
        .map_err(|e| format!("{e} ({path})"))?;
    if keys.is_empty() {
        return Err(format!(
            "the keys file '{path}' has no keys; create one with {new}"
        ));
    }
    if cfg.redis.is_some() {
        crate::redis::check_keys(&keys).map_err(|e| format!("{e} ({path})"))?;
    }
    Ok(keys)
}

/// The sockets a gateway serves, and where its keys reload from.
struct Bound {
    listener: std::net::TcpListener,
    admin: Option<std::net::TcpListener>,
    keys_src: Option<KeysSource>,
    /// Where the provider pool reloads from (the config file).
    pool_src: Option<crate::pool::PoolSource>,
    /// PostgreSQL URL and the local ledger it ships from.
    ledger_postgres: Option<(String, String)>,
    /// Where traces go (and the extra CA for TLS to the collector).
    otlp: Option<(chatgate_core::OtlpExport, Option<String>)>,
}

fn run_bound<R: Runtime>(
    rt: R,
    bound: Bound,
    (gateway, shared_limits): (Arc<Gateway>, Option<Arc<crate::redis::SharedLimiter<R>>>),
    connectors: Connectors<R>,
    ledger: Ledger,
    summary: &str,
) -> ExitCode {
    let Bound {
        listener,
        admin,
        keys_src,
        pool_src,
        ledger_postgres,
        otlp,
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
        draining: event_listener::Event::new(),
    });
    let listener = match rt.listener(listener) {
        Ok(l) => l,
        Err(e) => return fail(format!("cannot listen on {addr}: {e}")),
    };
    let mut admin_addr = None;
    if let Some(admin) = admin {
        admin_addr = admin.local_addr().ok();
        match rt.listener(admin) {
            Ok(l) => rt.spawn(crate::admin::run_admin(Arc::clone(&shared), l)),
            Err(e) => return fail(format!("admin listener: {e}")),
        }
    }
    if let Some(src) = keys_src {
        rt.spawn(crate::keys::watch(Arc::clone(&shared), src));
    }
    if let Some(l) = &shared.shared_limits {
        rt.spawn(Arc::clone(l).renew_leases());
    }
    if let Some((export, ca)) = otlp.clone() {
        rt.spawn(crate::otlp::run(
            rt.clone(),
            Arc::clone(&shared.gateway),
            export,
            ca,
        ));
    }
    if let Some(src) = pool_src {
        rt.spawn(crate::pool::watch(Arc::clone(&shared), src));
    }
    rt.spawn(crate::probe::run(Arc::clone(&shared)));
    let files = raise_fd_limit().map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
    tracing::info!("starting: {summary} open_files={files}");
    // The handlers go in before the address is announced: whoever reads the
    // line may signal at once, and that must drain, not kill.
    let stop = rt.shutdown_signal();
    println!("chatgate listening on http://{addr}/v1");
    if let Some(a) = admin_addr {
        println!("chatgate admin listening on http://{a}");
    }
    let _ = std::io::stdout().flush();
    let shipper = ledger_postgres
        .map(|(url, path)| crate::pgledger::start(url, path, Arc::clone(&shared.gateway)));
    let gateway = Arc::clone(&shared.gateway);
    rt.block_on(run_gateway(shared, listener, stop));
    if let Some((export, ca)) = otlp {
        // The spans of the requests the drain finished, before exit.
        rt.block_on(crate::otlp::flush(
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

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `--budget-usd`, `--budget-period`, `--max-in-flight` (`none` removes
/// a value, for `keys set`).
fn quota_args(set: bool) -> [Arg; 3] {
    let none = if set { "|none" } else { "" };
    [
        Arg::new("budget_usd")
            .long("budget-usd")
            .allow_hyphen_values(true)
            .value_name(if set { "USD|none" } else { "USD" })
            .help(leak(format!(
                "Spend budget in USD per period{} [default: --default-budget-usd of the gateway, or none]",
                if set { " (none: the default applies)" } else { "" }
            ))),
        Arg::new("budget_period")
            .long("budget-period")
            .value_name("PERIOD")
            .help("Budget period: day, week (ISO, from Monday), month or total, in UTC [default: month]"),
        Arg::new("max_in_flight")
            .long("max-in-flight")
            .allow_hyphen_values(true)
            .value_name(leak(format!("N{none}")))
            .help("Most requests of this key open at once, streams included [default: no cap]"),
    ]
}

/// The quota flags given, as changes to a key (`none` removes a value).
fn quota_changes(m: &ArgMatches) -> Result<crate::keys::KeyChanges, String> {
    let budget_usd = match m.get_one::<String>("budget_usd").map(String::as_str) {
        None => None,
        Some("none") => Some(None),
        Some(v) => {
            let usd = v
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("--budget-usd '{v}' is not an amount of USD (or none)"))?;
            chatgate_core::usd_to_nano(usd).map_err(|e| format!("--budget-usd: {e}"))?;
            Some(Some(usd))
        }
    };
    let max_in_flight = match m.get_one::<String>("max_in_flight").map(String::as_str) {
        None => None,
        Some("none") => Some(None),
        Some(v) => Some(Some(v.trim().parse::<u64>().map_err(|_| {
            format!("--max-in-flight '{v}' is not a whole number (or none)")
        })?)),
    };
    Ok(crate::keys::KeyChanges {
        rpm: m.get_one::<u64>("rpm").copied(),
        tpm: m.get_one::<u64>("tpm").copied(),
        budget_usd,
        budget_period: m.get_one::<String>("budget_period").cloned(),
        max_in_flight,
    })
}

fn keys_set(m: &ArgMatches) -> ExitCode {
    let path = m.get_one::<String>("keys").expect("required");
    let name = m.get_one::<String>("name").expect("required");
    let changes = match quota_changes(m) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    if changes == crate::keys::KeyChanges::default() {
        return fail(
            "keys set: nothing to change (give --rpm, --tpm, --budget-usd, --budget-period or --max-in-flight)",
        );
    }
    match crate::keys::set(path, name, &changes) {
        Ok(()) => {
            eprintln!(
                "Updated key '{name}' in {path}; a running gateway applies it within a second."
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

fn keys_list(m: &ArgMatches) -> ExitCode {
    let path = m.get_one::<String>("keys").expect("required");
    match crate::keys::list(path, now_unix_ms() / 1000) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

fn keys_revoke(m: &ArgMatches) -> ExitCode {
    let path = m.get_one::<String>("keys").expect("required");
    let name = m.get_one::<String>("name").expect("required");
    match crate::keys::revoke(path, name) {
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

fn keys_rotate(m: &ArgMatches) -> ExitCode {
    let path = m.get_one::<String>("keys").expect("required");
    let name = m.get_one::<String>("name").expect("required");
    let grace = m.get_one::<String>("grace").expect("defaulted");
    let Some(grace) = chatgate_core::parse_duration(grace) else {
        return fail(format!(
            "--grace '{grace}' is not a duration like 30m or 24h"
        ));
    };
    let key = mint_key(&random_32());
    match crate::keys::rotate(path, name, grace, now_unix_ms(), &key) {
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

fn usage(m: &ArgMatches) -> ExitCode {
    use chatgate_core::report::{By, Filter, Format};
    let path = m.get_one::<String>("ledger").expect("defaulted");
    let by = By::parse(m.get_one::<String>("by").expect("defaulted")).expect("checked by clap");
    let format =
        Format::parse(m.get_one::<String>("format").expect("defaulted")).expect("checked by clap");
    let time = |flag: &str| -> Result<Option<u64>, String> {
        match m.get_one::<String>(flag) {
            None => Ok(None),
            Some(t) => chatgate_core::parse_rfc3339(t).map(Some).ok_or_else(|| {
                format!("--{flag} '{t}' is not a time like 2026-11-22 or 2026-11-22T10:00:00Z")
            }),
        }
    };
    let filter = match (time("since"), time("until")) {
        (Ok(since), Ok(until)) => Filter {
            since,
            until,
            key: m.get_one::<String>("key").cloned(),
        },
        (Err(e), _) | (_, Err(e)) => return fail(e),
    };
    if m.get_flag("budgets") {
        return match budgets(m, filter.key.as_deref(), format) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        };
    }
    if let Some(url) = m.get_one::<String>("postgres") {
        let (since, until) = (filter.since, filter.until);
        let mut report = chatgate_core::report::Report::new(by, filter);
        return match crate::pgledger::report_from_postgres(url, &mut report, since, until) {
            Ok(()) => {
                print!("{}", report.render(format));
                ExitCode::SUCCESS
            }
            Err(e) => fail(format!("cannot read the ledger from PostgreSQL: {e}")),
        };
    }
    match crate::report::report(path, by, filter, format) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `usage --budgets`: the keys file's budgets (with the gateway's
/// defaults), and the spend of their current periods from the ledger the
/// gateway rebuilds its spend from (the file, or PostgreSQL).
fn budgets(
    m: &ArgMatches,
    only: Option<&str>,
    format: chatgate_core::report::Format,
) -> Result<String, String> {
    use chatgate_core::report::{BudgetRow, render_budgets};
    use chatgate_core::{Budget, KeyDefaults, KeyTable, Period};
    let path = m.get_one::<String>("keys").expect("required by --budgets");
    let period = m
        .get_one::<String>("default-budget-period")
        .expect("defaulted");
    let mut defaults = KeyDefaults {
        budget_period: Period::parse(period).expect("checked by clap"),
        ..KeyDefaults::default()
    };
    if let Some(usd) = m.get_one::<String>("default-budget-usd") {
        let limit_nano = usd
            .trim()
            .parse::<f64>()
            .map_err(|_| "not a number".to_owned())
            .and_then(chatgate_core::usd_to_nano)
            .map_err(|why| format!("--default-budget-usd '{usd}' is not an amount: {why}"))?;
        defaults.quota.budget = Some(Budget {
            limit_nano,
            period: defaults.budget_period,
        });
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the keys file '{path}': {e}"))?;
    let keys = KeyTable::parse_toml(&text, defaults).map_err(|e| format!("{e} ({path})"))?;
    let now = now_unix_ms();
    let tally = match m.get_one::<String>("postgres") {
        Some(url) => crate::pgledger::tally_postgres(url, now)?,
        None => {
            let ledger = m.get_one::<String>("ledger").expect("defaulted");
            crate::report::tally(ledger, now)?
        }
    };
    let rows: Vec<BudgetRow> = keys
        .entries()
        .iter()
        // A rotated key's old secret (it expires) shares its name and budget.
        .filter(|e| e.expires.is_none() && only.is_none_or(|k| k == e.name))
        .filter_map(|e| {
            let budget = e.quota.budget?;
            Some(BudgetRow {
                key: e.name.clone(),
                budget,
                spent_nano: tally.get(&e.name)[budget.period.index()],
            })
        })
        .collect();
    Ok(render_budgets(&rows, now, format))
}

fn keys_new(m: &ArgMatches) -> ExitCode {
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
fn append_private(path: &str, bytes: &[u8]) -> std::io::Result<()> {
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

fn demo<R: Runtime>(rt: R, m: &ArgMatches) -> ExitCode {
    init_logging("info", false);
    match start_demo(rt, m) {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

/// `demo`: the simulator on an ephemeral port, a throwaway key and ledger,
/// and the gateway in front of them.
fn start_demo<R: Runtime>(rt: R, m: &ArgMatches) -> Result<ExitCode, String> {
    let listen = m
        .get_one::<String>("listen")
        .cloned()
        .or_else(|| std::env::var("CHATGATE_LISTEN").ok())
        .unwrap_or_else(|| "127.0.0.1:8080".into());
    let sim_addr = start_demo_sim(&rt)?;
    let key = mint_key(&random_32());
    let keys = KeyTable::new(vec![KeyEntry {
        name: "demo".into(),
        sha256: key_sha256(&key),
        limits: Limits::default(),
        quota: chatgate_core::Quota::default(),
        created: None,
        expires: None,
        expires_unix: None,
    }])
    .map_err(|e| e.to_string())?;
    let ledger_path =
        std::env::temp_dir().join(format!("chatgate-demo-{}.jsonl", std::process::id()));
    let ledger_path = ledger_path.to_string_lossy().into_owned();
    let ledger = Ledger::open(&ledger_path)?;
    let upstream = UpstreamTarget::parse(&format!("http://{sim_addr}/v1"))?;
    // The console on an admin listener of its own port, with a fresh token.
    let admin = bind("127.0.0.1:0")?;
    let admin_addr = admin.local_addr().map_err(|e| e.to_string())?;
    let admin_token: String = random_32()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut config = GatewayConfig::new(upstream.clone());
    config.console_token = Some(chatgate_core::Secret::new(admin_token.clone()));
    let gateway = Gateway::new(
        config,
        keys,
        WallClock::new(unix_ms_at_start()),
        random_u64(),
    );
    let connectors = Connectors::new(
        rt.clone(),
        &gateway.endpoints(),
        64,
        Duration::from_secs(30),
    )?;
    let listener =
        bind(&listen).map_err(|e| format!("{e} (choose another address with --listen)"))?;
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or(listen);
    eprintln!(
        "\nchatgate demo: a simulated reasoning provider is built in; nothing leaves this machine.\n\
         Base URL: http://{addr}/v1\nAPI key:  {key}\nModel:    reasoning-model-k3\nLedger:   {ledger_path}\n\n\
         Try (streaming):\n  curl -N http://{addr}/v1/chat/completions \\\n    -H 'Authorization: Bearer {key}' \\\n    \
         -H 'Content-Type: application/json' \\\n    -d '{{\"model\":\"reasoning-model-k3\",\"stream\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"Why is the sky blue?\"}}]}}'\n\n\
         Or point an OpenAI SDK at it:\n  OPENAI_BASE_URL=http://{addr}/v1 OPENAI_API_KEY={key}\n\n\
         Console:  http://{admin_addr}/\nAdmin token: {admin_token}\n\nCtrl-C stops it.\n"
    );
    let summary = format!(
        "demo upstream={} ledger={ledger_path}",
        upstream.display_url()
    );
    let bound = Bound {
        listener,
        admin: Some(admin),
        keys_src: None,
        pool_src: None,
        ledger_postgres: None,
        otlp: None,
    };
    Ok(run_bound(
        rt,
        bound,
        (gateway, None),
        connectors,
        ledger,
        &summary,
    ))
}

/// The demo's simulator, on an ephemeral port, for as long as the process
/// lives (the gateway's drain decides when that ends).
fn start_demo_sim<R: Runtime>(rt: &R) -> Result<std::net::SocketAddr, String> {
    let listener = bind("127.0.0.1:0")?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let wall = WallClock::new(unix_ms_at_start());
    let sim = SimServer::new(
        SimOptions {
            ttft: Duration::from_millis(300),
            token_interval: Duration::from_millis(20),
            ..SimOptions::default()
        },
        wall,
    );
    let listener = rt.listener(listener).map_err(|e| e.to_string())?;
    rt.spawn(run_sim(rt.clone(), listener, sim, std::future::pending()));
    Ok(addr)
}

fn sim<R: Runtime>(rt: R, m: &ArgMatches) -> ExitCode {
    init_logging("warn", false);
    let ms = |k: &str| m.get_one::<u64>(k).copied().map(Duration::from_millis);
    let fault = match m.get_one::<String>("fault") {
        Some(name) => {
            let after = m.get_one::<u64>("fault-after").map(u64::to_string);
            let status = m.get_one::<u64>("fault-status").map(u64::to_string);
            let get = |k: &str| match k {
                "after" => after.clone(),
                "status" => status.clone(),
                _ => None,
            };
            match Fault::parse(name, &get) {
                Ok(f) => Some(f),
                Err(e) => return fail(e),
            }
        }
        None => None,
    };
    let options = SimOptions {
        ttft: ms("ttft-ms").unwrap_or(Duration::ZERO),
        token_interval: ms("token-ms").unwrap_or(Duration::ZERO),
        reasoning_tokens: m.get_one::<u64>("reasoning-tokens").map(|&n| n as u32),
        answer_tokens: m.get_one::<u64>("answer-tokens").map(|&n| n as u32),
        fault,
        api_key: std::env::var("CHATGATE_SIM_API_KEY")
            .ok()
            .filter(|k| !k.is_empty()),
        strict_request_id: m.get_flag("strict-request-id"),
        template_tokens: m.get_one::<u64>("template-tokens").copied().unwrap_or(0),
    };
    raise_fd_limit();
    let listen = m.get_one::<String>("listen").expect("required");
    let listener = match bind(listen) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let listener = match rt.listener(listener) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    // Handlers first: whoever reads the line may signal at once.
    let stop = rt.shutdown_signal();
    println!("sim listening on http://{addr}/v1");
    let _ = std::io::stdout().flush();
    let server = SimServer::new(options, WallClock::new(unix_ms_at_start()));
    rt.block_on(run_sim(rt.clone(), listener, server, stop));
    ExitCode::SUCCESS
}
