//! What a highly available Redis costs on the happy path: the same key
//! (rate limits, a budget and an in-flight cap: the whole script) shared
//! through one `redis-server`, through a primary with a replica behind
//! three Sentinels (`--redis-sentinels`), and through a six-node Redis
//! Cluster (`--redis-cluster`), the three gateways of each binary measured
//! interleaved in one run. The gateway's CPU per request, the Redis
//! processes' (every server of the topology, replicas and Sentinels
//! included: what the operator pays for), and wrk's latency.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use chatgate_core::{RedisReply, RedisReplyLimits, encode_redis_command, parse_redis_reply};

use crate::procs::{Child, free_port};
use crate::quota::QUOTA;
use crate::{Setup, args, gateway_with, interleaved_cpu};

/// One command, its reply (`None`: nothing listens or it hung up).
fn redis(addr: SocketAddr, cmd: &[&[u8]]) -> Option<RedisReply> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut out = Vec::new();
    encode_redis_command(&mut out, cmd);
    s.write_all(&out).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(Some((r, _))) = parse_redis_reply(&buf, &RedisReplyLimits::default()) {
            return Some(r);
        }
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A `redis-server` on a free port (and its cluster bus, the port plus
/// 10,000, free too when `cluster`), in a directory of its own.
fn server(dir: &Path, name: &str, extra: &[&str], cluster: bool) -> (Child, u16) {
    let port = loop {
        let p = free_port();
        if !cluster
            || (p < 55_000 && std::net::TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok())
        {
            break p;
        }
    };
    let home = dir.join(name);
    std::fs::create_dir_all(&home).expect("redis directory");
    let mut a = args(&[
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &home.to_string_lossy(),
    ]);
    a.extend(extra.iter().map(|s| (*s).to_owned()));
    let child = Child::spawn(
        &crate::which("redis-server"),
        &a,
        &[],
        &dir.join(format!("{name}.log")),
    );
    crate::procs::wait_accepting(([127, 0, 0, 1], port).into(), Instant::now());
    (child, port)
}

fn local(port: u16) -> SocketAddr {
    ([127, 0, 0, 1], port).into()
}

/// A primary, its replica and three Sentinels; the flags that reach them.
fn sentinels(dir: &Path) -> (Vec<Child>, Vec<String>) {
    let (primary, p) = server(dir, "sentinel-primary", &[], false);
    let (replica, r) = server(
        dir,
        "sentinel-replica",
        &["--replicaof", "127.0.0.1", &p.to_string()],
        false,
    );
    until("the replica's link", || {
        matches!(redis(local(r), &[b"INFO", b"replication"]),
            Some(RedisReply::Bulk(Some(t))) if String::from_utf8_lossy(&t).contains("master_link_status:up"))
    });
    let mut procs = vec![primary, replica];
    let mut addrs = Vec::new();
    for i in 0..3 {
        let port = free_port();
        let conf = dir.join(format!("sentinel-{i}.conf"));
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor bench 127.0.0.1 {p} 2\n\
                 sentinel down-after-milliseconds bench 1000\nsentinel failover-timeout bench 3000\n",
                dir.display()
            ),
        )
        .expect("sentinel.conf");
        procs.push(Child::spawn(
            &crate::which("redis-sentinel"),
            &[conf.to_string_lossy().into_owned()],
            &[],
            &dir.join(format!("sentinel-{i}.log")),
        ));
        crate::procs::wait_accepting(local(port), Instant::now());
        addrs.push(format!("127.0.0.1:{port}"));
    }
    until("the Sentinels' quorum", || {
        matches!(
            redis(
                local(free_port_of(&addrs[0])),
                &[b"SENTINEL", b"ckquorum", b"bench"]
            ),
            Some(RedisReply::Simple(_))
        )
    });
    let flags = vec![
        "--redis-sentinels".to_owned(),
        addrs.join(","),
        "--redis-sentinel-master".to_owned(),
        "bench".to_owned(),
    ];
    (procs, flags)
}

fn free_port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .expect("HOST:PORT")
}

/// Six nodes made a cluster of three primaries with a replica each; the
/// flags that reach it.
fn cluster(dir: &Path) -> (Vec<Child>, Vec<String>) {
    let mut procs = Vec::new();
    let mut addrs = Vec::new();
    for i in 0..6 {
        let (c, port) = server(
            dir,
            &format!("cluster-{i}"),
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
            ],
            true,
        );
        procs.push(c);
        addrs.push(format!("127.0.0.1:{port}"));
    }
    let out = std::process::Command::new(crate::which("redis-cli"))
        .arg("--cluster")
        .arg("create")
        .args(&addrs)
        .args(["--cluster-replicas", "1", "--cluster-yes"])
        .output()
        .expect("redis-cli");
    assert!(out.status.success(), "redis-cli --cluster create failed");
    for a in &addrs {
        until("the cluster", || {
            matches!(redis(local(free_port_of(a)), &[b"CLUSTER", b"INFO"]),
                Some(RedisReply::Bulk(Some(t))) if String::from_utf8_lossy(&t).contains("cluster_state:ok"))
        });
    }
    (procs, vec!["--redis-cluster".to_owned(), addrs.join(",")])
}

/// Appends the table to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let Setup {
        tools,
        dir,
        upstream,
        lua,
        body,
        secs,
        ..
    } = *s;
    let dir = dir.join("redis-ha");
    std::fs::create_dir_all(&dir).expect("redis-ha directory");
    // Shared limits must stay within what the script computes exactly.
    let key = crate::mint_key_with(&tools.smol, &dir, "50000000000");
    let (single, port) = server(&dir, "single", &[], false);
    let (sentinel_procs, sentinel_flags) = sentinels(&dir);
    let (cluster_procs, cluster_flags) = cluster(&dir);
    let single_flags = vec!["--redis".to_owned(), format!("redis://127.0.0.1:{port}")];
    let topologies: [(&str, Vec<String>, Vec<u32>); 3] = [
        ("one server", single_flags, vec![single.pid()]),
        (
            "Sentinel (primary, replica, 3 Sentinels)",
            sentinel_flags,
            sentinel_procs.iter().map(Child::pid).collect(),
        ),
        (
            "cluster (3 primaries, 3 replicas)",
            cluster_flags,
            cluster_procs.iter().map(Child::pid).collect(),
        ),
    ];
    let _ = writeln!(
        report,
        "\n### Shared limits through a highly available Redis: non-streamed, 8 connections, {secs} s each (two rounds, interleaved)\n"
    );
    let _ = writeln!(
        report,
        "| binary | Redis | gateway CPU per request | ratio to one server | Redis CPU per request (all its processes) | p50 | p99 |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|---|");
    for (name, bin) in [
        ("chatgate-smol", &tools.smol),
        ("chatgate-tokio", &tools.tokio),
    ] {
        let mut gateways: Vec<Child> = topologies
            .iter()
            .enumerate()
            .map(|(i, (_, flags, _))| {
                let mut a: Vec<&str> = vec!["--upstream", upstream];
                a.extend(flags.iter().map(String::as_str));
                a.extend(QUOTA);
                gateway_with(bin, &dir, &a, &format!("{name}-{i}"))
            })
            .collect();
        let targets: Vec<(SocketAddr, Vec<u32>)> = gateways
            .iter_mut()
            .zip(&topologies)
            .map(|(g, (_, _, pids))| {
                let mut p = vec![g.pid()];
                p.extend(pids);
                (g.listening_address(), p)
            })
            .collect();
        let per = interleaved_cpu(tools, &targets, lua, body, &key, secs);
        let base = per[0].cpu[0];
        for ((label, _, _), m) in topologies.iter().zip(&per) {
            let redis_cpu: f64 = m.cpu[1..].iter().sum();
            let _ = writeln!(
                report,
                "| {name} | {label} | {:.1} µs | {:.2} | {redis_cpu:.1} µs | {:.2} ms | {:.2} ms |",
                m.cpu[0],
                m.cpu[0] / base,
                m.p50_ms,
                m.p99_ms
            );
        }
    }
}
