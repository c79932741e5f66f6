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
//!
//! | file | job |
//! |---|---|
//! | `mod.rs` | the command schema (clap) and the dispatch |
//! | `serve.rs` | `serve`: settings, keys, ledger, every task, the drain |
//! | `keys.rs` | the `keys` commands |
//! | `usage.rs` | the `usage` report and `usage --budgets` |
//! | `demo.rs` | `demo` and `sim` |

mod demo;
mod keys;
mod serve;
pub(crate) mod usage;

use std::process::ExitCode;

use chatgate_core::{SERVE_SETTINGS, env_name, flag_name};
use clap::{Arg, ArgAction, Command};

use crate::error::Error;
use crate::runtime::Runtime;

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
                .arg(keys_file_arg())
                .arg(ledger_arg())
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
                .arg(ledger_arg())
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
                .arg(keys_file_arg())
                .arg(ledger_arg()),
        )
        .subcommand(
            Command::new("rotate")
                .about("Mint a new key under the same name and limits; the old one stays valid for the grace period")
                .arg(Arg::new("name").value_name("NAME").required(true).help("Name of the key"))
                .arg(Arg::new("grace").long("grace").value_name("DURATION").default_value("24h").help("How long the old key stays valid (e.g. 30m, 24h, 0s)"))
                .arg(keys_file_arg())
                .arg(ledger_arg()),
        )
        .subcommand(
            Command::new("import")
                .about("Copy every key of a keys file (hashes, limits, times) into the store --keys names, e.g. PostgreSQL; names already there with the same entries are skipped")
                .arg(Arg::new("from").long("from").value_name("FILE").required(true).help("The keys file to import"))
                .arg(keys_file_arg())
                .arg(ledger_arg()),
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
             retry_after, bytes, count, die, template_tokens, ttft_ms, token_ms, reasoning_tokens, answer_tokens, framing, split_ms, \
             tools, tool, input, calls). \
             POST /_sim/fault {\"fault\": NAME, …, \"for_ms\": N or \"times\": N} sets a fault for every request (for N ms, or the next N), DELETE clears it. \
             GET /_sim/journal lists what was received and how each exchange ended; GET /_sim/stats \
             gives running totals (exchanges, outcomes, tokens reported, cached tokens included, exchanges at once) \
             and the open connections. Each simulator has its own prompt cache: cached_tokens is the longest \
             run of first messages it answered before; POST /v1/traces accepts any OTLP export (a trace sink for benchmarks). Set \
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
        .arg(Arg::new("require-reasoning-replay").long("require-reasoning-replay").value_name("PROVIDER").value_parser(["kimi", "deepseek"]).help("Refuse a request whose assistant tool-call message lacks its reasoning, with this provider's status, body and wording (and one whose reasoning for calls the simulator made is not what it produced)"))
        .arg(Arg::new("reasoning-field").long("reasoning-field").value_name("NAME").value_parser(["reasoning_content", "reasoning", "reasoning_details"]).help("The name the simulator gives its reasoning: reasoning_content (DeepSeek, Kimi) [default], reasoning (vLLM; also read back by that name) or reasoning_details (OpenRouter's blocks)"))
        .arg(Arg::new("continuation").long("continuation").value_name("MODE").value_parser(chatgate_sim::Continuation::NAMES).help("Which final assistant messages the simulator continues with the rest of its answer: none [default], prefix (one with \"prefix\": true, as DeepSeek and Mistral), continue_final_message (with add_generation_prompt false, as vLLM), final_assistant (any, as llama.cpp's server), or refuse (a 400, as a server that refuses prefill)"))
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

pub(super) fn keys_file_arg() -> Arg {
    Arg::new("keys")
        .long("keys")
        .value_name("FILE|URL")
        .env("CHATGATE_KEYS")
        .required(true)
        .help("Where the keys are: a keys file (created if missing), or a postgres:// URL (the keys every instance shares)")
}

/// `--ledger`: the audit file is beside it.
pub(super) fn ledger_arg() -> Arg {
    Arg::new("ledger")
        .long("ledger")
        .value_name("FILE")
        .env("CHATGATE_LEDGER")
        .help("The gateway's ledger: the change is recorded in the audit file beside it (FILE without .jsonl, then .audit.jsonl), which the console and GET /api/audit show; with keys in PostgreSQL it is recorded there in any case")
}

pub(super) fn u64_arg(name: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name("N")
        .value_parser(clap::value_parser!(u64))
        .action(ArgAction::Set)
        .help(help)
}

pub(super) fn fail(msg: impl std::fmt::Display) -> ExitCode {
    crate::telemetry::logging::flush();
    eprintln!("chatgate: {msg}");
    ExitCode::from(EXIT_CONFIG)
}

/// Parses the command line and runs the chosen command on the runtime
/// `runtime(threads)` builds: `threads` is `serve`'s `--worker-threads`
/// (`None`: one per core, as for every other command). A runtime that
/// cannot start ends the process with [`EXIT_CONFIG`] and
/// [`Error::Runtime`]'s line.
pub fn main<R: Runtime>(
    runtime: impl FnOnce(Option<usize>) -> std::io::Result<R>,
    bin: &'static str,
) -> ExitCode {
    let matches = match command(bin).try_get_matches() {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_CONFIG } else { 0 });
        }
    };
    let started = |threads: Option<usize>| runtime(threads).map_err(|e| fail(Error::Runtime(e)));
    let code = match matches.subcommand() {
        Some(("serve", m)) => serve::serve(started, m, bin),
        Some(("keys", m)) => match m.subcommand() {
            Some(("new", m)) => keys::new(m),
            Some(("list", m)) => keys::list(m),
            Some(("set", m)) => keys::set(m),
            Some(("revoke", m)) => keys::revoke(m),
            Some(("rotate", m)) => keys::rotate(m),
            Some(("import", m)) => keys::import(m),
            _ => fail("unknown keys command"),
        },
        Some(("usage", m)) => usage::usage(m),
        Some(("demo", m)) => started(None).map_or_else(|code| code, |rt| demo::demo(rt, m)),
        Some(("sim", m)) => started(None).map_or_else(|code| code, |rt| demo::sim(rt, m)),
        _ => fail("unknown command"),
    };
    crate::telemetry::logging::flush();
    code
}

pub(super) fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// `--budget-usd`, `--budget-period`, `--max-in-flight` (`none` removes
/// a value, for `keys set`), `--models`.
pub(super) fn quota_args(set: bool) -> [Arg; 4] {
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
        Arg::new("models")
            .long("models")
            .value_name(if set { "ID,…|all" } else { "ID,…" })
            .help(if set {
                "The models this key may call: catalogue ids or aliases, comma-separated (all: every model)"
            } else {
                "The models this key may call: catalogue ids or aliases, comma-separated [default: every model]"
            }),
    ]
}
