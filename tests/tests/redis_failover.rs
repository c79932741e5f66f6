//! Shared limits through a Redis that fails over mid-burst: a primary
//! watched by three Sentinels (with one replica), and a Redis Cluster of
//! three primaries with a replica each, every server real. Three instances
//! (both runtimes; one fail-open, two fail-closed) hammer one key with a
//! tight request limit and a budget; its primary is killed (SIGKILL).
//! Admission resumes on the promoted replica soon after the failover;
//! meanwhile each instance follows `--redis-fallback`; the requests
//! admitted stay within the bound SCALING.md states; no lease is left
//! behind; and the key's spend on the new primary, once rebuilt, equals
//! the ledger's. Both topologies run again with every server speaking TLS
//! only.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chatgate_core::RedisReply;
use chatgate_tests::*;

/// The key's requests per minute: the burst runs into it at once.
const RPM: u64 = 40;
/// Client threads per instance.
const THREADS: usize = 2;
/// The pause between one thread's requests.
const PACE: Duration = Duration::from_millis(40);

/// The Redis under test.
enum Ha {
    Sentinel(SentinelSet),
    Cluster(RedisCluster),
}

impl Ha {
    /// SCALING.md's configuration for this topology, with these servers,
    /// written in `dir`; the flags that load it.
    fn flags(&self, dir: &std::path::Path) -> Vec<String> {
        // Over TLS, SCALING.md's TLS blocks: the same servers in a
        // `rediss://` URL, verified against the test CA.
        let tls = self.tls();
        let mut toml = match (self, tls) {
            (Ha::Sentinel(s), None) => scaling_block(
                "# Shared limits through the Redis primary that the Sentinels watch.",
                "redis_sentinels",
                &s.sentinels(),
            ),
            (Ha::Cluster(c), None) => scaling_block(
                "# Shared limits through a Redis Cluster.",
                "redis_cluster",
                &c.seeds(),
            ),
            (Ha::Sentinel(s), Some(_)) => scaling_block(
                "# Sentinels, primary and replicas all speak TLS only.",
                "redis_sentinels",
                &format!("rediss://{}", s.sentinels()),
            ),
            (Ha::Cluster(c), Some(_)) => scaling_block(
                "# Every cluster node speaks TLS only.",
                "redis_cluster",
                &format!("rediss://{}", c.seeds()),
            ),
        };
        if let Some(tls) = tls {
            let doc = "upstream_ca = \"/etc/chatgate/redis-ca.pem\"";
            assert!(toml.contains(doc), "SCALING.md's TLS block names no CA");
            toml = toml.replace(doc, &format!("upstream_ca = {:?}", tls.ca_file()));
        }
        let path = dir.join("chatgate.toml");
        std::fs::write(&path, toml).unwrap();
        vec!["--config".into(), path.to_str().unwrap().to_owned()]
    }

    fn tls(&self) -> Option<&std::sync::Arc<RedisTls>> {
        match self {
            Ha::Sentinel(s) => s.tls(),
            Ha::Cluster(c) => c.tls(),
        }
    }

    /// The port of the primary that holds the key `shared` now.
    fn primary_port(&self) -> u16 {
        match self {
            Ha::Sentinel(s) => s.primary_port(),
            Ha::Cluster(c) => c.primary_of("{shared}"),
        }
    }

    fn primary(&self) -> RedisClient {
        let addr = ([127, 0, 0, 1], self.primary_port()).into();
        RedisClient::try_connect_with(addr, self.tls().map(|t| &**t)).expect("connect to redis")
    }

    /// Kills the key's primary; its port.
    fn kill_primary(&mut self) -> u16 {
        let port = self.primary_port();
        match self {
            Ha::Sentinel(s) => s.server(port).kill(),
            Ha::Cluster(c) => c.node(port).kill(),
        }
        port
    }
}

/// One answer: instance, when its request left and when the answer came
/// (since the burst started), status.
#[derive(Debug, Clone, Copy)]
struct Answer {
    gw: usize,
    sent: Duration,
    answered: Duration,
    status: u16,
}

fn field(c: &mut RedisClient, hash: &str, f: &str) -> Option<u64> {
    match c.cmd(&[b"HGET", hash.as_bytes(), f.as_bytes()]) {
        RedisReply::Bulk(Some(v)) => String::from_utf8(v).ok()?.parse().ok(),
        _ => None,
    }
}

fn a_failover_mid_burst(mut ha: Ha, what: &str) {
    let sim = Sim::start("chatgate-smol", &[], &[]);
    let pg = PgServer::start();
    let config = tempfile::tempdir().unwrap();
    let mut common = ha.flags(config.path());
    common.extend(
        [
            "--ledger-postgres",
            &pg.url(),
            "--admin-listen",
            "127.0.0.1:0",
            "--prompt-overhead-tokens",
            "0",
            // A loaded machine must not turn a slow answer into a
            // fallback (a settlement lost to a timeout is not rebuilt).
            "--redis-timeout",
            "3s",
        ]
        .map(str::to_owned),
    );
    let with = |fallback: &str| {
        let mut a = common.clone();
        a.extend(["--redis-fallback".to_owned(), fallback.to_owned()]);
        a
    };
    let fallbacks = ["fail-open", "fail-closed", "fail-closed"];
    let each = [
        ("chatgate-smol", with(fallbacks[0])),
        ("chatgate-tokio", with(fallbacks[1])),
        ("chatgate-smol", with(fallbacks[2])),
    ];
    let mut gws = gateways_sharing_a_key(&sim, "shared", RPM, 10_000_000, &each);
    // A budget far above what the run spends (it is the spend's
    // bookkeeping that is checked), and an in-flight cap: every request
    // holds a lease.
    set_on_each(
        &gws,
        "shared",
        &["--budget-usd", "1000", "--max-in-flight", "100"],
    );
    let addrs: Vec<SocketAddr> = gws.iter().map(|g| g.addr).collect();
    let key = gws[0].key.clone();
    let body = body(r#""max_tokens":20"#);
    let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let clients: Vec<_> = (0..addrs.len() * THREADS)
        .map(|t| {
            let (gw, addr) = (t % addrs.len(), addrs[t % addrs.len()]);
            let (key, body, answers, stop) = (
                key.clone(),
                body.clone(),
                Arc::clone(&answers),
                Arc::clone(&stop),
            );
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let sent = t0.elapsed();
                    let r = request(
                        addr,
                        "POST",
                        "/v1/chat/completions",
                        Some(&key),
                        Some(&body),
                    );
                    let a = Answer {
                        gw,
                        sent,
                        answered: t0.elapsed(),
                        status: r.status,
                    };
                    answers.lock().unwrap().push(a);
                    std::thread::sleep(PACE);
                }
            })
        })
        .collect();
    // The limit is reached; then the key's primary dies.
    eventually("the limit is reached", || {
        answers.lock().unwrap().iter().any(|a| a.status == 429)
    });
    std::thread::sleep(Duration::from_secs(1));
    let old = ha.kill_primary();
    let killed = t0.elapsed();
    let mut switched = None;
    eventually_within("a replica is promoted", Duration::from_secs(60), || {
        let now = ha.primary_port();
        if now != old {
            switched = Some(t0.elapsed());
        }
        now != old
    });
    let switched = switched.unwrap();
    // Each fail-closed instance answers from Redis again: a 200 or a 429
    // (the shared limiter's verdicts), no longer a 503.
    let resumed = |gw: usize| {
        answers
            .lock()
            .unwrap()
            .iter()
            .filter(|a| a.gw == gw && a.sent > switched && a.status != 503)
            .map(|a| a.answered)
            .min()
    };
    eventually_within("admission resumes", Duration::from_secs(60), || {
        resumed(1).is_some() && resumed(2).is_some()
    });
    let resumed = [resumed(1).unwrap(), resumed(2).unwrap()];
    // Long enough after for the rebuild of the spend to be due and done.
    std::thread::sleep(Duration::from_millis(
        chatgate_core::REBUILD_AFTER_MS + 2_000,
    ));
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let answers = answers.lock().unwrap().clone();
    println!(
        "{what}: {} answers; primary killed at {killed:?}, replica promoted at {switched:?}, admission resumed at {resumed:?}",
        answers.len()
    );
    // Admission resumed within the failover plus a few seconds (generous
    // for a loaded machine: measured, it is the next request or two).
    for r in resumed {
        assert!(
            r < switched + Duration::from_secs(10),
            "admission resumed at {r:?}, the failover was over at {switched:?}"
        );
    }
    // The gap followed --redis-fallback: 503s only from the fail-closed
    // instances, only between the kill and their resumption; the
    // fail-open one served on its own limits, and counted it.
    for a in &answers {
        match a.status {
            200 | 429 => {}
            503 => {
                assert!(a.gw > 0, "the fail-open instance answered 503: {a:?}");
                assert!(
                    a.answered > killed && a.sent < resumed[a.gw - 1],
                    "a 503 outside the gap: {a:?}"
                );
            }
            s => panic!("{s}: {a:?}"),
        }
    }
    assert!(answers.iter().any(|a| a.status == 503), "no gap was seen");
    let open_fallbacks = metric(
        gws[0].admin_addr(),
        "chatgate_shared_limits_unavailable_total",
    );
    assert!(open_fallbacks > 0, "the fail-open instance never fell back");
    // The requests admitted: the limit, what refilled over the run, what
    // the lost window admitted (the replication lag: bounded here by what
    // Redis admitted in the last second before the kill), and what the
    // fail-open instance admitted on its own limits during the gap (at
    // most its fallback decisions, and at most the limit).
    let admitted = answers.iter().filter(|a| a.status == 200).count() as u64;
    let span = answers.iter().map(|a| a.sent).max().unwrap();
    let refill = span.as_millis() as u64 * RPM / 60_000;
    let lost_window = answers
        .iter()
        .filter(|a| {
            a.status == 200 && a.sent + Duration::from_secs(1) >= killed && a.sent <= killed
        })
        .count() as u64;
    let bound = RPM + refill + lost_window + open_fallbacks.min(RPM);
    println!(
        "{what}: {admitted} admitted over {span:?}; bound {bound} = {RPM} + {refill} refilled + {lost_window} in the last second before the kill + {} on the fail-open instance's own limits",
        open_fallbacks.min(RPM)
    );
    assert!(
        admitted >= RPM,
        "{admitted} admitted: the limit was never reached"
    );
    assert!(
        admitted <= bound,
        "{admitted} admitted, above the bound {bound}"
    );
    // No lease is left: every request's slot and reservation was given
    // back, on the new primary too (those the old primary's last writes
    // held lapse within a lease, 10 s).
    // One request, for what only the key's next admission does (reap
    // lapsed leases, ask for a rebuild that is due); its own lease is
    // settled right after.
    let nudge = || {
        let r = request(
            addrs[1],
            "POST",
            "/v1/chat/completions",
            Some(&key),
            Some(&body),
        );
        assert!(matches!(r.status, 200 | 429), "{}", r.status);
        std::thread::sleep(Duration::from_millis(500));
    };
    // Lapsed leases are reaped by the key's next admission: one is sent
    // while any remain.
    eventually_within("no lease is left", Duration::from_secs(40), || {
        let mut c = ha.primary();
        let leases = c.cmd(&[b"ZCARD", b"chatgate:leases:{shared}"]);
        let clean = leases == RedisReply::Integer(0)
            && field(&mut c, "chatgate:spend:{shared}", "r").unwrap_or(0) == 0;
        if !clean {
            nudge();
        }
        clean
    });
    // The spend: once every line is in PostgreSQL and the rebuild is done
    // (a request may be needed to ask for it), Redis holds exactly what
    // the ledger says the key spent.
    let mut db = pg.client();
    let rows = |db: &mut postgres::Client| -> (i64, i64) {
        let r = db
            .query_one(
                "SELECT count(*), COALESCE(SUM(GREATEST(cost_nano_usd, charged_nano_usd)), 0)::bigint \
                 FROM chatgate_ledger WHERE key = 'shared'",
                &[],
            )
            .unwrap();
        (r.get(0), r.get(1))
    };
    let lines = || gws.iter().map(|g| g.ledger().len()).sum::<usize>() as i64;
    eventually("the rebuild is done", || {
        let pending = field(&mut ha.primary(), "chatgate:spend:{shared}", "c").is_some();
        if pending {
            nudge();
        }
        !pending
    });
    eventually("every line is in PostgreSQL", || rows(&mut db).0 == lines());
    let (count, spent) = rows(&mut db);
    let local: u64 = gws
        .iter()
        .flat_map(|g| g.ledger())
        .map(|r| r.cost_nano_usd.max(r.charged_nano_usd))
        .sum();
    assert_eq!(spent as u64, local, "the shared ledger and the local ones");
    let in_redis = field(&mut ha.primary(), "chatgate:spend:{shared}", "t");
    println!("{what}: {count} lines; spent {spent} nano-USD; Redis holds {in_redis:?}");
    assert_eq!(in_redis, Some(spent as u64), "the spend after the rebuild");
    let logs: String = gws.iter().map(|g| g.proc.stderr()).collect();
    assert!(
        logs.contains("the key's spend was rebuilt from the ledger's lines before then"),
        "no rebuild logged:\n{logs}"
    );
}

#[test]
fn sentinel_failover_mid_burst() {
    a_failover_mid_burst(Ha::Sentinel(SentinelSet::start()), "sentinel");
}

#[test]
fn cluster_failover_mid_burst() {
    a_failover_mid_burst(Ha::Cluster(RedisCluster::start()), "cluster");
}

/// The same over TLS only: Sentinels, primary and replica speak TLS
/// (`--port 0`, `tls-replication yes`), the Sentinels announce an address
/// the certificate names by its IP SAN, and the gateway verifies it
/// against the test CA.
#[test]
fn sentinel_failover_mid_burst_over_tls() {
    a_failover_mid_burst(Ha::Sentinel(SentinelSet::start_tls()), "sentinel");
}

/// The same over TLS only: every node, the cluster bus (`tls-cluster
/// yes`) and replication; `CLUSTER SLOTS` and the redirections name
/// addresses the certificate has.
#[test]
fn cluster_failover_mid_burst_over_tls() {
    a_failover_mid_burst(Ha::Cluster(RedisCluster::start_tls()), "cluster");
}

fn text(r: RedisReply) -> String {
    match r {
        RedisReply::Bulk(Some(b)) => String::from_utf8(b).unwrap(),
        RedisReply::Simple(s) => s,
        other => panic!("{other:?}"),
    }
}

/// The key's slot moved to another primary while requests flow, step by
/// step as `redis-cli --cluster reshard` moves it: both nodes told, the
/// keys migrated, the slot given to its new node. Meanwhile the script's
/// keys answer `TRYAGAIN` (some of its keys are absent while the slot
/// migrates) or `ASK`, and after it `MOVED`; each is followed (sent again,
/// redirected, the map read again, the script loaded where it is
/// missing): every admission is Redis's (fail-closed instances, no 503),
/// and the limit holds as if nothing had moved.
#[test]
fn a_slot_migrated_mid_run_is_followed() {
    let mut cluster = RedisCluster::start();
    let sim = Sim::start("chatgate-smol", &[], &[]);
    let args: Vec<String> = [
        "--redis-cluster",
        &cluster.seeds(),
        "--redis-fallback",
        "fail-closed",
        "--redis-timeout",
        "5s",
        "--prompt-overhead-tokens",
        "0",
    ]
    .map(str::to_owned)
    .to_vec();
    let each = [
        ("chatgate-smol", args.clone()),
        ("chatgate-tokio", args.clone()),
    ];
    let gws = gateways_sharing_a_key(&sim, "shared", 30, 10_000_000, &each);
    set_on_each(&gws, "shared", &["--budget-usd", "1000"]);
    let statuses: Arc<Mutex<Vec<u16>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let clients: Vec<_> = gws
        .iter()
        .map(|gw| {
            let (addr, key) = (gw.addr, gw.key.clone());
            let (statuses, stop) = (Arc::clone(&statuses), Arc::clone(&stop));
            std::thread::spawn(move || {
                let body = body(r#""max_tokens":20"#);
                while !stop.load(Ordering::Relaxed) {
                    let r = request(
                        addr,
                        "POST",
                        "/v1/chat/completions",
                        Some(&key),
                        Some(&body),
                    );
                    statuses.lock().unwrap().push(r.status);
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        })
        .collect();
    let answered = || statuses.lock().unwrap().len();
    eventually("the first answers", || answered() >= 20);
    let from = cluster.primary_of("{shared}");
    let to = cluster
        .nodes
        .iter()
        .map(|n| n.port())
        .find(|p| *p != from && cluster.primary_of_port(*p))
        .expect("another primary");
    let id =
        |port: u16, c: &mut RedisCluster| text(c.node(port).client().cmd(&[b"CLUSTER", b"MYID"]));
    let (from_id, to_id) = (id(from, &mut cluster), id(to, &mut cluster));
    let slot = match cluster
        .node(from)
        .client()
        .cmd(&[b"CLUSTER", b"KEYSLOT", b"{shared}"])
    {
        RedisReply::Integer(s) => s.to_string(),
        other => panic!("{other:?}"),
    };
    let mut src = cluster.node(from).client();
    let mut dst = cluster.node(to).client();
    let ok = |r: RedisReply| assert!(matches!(r, RedisReply::Simple(_)), "{r:?}");
    let step = || std::thread::sleep(Duration::from_millis(30));
    ok(dst.cmd(&[
        b"CLUSTER",
        b"SETSLOT",
        slot.as_bytes(),
        b"IMPORTING",
        from_id.as_bytes(),
    ]));
    ok(src.cmd(&[
        b"CLUSTER",
        b"SETSLOT",
        slot.as_bytes(),
        b"MIGRATING",
        to_id.as_bytes(),
    ]));
    step();
    let keys = match src.cmd(&[b"CLUSTER", b"GETKEYSINSLOT", slot.as_bytes(), b"100"]) {
        RedisReply::Array(Some(v)) => v
            .into_iter()
            .map(|k| match k {
                RedisReply::Bulk(Some(k)) => k,
                other => panic!("{other:?}"),
            })
            .collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert!(
        keys.len() >= 2,
        "the key's hashes are in its slot: {keys:?}"
    );
    let port = to.to_string();
    let mut migrate: Vec<&[u8]> = vec![
        b"MIGRATE",
        b"127.0.0.1",
        port.as_bytes(),
        b"",
        b"0",
        b"5000",
        b"KEYS",
    ];
    migrate.extend(keys.iter().map(Vec::as_slice));
    ok(src.cmd(&migrate));
    step();
    ok(dst.cmd(&[
        b"CLUSTER",
        b"SETSLOT",
        slot.as_bytes(),
        b"NODE",
        to_id.as_bytes(),
    ]));
    ok(src.cmd(&[
        b"CLUSTER",
        b"SETSLOT",
        slot.as_bytes(),
        b"NODE",
        to_id.as_bytes(),
    ]));
    let moved = answered();
    eventually("answers after the move", || answered() >= moved + 20);
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    let elapsed = started.elapsed();
    let statuses = statuses.lock().unwrap().clone();
    let logs: String = gws.iter().map(|g| g.proc.stderr()).collect();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}\n{logs}"
    );
    let admitted = statuses.iter().filter(|s| **s == 200).count() as u64;
    let refill = elapsed.as_millis() as u64 * 30 / 60_000;
    println!(
        "{admitted} admitted of {} in {elapsed:?}, the slot moved after {moved}",
        statuses.len()
    );
    assert!(
        (30..=30 + refill).contains(&admitted),
        "{admitted} admitted in {elapsed:?}: 30 plus at most {refill} refilled"
    );
    assert_eq!(
        dst.cmd(&[b"EXISTS", b"chatgate:limits:{shared}"]),
        RedisReply::Integer(1),
        "the buckets are on the new node"
    );
    assert!(!logs.contains("shared rate limiter unreachable"), "{logs}");
}

/// Credentials written once for the whole list reach every server: the
/// Sentinels (which require the password too) and the primary they name,
/// or every node of a cluster. A key limited to 3 requests a minute is
/// admitted 3 times then refused, by Redis (fail-closed: any fallback
/// would be a 503); a wrong password is Redis's refusal, logged, and the
/// fallback.
#[test]
fn credentials_reach_the_sentinels_the_primary_and_every_cluster_node() {
    let sentinels = SentinelSet::start_with_password(Some("s3cret"));
    let cluster = RedisCluster::start_with_password(Some("s3cret"));
    let sim = Sim::start("chatgate-smol", &[], &[]);
    let with = |pw: &str| {
        [
            vec![
                "--redis-sentinels".to_owned(),
                format!("redis://:{pw}@{}", sentinels.sentinels()),
                "--redis-sentinel-master".into(),
                SentinelSet::NAME.into(),
            ],
            vec![
                "--redis-cluster".to_owned(),
                format!("redis://:{pw}@{}", cluster.seeds()),
            ],
        ]
    };
    // Every gateway's key has the same name: each starts from full buckets.
    let flush = || {
        for n in sentinels.servers.iter().chain(&cluster.nodes) {
            if n.replication("role").as_deref() == Some("master") {
                n.client().cmd(&[b"FLUSHALL"]);
            }
        }
    };
    // Fail-closed: any fallback would be a 503.
    let start = |bin: &str, flags: &[String]| {
        let mut args = flags.to_vec();
        args.extend(["--redis-fallback".into(), "fail-closed".into()]);
        Gw::start(
            bin,
            &sim.url(),
            GwOptions {
                args,
                rpm: Some(3),
                ..GwOptions::default()
            },
        )
    };
    for bin in RUNTIMES {
        for flags in with("s3cret") {
            flush();
            let gw = start(bin, &flags);
            let got: Vec<u16> = (0..4).map(|_| gw.chat(&body("")).status).collect();
            let log = gw.proc.stderr();
            assert_eq!(got, [200, 200, 200, 429], "{bin} {flags:?}\n{log}");
            assert!(!log.contains("s3cret"), "a password in the log:\n{log}");
        }
        for flags in with("wrong") {
            let gw = start(bin, &flags);
            assert_eq!(gw.chat(&body("")).status, 503, "{bin} {flags:?}");
            let log = gw.proc.stderr_when("the refusal logged", |t| {
                t.contains("shared rate limiter unreachable")
            });
            assert!(
                log.contains("WRONGPASS") || log.contains("NOAUTH") || log.contains("AUTH failed"),
                "{bin} {flags:?}:\n{log}"
            );
            assert!(!log.contains("wrong@"), "a password in the log:\n{log}");
        }
    }
}
