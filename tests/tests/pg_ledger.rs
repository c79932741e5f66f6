//! The shared ledger in PostgreSQL (`--ledger-postgres`), through both
//! binaries: every request's row arrives, once; PostgreSQL stopped mid-run
//! loses nothing and duplicates nothing after it returns; rows equal the
//! local ledger and the simulator's tokens; `usage --postgres` reports the
//! same totals as `usage --ledger`; a row PostgreSQL refuses stops nothing
//! after it; a role with no more than its rows is enough.

use std::time::{Duration, Instant};

use chatgate_tests::*;
use serde_json::Value;

/// (rows, distinct ids, tokens, cost); `None` until a gateway has created
/// the table.
fn try_rows(pg: &PgServer) -> Option<(i64, i64, i64, i64)> {
    let mut c = pg.client();
    let r = c
        .query_one(
            "SELECT count(*), count(DISTINCT request_id), coalesce(sum(prompt_tokens + completion_tokens), 0)::bigint, coalesce(sum(cost_nano_usd), 0)::bigint FROM chatgate_ledger",
            &[],
        )
        .ok()?;
    Some((r.get(0), r.get(1), r.get(2), r.get(3)))
}

fn rows(pg: &PgServer) -> (i64, i64, i64, i64) {
    try_rows(pg).expect("the table exists")
}

fn wait_rows(pg: &PgServer, n: i64) -> (i64, i64, i64, i64) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = try_rows(pg).unwrap_or_default();
        if r.0 >= n {
            return r;
        }
        assert!(Instant::now() < deadline, "{} rows, expected {n}", r.0);
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn ledger_and_pg_agree(bin: &str) {
    let mut pg = PgServer::start();
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec!["--ledger-postgres".into(), pg.url()],
            rpm: Some(100_000),
            tpm: Some(100_000_000),
            ..GwOptions::default()
        },
    );
    for i in 0..20 {
        let b = if i % 2 == 0 {
            body("")
        } else {
            stream_body("")
        };
        assert_eq!(gw.chat(&b).status, 200);
    }
    wait_rows(&pg, 20);
    // PostgreSQL goes away: requests are still served and kept locally.
    pg.stop();
    for i in 0..15 {
        let b = if i % 2 == 0 {
            body("")
        } else {
            stream_body("")
        };
        assert_eq!(gw.chat(&b).status, 200);
    }
    gw.ledger_len(35);
    std::thread::sleep(Duration::from_millis(300));
    pg.restart();
    let (count, distinct, tokens, cost) = wait_rows(&pg, 35);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rows(&pg).0, 35, "no duplicates arrive later");
    assert_eq!((count, distinct), (35, 35));
    let ledger = gw.ledger();
    let local_tokens: u64 = ledger
        .iter()
        .map(|r| r.prompt_tokens + r.completion_tokens)
        .sum();
    let local_cost: u64 = ledger.iter().map(|r| r.cost_nano_usd).sum();
    assert_eq!((tokens as u64, cost as u64), (local_tokens, local_cost));
    let stats = request(sim.addr, "GET", "/_sim/stats", None, None).json();
    let sim_tokens =
        stats["prompt_tokens"].as_u64().unwrap() + stats["completion_tokens"].as_u64().unwrap();
    assert_eq!(local_tokens, sim_tokens);
    // Reports from either source agree to the nano-dollar.
    let path = gw
        .dir
        .path()
        .join("ledger.jsonl")
        .to_string_lossy()
        .into_owned();
    let (code, from_file, err) = run(bin, &["usage", "--ledger", &path, "--format", "json"], &[]);
    assert_eq!(code, 0, "{err}");
    let (code, from_pg, err) = run(
        bin,
        &["usage", "--postgres", &pg.url(), "--format", "json"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let (a, b): (Value, Value) = (
        serde_json::from_str(&from_file).unwrap(),
        serde_json::from_str(&from_pg).unwrap(),
    );
    assert_eq!(a, b);
    assert_eq!(a["total"]["requests"], 35);
    // The outage was logged, and the shipper reported it.
    let log = gw.proc.stderr();
    assert!(
        log.contains("shipping to PostgreSQL failed") || log.contains("cannot ship to PostgreSQL"),
        "{log}"
    );
}

#[test]
fn smol() {
    ledger_and_pg_agree("chatgate-smol");
}

#[test]
fn tokio() {
    ledger_and_pg_agree("chatgate-tokio");
}

/// Three instances, both runtimes, one Redis and one PostgreSQL: every
/// answered request is one row, through an outage of PostgreSQL.
#[test]
fn three_instances_one_ledger() {
    let mut pg = PgServer::start();
    let redis = RedisServer::start();
    let sim = Sim::start(RUNTIMES[0], &[], &[]);
    let args = vec![
        "--ledger-postgres".to_owned(),
        pg.url(),
        "--redis".into(),
        redis.url(),
    ];
    let each = ["chatgate-smol", "chatgate-tokio", "chatgate-smol"].map(|bin| (bin, args.clone()));
    let gws = gateways_sharing_a_key(&sim, "team", 100_000, 100_000_000, &each);
    let mut answered = 0;
    for i in 0..60 {
        if i == 20 {
            pg.stop();
        }
        if i == 40 {
            pg.restart();
        }
        let b = if i % 3 == 0 {
            stream_body("")
        } else {
            body("")
        };
        let r = gws[i % 3].chat(&b);
        assert_eq!(r.status, 200);
        answered += 1;
    }
    let (count, distinct, tokens, cost) = wait_rows(&pg, answered);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rows(&pg).0, answered, "no duplicates arrive later");
    assert_eq!((count, distinct), (answered, answered));
    let local: Vec<_> = gws.iter().flat_map(|g| g.ledger()).collect();
    assert_eq!(local.len() as i64, answered);
    let stats = request(sim.addr, "GET", "/_sim/stats", None, None).json();
    let sim_tokens =
        stats["prompt_tokens"].as_u64().unwrap() + stats["completion_tokens"].as_u64().unwrap();
    assert_eq!(tokens as u64, sim_tokens);
    assert_eq!(
        cost as u64,
        local.iter().map(|r| r.cost_nano_usd).sum::<u64>()
    );
}

/// Requests sent by a few client threads until stopped; counts the answers.
struct Flow {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    answered: std::sync::Arc<std::sync::atomic::AtomicU64>,
    threads: Vec<std::thread::JoinHandle<Vec<u16>>>,
}

impl Flow {
    /// `threads` clients, each sending one request after another (streamed
    /// and not, alternately) on new connections. With `tolerant`, failed
    /// exchanges (a gateway killed under them) are not errors.
    fn start(addr: std::net::SocketAddr, key: &str, threads: usize, tolerant: bool) -> Flow {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let stop = Arc::new(AtomicBool::new(false));
        let answered = Arc::new(AtomicU64::new(0));
        let threads = (0..threads)
            .map(|t| {
                let (stop, answered, key) =
                    (Arc::clone(&stop), Arc::clone(&answered), key.to_owned());
                std::thread::spawn(move || {
                    let mut statuses = Vec::new();
                    let mut i = t;
                    while !stop.load(Ordering::Relaxed) {
                        let b = if i % 2 == 0 {
                            body("")
                        } else {
                            stream_body("")
                        };
                        i += 1;
                        let raw = raw_request("POST", "/v1/chat/completions", Some(&key), Some(&b));
                        match try_exchange(addr, &raw) {
                            Some(r) => {
                                statuses.push(r.status);
                                answered.fetch_add(1, Ordering::Relaxed);
                            }
                            None if tolerant => std::thread::sleep(Duration::from_millis(10)),
                            None => panic!("a request failed"),
                        }
                    }
                    statuses
                })
            })
            .collect();
        Flow {
            stop,
            answered,
            threads,
        }
    }

    fn answered(&self) -> u64 {
        self.answered.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Waits until `n` more requests were answered.
    fn wait_more(&self, n: u64) {
        let target = self.answered() + n;
        eventually(&format!("{target} answers"), || self.answered() >= target);
    }

    /// Stops the clients; returns every status answered.
    fn stop(self) -> Vec<u16> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.threads
            .into_iter()
            .flat_map(|t| t.join().expect("client thread"))
            .collect()
    }
}

/// Every request id in PostgreSQL, with how often it is there.
fn pg_ids(pg: &PgServer) -> std::collections::BTreeMap<String, i64> {
    pg.client()
        .query(
            "SELECT request_id, count(*) FROM chatgate_ledger GROUP BY request_id",
            &[],
        )
        .expect("query")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// The records of every local ledger file in `dir` (the live one and the
/// rotated ones).
fn local_records(dir: &std::path::Path) -> Vec<chatgate_core::LedgerRecord> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ledger") && n.ends_with(".jsonl"))
        })
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| chatgate_core::LedgerRecord::from_line(l.as_bytes()).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Waits until PostgreSQL holds exactly the local records' request ids,
/// each once, and stays so.
fn pg_matches_local(pg: &PgServer, dir: &std::path::Path) -> Vec<chatgate_core::LedgerRecord> {
    let local = local_records(dir);
    let want: std::collections::BTreeSet<String> =
        local.iter().map(|r| r.request_id.clone()).collect();
    assert_eq!(want.len(), local.len(), "request ids are unique locally");
    wait_rows(pg, local.len() as i64);
    // Nothing more arrives (no duplicate, nothing late).
    std::thread::sleep(Duration::from_millis(500));
    let ids = pg_ids(pg);
    let missing: Vec<_> = want.iter().filter(|id| !ids.contains_key(*id)).collect();
    assert!(
        missing.is_empty(),
        "{} records never reached PostgreSQL: {missing:?}",
        missing.len()
    );
    assert!(ids.values().all(|n| *n == 1));
    assert_eq!(ids.len(), local.len(), "rows that are in no local ledger");
    local
}

/// Rotating the ledger (mv, then SIGHUP, as OPERATIONS.md says) while
/// requests flow and while PostgreSQL is down: the lines appended to the
/// moved file before the signal, and the new file's first lines, all arrive;
/// rows == distinct request ids == requests answered.
fn rotation_loses_nothing(bin: &str) {
    let mut pg = PgServer::start();
    let sim = Sim::start(bin, &[], &[]);
    let gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec!["--ledger-postgres".into(), pg.url()],
            rpm: Some(1_000_000),
            tpm: Some(1_000_000_000),
            ..GwOptions::default()
        },
    );
    let dir = gw.dir.path();
    let live = dir.join("ledger.jsonl");
    for _ in 0..3 {
        assert_eq!(gw.chat(&body("")).status, 200);
    }
    wait_rows(&pg, 3);
    let flow = Flow::start(gw.addr, &gw.key, 2, false);
    flow.wait_more(10);
    // PostgreSQL goes away; the first rotation happens during the outage.
    pg.stop();
    flow.wait_more(10);
    std::fs::rename(&live, dir.join("ledger-1.jsonl")).unwrap();
    // Until the signal, lines go on into the moved file.
    flow.wait_more(10);
    gw.proc.signal(libc::SIGHUP);
    eventually("the ledger is reopened", || {
        gw.proc.stderr().matches("ledger reopened").count() == 1
    });
    // The new file grows past everything shipped before the outage.
    let moved_len = std::fs::metadata(dir.join("ledger-1.jsonl")).unwrap().len();
    eventually("the new file outgrows the moved one", || {
        std::fs::metadata(&live).map_or(0, |m| m.len()) > moved_len
    });
    pg.restart();
    flow.wait_more(10);
    // A second rotation with PostgreSQL up, shipping under way.
    std::fs::rename(&live, dir.join("ledger-2.jsonl")).unwrap();
    flow.wait_more(10);
    gw.proc.signal(libc::SIGHUP);
    eventually("the ledger is reopened again", || {
        gw.proc.stderr().matches("ledger reopened").count() == 2
    });
    flow.wait_more(10);
    let statuses = flow.stop();
    assert!(statuses.iter().all(|s| *s == 200));
    let answered = statuses.len() + 3;
    let local = pg_matches_local(&pg, dir);
    assert_eq!(local.len(), answered, "one local line per answer");
    assert_eq!(rows(&pg).0 as usize, answered);
    let (_, _, tokens, cost) = rows(&pg);
    assert_eq!(
        (tokens as u64, cost as u64),
        (
            local
                .iter()
                .map(|r| r.prompt_tokens + r.completion_tokens)
                .sum::<u64>(),
            local.iter().map(|r| r.cost_nano_usd).sum::<u64>()
        )
    );
    assert!(gw.alive_pid());
}

#[test]
fn rotation_loses_nothing_smol() {
    rotation_loses_nothing("chatgate-smol");
}

#[test]
fn rotation_loses_nothing_tokio() {
    rotation_loses_nothing("chatgate-tokio");
}

/// A counter or gauge without labels from the admin listener.
/// Starts `serve` again on the ledger (and keys) of `gw`, which is killed
/// first with SIGKILL; returns it and its admin address.
fn restart(gw: Gw, upstream: &str, opts: &GwOptions) -> (Gw, std::net::SocketAddr) {
    gw.proc.signal(libc::SIGKILL);
    let Gw {
        proc,
        dir,
        key,
        bin,
        ..
    } = gw;
    drop(proc);
    let mut gw = Gw::start_with_keys(&bin, upstream, opts.clone(), dir, key);
    let admin = gw.admin_addr();
    (gw, admin)
}

/// Lines shipped again are not inserted again: a gateway killed (SIGKILL)
/// while requests flow and rows are being shipped, then restarted, leaves
/// one row per local line; with the checkpoint deleted (as after a crash
/// between a commit and the checkpoint's write, at its worst) the restarted
/// gateway ships the whole ledger again and the table does not change.
fn replay_is_idempotent(bin: &str) {
    let pg = PgServer::start();
    let sim = Sim::start(bin, &[], &[]);
    let opts = GwOptions {
        args: vec![
            "--ledger-postgres".into(),
            pg.url(),
            "--admin-listen".into(),
            "127.0.0.1:0".into(),
        ],
        rpm: Some(1_000_000),
        tpm: Some(1_000_000_000),
        ..GwOptions::default()
    };
    let mut gw = Gw::start(bin, &sim.url(), opts.clone());
    gw.admin_addr();
    let flow = Flow::start(gw.addr, &gw.key, 2, true);
    eventually("rows arrive", || try_rows(&pg).unwrap_or_default().0 >= 50);
    // Killed mid-flow: the shipper may be anywhere in a batch.
    let (gw, _) = restart(gw, &sim.url(), &opts);
    let answered = flow.stop().iter().filter(|s| **s == 200).count();
    let local = pg_matches_local(&pg, gw.dir.path());
    // A request answered has its line; a line may belong to a request
    // whose answer the kill cut.
    assert!(
        (answered..=answered + 2).contains(&local.len()),
        "{answered} answered, {} lines",
        local.len()
    );
    let before = rows(&pg);
    // The checkpoint lost: everything is shipped again, nothing inserted.
    let checkpoint = gw.dir.path().join("ledger.jsonl.pg-offset");
    assert!(checkpoint.exists());
    gw.proc.signal(libc::SIGKILL);
    std::thread::sleep(Duration::from_millis(100));
    std::fs::remove_file(&checkpoint).unwrap();
    let (gw, admin) = restart(gw, &sim.url(), &opts);
    eventually("the whole ledger shipped again", || {
        metric(admin, "chatgate_ledger_postgres_rows_total") == local.len() as u64
    });
    assert_eq!(metric(admin, "chatgate_ledger_postgres_backlog_bytes"), 0);
    pg_matches_local(&pg, gw.dir.path());
    assert_eq!(rows(&pg), before, "nothing billed twice");
    // And new requests still arrive, once each.
    for _ in 0..3 {
        assert_eq!(gw.chat(&body("")).status, 200);
    }
    assert_eq!(pg_matches_local(&pg, gw.dir.path()).len(), local.len() + 3);
}

#[test]
fn replay_is_idempotent_smol() {
    replay_is_idempotent("chatgate-smol");
}

#[test]
fn replay_is_idempotent_tokio() {
    replay_is_idempotent("chatgate-tokio");
}

/// What a row holds never stops the rows after it: a provider's
/// `finish_reason` holding NUL (which PostgreSQL's `text` cannot store) is
/// stored with U+FFFD; a row the table refuses (an operator's CHECK) is set
/// aside, logged with its request id and counted, and the rows after it
/// arrive. The roles SCALING.md grants are enough: the gateway's ships and
/// changes keys without creating or altering a table, the reporting one
/// runs `usage --postgres`; a role that may not create the tables, without
/// them, is told which file makes them; a hand-made table with a column of
/// the wrong type is a clear error, not a crash.
#[test]
fn a_row_postgres_refuses_stops_nothing() {
    let bin = "chatgate-tokio";
    let pg = PgServer::start();
    let sim = Sim::start(bin, &[], &[]);
    let mut gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec![
                "--ledger-postgres".into(),
                pg.url(),
                "--admin-listen".into(),
                "127.0.0.1:0".into(),
            ],
            ..GwOptions::default()
        },
    );
    let admin = gw.admin_addr();
    assert_eq!(gw.chat(&body("")).status, 200);
    wait_rows(&pg, 1);
    pg.client()
        .batch_execute(
            "ALTER TABLE chatgate_ledger ADD CONSTRAINT not_refused \
             CHECK (finish_reason IS DISTINCT FROM 'refused')",
        )
        .unwrap();
    let finish = |f: &str| format!(r#""x_sim":{{"finish_reason":{}}}"#, serde_json::json!(f));
    let odd = gw.chat(&body(&finish("\0")));
    assert_eq!(odd.status, 200);
    assert!(
        String::from_utf8_lossy(&odd.body).contains(r#""finish_reason":"\u0000""#),
        "forwarded as sent"
    );
    assert_eq!(gw.chat(&stream_body(&finish("refused"))).status, 200);
    assert_eq!(gw.chat(&body("")).status, 200);
    let local = gw.ledger_len(4);
    let id_of = |f: &str| {
        local
            .iter()
            .find(|r| r.finish_reason.as_deref() == Some(f))
            .map(|r| r.request_id.clone())
            .unwrap_or_else(|| panic!("no local record with finish_reason {f:?}"))
    };
    let (nul, refused) = (id_of("\0"), id_of("refused"));
    eventually("the row after the refused one arrives", || {
        try_rows(&pg).unwrap_or_default().0 >= 3
    });
    let ids = pg_ids(&pg);
    assert_eq!(ids.len(), 3, "{ids:?}");
    assert!(!ids.contains_key(&refused));
    assert!(
        local
            .iter()
            .all(|r| r.request_id == refused || ids.contains_key(&r.request_id))
    );
    let stored: Option<String> = pg
        .client()
        .query_one(
            "SELECT finish_reason FROM chatgate_ledger WHERE request_id = $1",
            &[&nul],
        )
        .unwrap()
        .get(0);
    assert_eq!(stored.as_deref(), Some("\u{FFFD}"));
    assert_eq!(metric(admin, "chatgate_ledger_postgres_set_aside_total"), 1);
    assert_eq!(metric(admin, "chatgate_ledger_postgres_repaired_total"), 1);
    assert_eq!(metric(admin, "chatgate_ledger_postgres_backlog_bytes"), 0);
    let log = gw.proc.stderr();
    let said = log
        .lines()
        .find(|l| l.contains("PostgreSQL refused this record"))
        .unwrap_or_else(|| panic!("the set-aside row is not logged: {log}"));
    assert!(said.contains(&refused) && said.contains("23514"), "{said}");
    // The roles SCALING.md grants, on the tables its SQL files make as
    // their owner: the gateway's ships rows and changes keys, the
    // reporting one reports; neither creates nor alters a table.
    let mut admin_pg = pg.client();
    for file in ["ledger.sql", "keys.sql", "console.sql", "responses.sql"] {
        let sql = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../host")
                .join(file),
        )
        .unwrap();
        admin_pg.batch_execute(&sql).unwrap();
    }
    let guide = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../SCALING.md"),
    )
    .unwrap();
    let grants = guide
        .split("### Roles")
        .nth(1)
        .and_then(|s| s.split("```sql\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("SCALING.md's Roles grant in a sql block");
    admin_pg
        .batch_execute(&format!(
            "CREATE ROLE chatgate LOGIN; CREATE ROLE reporting LOGIN; CREATE ROLE stranger LOGIN; {grants}"
        ))
        .unwrap();
    admin_pg.batch_execute("CREATE DATABASE handmade").unwrap();
    let port = pg
        .url()
        .rsplit(':')
        .next()
        .unwrap()
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let url_of = |role: &str| format!("postgres://{role}@127.0.0.1:{port}/postgres");
    let (code, out, err) = run(
        bin,
        &[
            "usage",
            "--postgres",
            &url_of("reporting"),
            "--format",
            "json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["total"]["requests"], 3);
    let keys = url_of("chatgate");
    let (code, _, err) = run(bin, &["keys", "new", "--keys", &keys, "--name", "bob"], &[]);
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = run(bin, &["keys", "revoke", "--keys", &keys, "bob"], &[]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(bin, &["keys", "list", "--keys", &keys], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("bob"), "{out}");
    let actions: i64 = admin_pg
        .query_one("SELECT count(*) FROM chatgate_audit WHERE key = 'bob'", &[])
        .unwrap()
        .get(0);
    assert_eq!(actions, 2);
    let as_role = |role: &str| GwOptions {
        args: vec!["--ledger-postgres".into(), url_of(role)],
        ..GwOptions::default()
    };
    let writer = Gw::start(bin, &sim.url(), as_role("chatgate"));
    assert_eq!(writer.chat(&body("")).status, 200);
    wait_rows(&pg, 4);
    drop(writer);
    admin_pg
        .batch_execute("ALTER TABLE chatgate_ledger RENAME TO chatgate_ledger_old")
        .unwrap();
    let stranger = Gw::start(bin, &sim.url(), as_role("stranger"));
    assert_eq!(stranger.chat(&body("")).status, 200);
    let log = stranger
        .proc
        .stderr_when("the advice to create the tables", |l| {
            l.contains("ledger.sql")
        });
    assert!(
        log.contains("42501") && log.contains("create them once with ledger.sql"),
        "{log}"
    );
    drop(stranger);
    // A table made by hand with a column of the wrong type.
    let handmade = format!("postgres://postgres@127.0.0.1:{port}/handmade");
    let mut c = postgres::Client::connect(&handmade, postgres::NoTls).unwrap();
    c.batch_execute(
        "CREATE TABLE chatgate_ledger (request_id text PRIMARY KEY, ts timestamptz, key text, \
         model text, prompt_tokens text, completion_tokens text, reasoning_tokens text, \
         cached_tokens text, cost_nano_usd text, charged_nano_usd text, status smallint, \
         stream boolean, complete boolean); \
         INSERT INTO chatgate_ledger VALUES \
         ('r', now(), 'k', 'm', '1', '2', '0', '0', '5', '5', 200, false, true)",
    )
    .unwrap();
    let (code, _, err) = run(
        bin,
        &["usage", "--postgres", &handmade, "--format", "json"],
        &[],
    );
    assert_ne!(code, 0);
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("column prompt_tokens"), "{err}");
}

/// Before any instance has shipped a line there is no table, and the
/// shared ledger says nothing was spent: `usage --budgets --postgres`
/// reports 0, the read that a shared limiter's first rebuild makes (which
/// once fell back to local limits, losing that request's spend in Redis,
/// when it came before the first shipper had created the table). The
/// read creates nothing.
#[test]
fn a_ledger_nobody_has_shipped_to_has_spent_nothing() {
    let bin = "chatgate-tokio";
    let pg = PgServer::start();
    let dir = tempfile::tempdir().unwrap();
    mint(bin, dir.path(), "k", None, None);
    let keys = dir.path().join("keys.toml").to_string_lossy().into_owned();
    let (code, _, err) = run(
        bin,
        &["keys", "set", "k", "--keys", &keys, "--budget-usd", "5"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let j = pg.budgets(bin, &keys);
    assert_eq!(j["budgets"][0]["budget_nano_usd"], 5_000_000_000u64, "{j}");
    assert_eq!(j["budgets"][0]["spent_nano_usd"], 0, "{j}");
    assert!(try_rows(&pg).is_none(), "a read created the table");
}
