//! PostgreSQL over TLS, against a real server with `ssl = on`, a throwaway
//! CA and a `pg_hba.conf` that refuses plain TCP (`hostnossl … reject`),
//! as a managed PostgreSQL does: each libpq `sslmode` connects or refuses
//! as libpq documents, with the URL's setting to change in the error; a
//! client certificate logs in (`hostssl … cert`); SCRAM binds the login to
//! the TLS channel (`channel_binding=require`); the ledger ships and the
//! keys change over TLS. The commands (`usage --postgres`, `keys`) and the
//! gateway share one connection code, so one binary does for the
//! commands.

use std::path::Path;

use chatgate_tests::*;

const BIN: &str = "chatgate-smol";

/// The server certificate names `localhost` only: connecting to
/// `127.0.0.1` under `verify-full` is connecting to a name it lacks.
const HBA: &str = "hostssl all certuser 127.0.0.1/32 cert
hostssl all certuser ::1/128 cert
hostssl all scram 127.0.0.1/32 scram-sha-256
hostssl all scram ::1/128 scram-sha-256
hostssl all all 127.0.0.1/32 trust
hostssl all all ::1/128 trust
hostnossl all all 0.0.0.0/0 reject
hostnossl all all ::/0 reject";

struct Setup {
    pg: PgServer,
    dir: tempfile::TempDir,
}

impl Setup {
    fn start() -> Setup {
        let (certs, clients) = certs_and_clients(&["localhost"], &["certuser", "someone-else"]);
        let (other_ca, _) = certs_and_clients(&["localhost"], &[]);
        let pg = PgServer::start_tls(&certs, HBA);
        pg.client()
            .batch_execute(
                "CREATE ROLE certuser LOGIN; CREATE ROLE scram LOGIN PASSWORD 'canary-pg-3f9a'",
            )
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in [
            ("ca.pem", certs.ca_pem.as_str()),
            ("other-ca.pem", other_ca.ca_pem.as_str()),
            ("client.crt", clients[0].cert_pem.as_str()),
            ("client.key", clients[0].key_pem.as_str()),
            ("stranger.crt", clients[1].cert_pem.as_str()),
            ("stranger.key", clients[1].key_pem.as_str()),
        ] {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        Setup { pg, dir }
    }

    fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// A URL to `host` as `user`, with `params` (`{dir}` is the
    /// directory of the certificates).
    fn url(&self, user: &str, host: &str, params: &str) -> String {
        let params = params.replace("{dir}", &self.dir.path().display().to_string());
        format!(
            "postgres://{user}@{host}:{}/postgres{}{params}",
            self.pg.port,
            if params.is_empty() { "" } else { "?" }
        )
    }
}

/// `usage --postgres URL`: `Ok(())`, or its error output.
fn usage(url: &str) -> Result<(), String> {
    let (code, _, err) = run(BIN, &["usage", "--postgres", url, "--format", "json"], &[]);
    if code == 0 {
        Ok(())
    } else {
        assert!(!err.contains("panicked"), "{err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        Err(err)
    }
}

fn refused(url: &str, says: &[&str]) {
    let err = usage(url).expect_err(url);
    for s in says {
        assert!(err.contains(s), "{url}: expected {s:?} in: {err}");
    }
}

#[test]
fn each_sslmode_connects_or_refuses_as_libpq_documents() {
    let s = Setup::start();
    // The ledger table, for `usage` to read.
    let sql =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/ledger.sql"))
            .unwrap();
    s.pg.client().batch_execute(&sql).unwrap();
    let ip = "127.0.0.1";
    // Plain TCP is refused by the server: the error says to ask for TLS.
    refused(
        &s.url("postgres", ip, "sslmode=disable"),
        &["no encryption", "sslmode=verify-full"],
    );
    // libpq's default, prefer: TLS, as offered.
    usage(&s.url("postgres", ip, "")).unwrap();
    usage(&s.url("postgres", ip, "sslmode=prefer")).unwrap();
    usage(&s.url("postgres", ip, "sslmode=allow")).unwrap();
    // require: a certificate from an unknown CA is accepted, unverified.
    usage(&s.url("postgres", ip, "sslmode=require")).unwrap();
    // ... but with a root file it is verified as verify-ca.
    usage(&s.url("postgres", ip, "sslmode=require&sslrootcert={dir}/ca.pem")).unwrap();
    refused(
        &s.url(
            "postgres",
            ip,
            "sslmode=require&sslrootcert={dir}/other-ca.pem",
        ),
        &["sslrootcert"],
    );
    // verify-ca: the chain, not the name (the certificate names only
    // localhost).
    usage(&s.url("postgres", ip, "sslmode=verify-ca&sslrootcert={dir}/ca.pem")).unwrap();
    refused(
        &s.url(
            "postgres",
            ip,
            "sslmode=verify-ca&sslrootcert={dir}/other-ca.pem",
        ),
        &["not signed by a CA of sslrootcert"],
    );
    // verify-full: the name too.
    refused(
        &s.url(
            "postgres",
            ip,
            "sslmode=verify-full&sslrootcert={dir}/ca.pem",
        ),
        &["does not name the host", "sslmode=verify-ca"],
    );
    usage(&s.url(
        "postgres",
        "localhost",
        "sslmode=verify-full&sslrootcert={dir}/ca.pem",
    ))
    .unwrap();
    // The public roots do not vouch for a private CA.
    refused(
        &s.url("postgres", "localhost", "sslrootcert=system"),
        &["not signed by a CA of sslrootcert"],
    );
    // Settings libpq refuses are refused before connecting, naming them.
    refused(
        &s.url("postgres", ip, "sslmode=verify-full"),
        &["needs sslrootcert"],
    );
    refused(
        &s.url("postgres", ip, "sslmode=verify-everything"),
        &["sslmode=verify-everything is not one of"],
    );
    refused(
        &s.url(
            "postgres",
            ip,
            "sslmode=verify-full&sslrootcert={dir}/missing.pem",
        ),
        &["sslrootcert", "missing.pem"],
    );
    refused(
        &s.url(
            "postgres",
            "localhost",
            "sslmode=verify-full&sslrootcert={dir}/client.key",
        ),
        &["sslrootcert", "no CA certificate"],
    );
    // The key=value form says the same.
    let kv = format!(
        "host=localhost port={} user=postgres dbname=postgres sslmode=verify-full sslrootcert='{}'",
        s.pg.port,
        s.file("ca.pem")
    );
    usage(&kv).unwrap();
}

#[test]
fn client_certificates_and_channel_binding() {
    let s = Setup::start();
    let sql =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/ledger.sql"))
            .unwrap();
    s.pg.client().batch_execute(&sql).unwrap();
    s.pg.client()
        .batch_execute("GRANT SELECT ON chatgate_ledger TO certuser, scram")
        .unwrap();
    let verified = "sslmode=verify-full&sslrootcert={dir}/ca.pem";
    // hostssl … cert: the certificate whose CN is the user logs in.
    usage(&s.url(
        "certuser",
        "localhost",
        &format!("{verified}&sslcert={{dir}}/client.crt&sslkey={{dir}}/client.key"),
    ))
    .unwrap();
    refused(
        &s.url("certuser", "localhost", verified),
        &["sslcert and sslkey"],
    );
    refused(
        &s.url(
            "certuser",
            "localhost",
            &format!("{verified}&sslcert={{dir}}/stranger.crt&sslkey={{dir}}/stranger.key"),
        ),
        &["common name"],
    );
    refused(
        &s.url(
            "certuser",
            "localhost",
            &format!("{verified}&sslcert={{dir}}/client.crt"),
        ),
        &["sslkey"],
    );
    // SCRAM with channel binding: the server binds the login to the
    // certificate it sent (SCRAM-SHA-256-PLUS, tls-server-end-point), which
    // only succeeds if the digest the client computed is the server's.
    let scram = |params: &str| s.url("scram:canary-pg-3f9a", "localhost", params);
    usage(&scram(&format!("{verified}&channel_binding=require"))).unwrap();
    usage(&scram("sslmode=require&channel_binding=require")).unwrap();
    // A wrong password says so, and never the password given.
    let err = usage(&s.url("scram:wrong-canary-1c2d", "localhost", verified)).unwrap_err();
    assert!(
        err.contains("password") && !err.contains("wrong-canary-1c2d"),
        "{err}"
    );
}

#[test]
fn the_ledger_ships_and_the_keys_change_over_tls() {
    let s = Setup::start();
    let url = s.url(
        "postgres",
        "localhost",
        "sslmode=verify-full&sslrootcert={dir}/ca.pem",
    );
    let sim = Sim::start(BIN, &[], &[]);
    let gw = Gw::start(
        BIN,
        &sim.url(),
        GwOptions {
            args: vec!["--ledger-postgres".into(), url.clone()],
            ..GwOptions::default()
        },
    );
    for _ in 0..3 {
        assert_eq!(gw.chat(&body("")).status, 200);
    }
    eventually("three rows over TLS", || {
        s.pg.client()
            .query_one("SELECT count(*) FROM chatgate_ledger", &[])
            .is_ok_and(|r| r.get::<_, i64>(0) == 3)
    });
    let (code, out, err) = run(BIN, &["usage", "--postgres", &url, "--format", "json"], &[]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["total"]["requests"], 3, "{out}");
    let (code, _, err) = run(
        BIN,
        &["keys", "new", "--keys", &url, "--name", "over-tls"],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = run(BIN, &["keys", "list", "--keys", &url], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("over-tls"), "{out}");
    // A server without TLS, asked for it: the error says which setting.
    let plain = PgServer::start();
    let (code, _, err) = run(
        BIN,
        &[
            "keys",
            "list",
            "--keys",
            &format!(
                "postgres://postgres@127.0.0.1:{}/postgres?sslmode=require",
                plain.port
            ),
        ],
        &[],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("offers no TLS") && err.contains("sslmode=prefer"),
        "{err}"
    );
}

/// OPERATIONS.md's recipes for managed PostgreSQL are URLs chatgate reads
/// as they are meant: every one verifies the server's certificate and
/// name, and leaves the driver a URL it parses.
#[test]
fn the_managed_postgresql_recipes_verify_the_server() {
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../OPERATIONS.md"))
            .unwrap();
    let section = guide
        .split("## Managed PostgreSQL")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("OPERATIONS.md has Managed PostgreSQL");
    let urls: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with("postgres://"))
        .collect();
    assert!(urls.len() >= 4, "{urls:?}");
    for url in urls {
        let info = chatgate_core::split_tls(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(
            info.tls.verify(),
            chatgate_core::TlsVerify::ChainAndName,
            "{url}"
        );
        let parsed: Result<postgres::Config, _> = info.rest.parse();
        assert!(parsed.is_ok(), "{url}: {:?}", parsed.err());
    }
}
