//! The shared ledger across a failover of PostgreSQL to its streaming
//! replica, through both binaries, the gateway given both servers in one
//! URL (`target_session_attrs=read-write`): a clean switchover and a crash
//! of the primary with asynchronous replication each leave every local
//! line in the new primary's table exactly once. In the crash the primary
//! acknowledged commits its replica never received; the shipper finds them
//! missing when it reconnects and ships them again.

use std::time::Duration;

use chatgate_tests::*;

cases!(clean_switchover, crash_of_the_primary);

/// Both servers, the primary first; a client connects to whichever
/// accepts writes.
fn failover_url(primary: &PgServer, replica: &PgServer) -> String {
    format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port, replica.port
    )
}

/// Rows in the table (0 until it exists).
fn count(pg: &PgServer) -> i64 {
    postgres::Client::connect(&pg.url(), postgres::NoTls)
        .ok()
        .and_then(|mut c| {
            c.query_one("SELECT count(*) FROM chatgate_ledger", &[])
                .ok()
        })
        .map_or(0, |r| r.get(0))
}

fn wait_count(pg: &PgServer, n: i64, what: &str) {
    eventually(&format!("{n} rows in {what}"), || count(pg) >= n);
}

/// A gateway shipping to `url`, with its admin listener.
fn gateway(bin: &str, sim: &Sim, url: String) -> (Gw, std::net::SocketAddr) {
    let mut gw = Gw::start(
        bin,
        &sim.url(),
        GwOptions {
            args: vec![
                "--ledger-postgres".into(),
                url,
                "--admin-listen".into(),
                "127.0.0.1:0".into(),
            ],
            rpm: Some(1_000_000),
            tpm: Some(1_000_000_000),
            ..GwOptions::default()
        },
    );
    let admin = gw.admin_addr();
    (gw, admin)
}

fn send(gw: &Gw, n: usize) {
    for i in 0..n {
        let b = if i % 2 == 0 {
            body("")
        } else {
            stream_body("")
        };
        assert_eq!(gw.chat(&b).status, 200);
    }
}

/// Waits until `pg` holds every request id of the gateway's ledger, and
/// checks that it holds each once and nothing else; the number of lines.
fn every_line_once(pg: &PgServer, gw: &Gw) -> usize {
    let local = gw.ledger();
    let want: std::collections::BTreeSet<String> =
        local.iter().map(|r| r.request_id.clone()).collect();
    assert_eq!(want.len(), local.len(), "request ids are unique locally");
    let ids = || -> std::collections::BTreeMap<String, i64> {
        pg.client()
            .query(
                "SELECT request_id, count(*) FROM chatgate_ledger GROUP BY request_id",
                &[],
            )
            .expect("query")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()
    };
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let got = ids();
        let missing = want.iter().filter(|id| !got.contains_key(*id)).count();
        if missing == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{missing} of {} local lines never reached PostgreSQL",
            want.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Nothing more arrives (no duplicate, nothing late).
    std::thread::sleep(Duration::from_millis(500));
    let got = ids();
    assert!(got.values().all(|n| *n == 1), "a request id twice");
    assert_eq!(got.len(), local.len(), "rows that are in no local ledger");
    assert_eq!(count(pg), local.len() as i64);
    local.len()
}

/// The primary shut down cleanly (it sends its replica everything first),
/// the replica promoted: nothing lost, nothing shipped again.
fn clean_switchover(bin: &str) {
    let mut primary = PgServer::start();
    let replica = primary.replica();
    let sim = Sim::start(bin, &[], &[]);
    let (gw, admin) = gateway(bin, &sim, failover_url(&primary, &replica));
    send(&gw, 20);
    wait_count(&primary, 20, "the primary");
    primary.stop_clean();
    replica.promote();
    send(&gw, 15);
    assert_eq!(every_line_once(&replica, &gw), 35);
    // Counted just after each commit.
    eventually("35 rows counted", || {
        metric(admin, "chatgate_ledger_postgres_rows_total") == 35
    });
    assert_eq!(
        metric(admin, "chatgate_ledger_postgres_reshipped_total"),
        0,
        "{}",
        gw.proc.stderr()
    );
}

/// The replica stops receiving WAL; the primary acknowledges batches it
/// never sends, then dies (SIGKILL) and the replica is promoted: those
/// rows are gone from the table, and the shipper, reconnecting, ships them
/// again.
fn crash_of_the_primary(bin: &str) {
    let mut primary = PgServer::start();
    let replica = primary.replica();
    let sim = Sim::start(bin, &[], &[]);
    let (gw, admin) = gateway(bin, &sim, failover_url(&primary, &replica));
    send(&gw, 20);
    wait_count(&primary, 20, "the primary");
    wait_count(&replica, 20, "the replica");
    // Cut replication: the replica forgets its primary, its WAL receiver
    // stops, and the primary's sender with it.
    // (Two statements apart: ALTER SYSTEM refuses the implicit
    // transaction of several in one query.)
    let mut c = replica.client();
    c.batch_execute("ALTER SYSTEM SET primary_conninfo = ''")
        .expect("cut replication");
    c.batch_execute("SELECT pg_reload_conf()")
        .expect("reload the configuration");
    eventually("the replica's WAL receiver stops", || {
        replica
            .client()
            .query_one("SELECT count(*) FROM pg_stat_wal_receiver", &[])
            .is_ok_and(|r| r.get::<_, i64>(0) == 0)
    });
    eventually("the primary's WAL sender stops", || {
        primary
            .client()
            .query_one("SELECT count(*) FROM pg_stat_replication", &[])
            .is_ok_and(|r| r.get::<_, i64>(0) == 0)
    });
    // Acknowledged by the primary, never replicated.
    send(&gw, 30);
    wait_count(&primary, 50, "the primary");
    // And the shipper has heard every commit acknowledged (a row is
    // visible a moment before its commit's answer reaches the shipper).
    eventually("the shipper's acknowledgements", || {
        metric(admin, "chatgate_ledger_postgres_rows_total") >= 50
    });
    assert_eq!(count(&replica), 20, "the replica received nothing more");
    primary.kill9();
    replica.promote();
    assert_eq!(count(&replica), 20, "the 30 acknowledged rows are lost");
    send(&gw, 10);
    assert_eq!(every_line_once(&replica, &gw), 60);
    // The reconciliation found the lost batches (the 30 rows, and maybe
    // some kept ones remembered together with them) and said so.
    let again = metric(admin, "chatgate_ledger_postgres_reshipped_total");
    let log = gw.proc.stderr();
    assert!(
        (30..=50).contains(&again),
        "{again} lines shipped again: {log}"
    );
    assert!(log.contains("shipping them again"), "{log}");
}
