//! The first workloads, each against every target: closed loop (wrk),
//! open loop, timed streams, held streams, and start-up.

use std::fmt::Write as _;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::client::{self, percentile};
use crate::procs::{Child, free_port, rss_kib, wait_accepting};
use crate::{
    Contender, NONSTREAM, SLOW, Setup, TIMED, TIMED_TOKEN, gateway, measured, ms, nginx_args,
    ratio, write_nginx_conf,
};

/// Closed loop (wrk): requests of the body at `path` against every target,
/// a table per connection count in `conns`.
pub(crate) fn report_closed_loop(
    report: &mut String,
    s: &Setup<'_>,
    targets: &[Contender],
    label: &str,
    path: &Path,
    conns: &[u32],
) {
    let Setup {
        tools,
        key,
        lua,
        secs,
        ..
    } = *s;
    for &c in conns {
        let _ = writeln!(
            report,
            "\n### {label}, {c} connections, closed loop ({secs} s each, wrk)\n"
        );
        let _ = writeln!(
            report,
            "| target | requests/s | proxy CPU per request | × nginx | p50 | p99 |"
        );
        let _ = writeln!(report, "|---|---|---|---|---|---|");
        let mut rows = Vec::new();
        for t in targets {
            let (r, per_req) = measured(&tools.wrk, t, lua, path, key, c, secs, 2);
            rows.push((t.name, r, per_req));
        }
        let nginx_cpu = rows[1].2;
        for (name, r, per_req) in &rows {
            let _ = writeln!(
                report,
                "| {name} | {:.0} | {} | {} | {:.2} ms | {:.2} ms |{}",
                r.rps,
                per_req.map_or("—".into(), |v| format!("{v:.1} µs")),
                ratio(*per_req, nginx_cpu),
                r.p50_ms,
                r.p99_ms,
                if r.bad > 0 {
                    format!(" ({} failed)", r.bad)
                } else {
                    String::new()
                },
            );
        }
    }
}

/// Open loop: non-streamed requests at a fixed rate, the latency each
/// target adds to the simulator's.
pub(crate) fn report_open_loop(
    report: &mut String,
    s: &Setup<'_>,
    targets: &[Contender],
    rt: &tokio::runtime::Runtime,
    local: &tokio::task::LocalSet,
    quick: bool,
) {
    let Setup { key, secs, .. } = *s;
    let rate = if quick { 200 } else { 1000 };
    let _ = writeln!(
        report,
        "\n### Open loop, non-streamed, {rate} requests/s for {secs} s\n"
    );
    let _ = writeln!(
        report,
        "| target | p50 | p99 | p99.9 | added p50 | added p99 | × nginx's added p99 |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|---|");
    let request = Rc::new(client::chat_request(key, NONSTREAM));
    let mut rows = Vec::new();
    for t in targets {
        let mut lat = local.block_on(
            rt,
            client::open_loop(t.addr, Rc::clone(&request), rate, Duration::from_secs(secs)),
        );
        lat.sort_unstable();
        rows.push((
            t.name,
            percentile(&lat, 50.0),
            percentile(&lat, 99.0),
            percentile(&lat, 99.9),
            lat.len(),
        ));
    }
    let (d50, d99) = (rows[0].1, rows[0].2);
    let n_added = rows[1].2.as_secs_f64() - d99.as_secs_f64();
    for (name, p50, p99, p999, n) in &rows {
        let (a50, a99) = (
            p50.as_secs_f64() - d50.as_secs_f64(),
            p99.as_secs_f64() - d99.as_secs_f64(),
        );
        let _ = writeln!(
            report,
            "| {name} | {} | {} | {} | {} | {} | {} |{}",
            ms(*p50),
            ms(*p99),
            ms(*p999),
            if *name == "direct" {
                "—".into()
            } else {
                format!("{:.3} ms", a50 * 1e3)
            },
            if *name == "direct" {
                "—".into()
            } else {
                format!("{:.3} ms", a99 * 1e3)
            },
            if *name == "direct" {
                "—".into()
            } else {
                ratio(Some(a99), Some(n_added))
            },
            if *n == 0 { " (no answers)" } else { "" },
        );
    }
}

/// Timed streams: the time to first byte and each event's delay against
/// the simulator's schedule, a number of streams at a time.
pub(crate) fn report_timed_streams(
    report: &mut String,
    s: &Setup<'_>,
    targets: &[Contender],
    rt: &tokio::runtime::Runtime,
    local: &tokio::task::LocalSet,
    quick: bool,
) {
    let Setup { key, secs, .. } = *s;
    let conc = if quick { 4 } else { 32 };
    let _ = writeln!(
        report,
        "\n### Timed streams: first token after 100 ms, then one every 5 ms, 100 events; {conc} at a time for {secs} s\n"
    );
    let _ = writeln!(
        report,
        "| target | streams | time to first byte p50 | added TTFB p50 | × nginx | per-event delay p50 | p99 | added per-event p99 | × nginx |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|---|---|---|");
    let request = Rc::new(client::chat_request(key, TIMED));
    let mut rows = Vec::new();
    for t in targets {
        let streams = local.block_on(
            rt,
            client::timed_streams(t.addr, Rc::clone(&request), conc, Duration::from_secs(secs)),
        );
        let mut ttfb: Vec<Duration> = streams.iter().filter_map(|s| s.first().copied()).collect();
        // Lateness of event i against the ideal schedule anchored at the first.
        let mut late: Vec<Duration> = streams
            .iter()
            .flat_map(|s| {
                let first = s.first().copied().unwrap_or_default();
                s.iter()
                    .enumerate()
                    .skip(1)
                    .take(96)
                    .map(move |(i, &at)| at.saturating_sub(first + TIMED_TOKEN * i as u32))
            })
            .collect();
        ttfb.sort_unstable();
        late.sort_unstable();
        rows.push((
            t.name,
            streams.len(),
            percentile(&ttfb, 50.0),
            percentile(&late, 50.0),
            percentile(&late, 99.0),
        ));
    }
    let (d_ttfb, d_late99) = (rows[0].2.as_secs_f64(), rows[0].4.as_secs_f64());
    let (n_ttfb, n_late99) = (
        rows[1].2.as_secs_f64() - d_ttfb,
        rows[1].4.as_secs_f64() - d_late99,
    );
    for (name, n, ttfb, late50, late99) in &rows {
        let (a_ttfb, a_late) = (ttfb.as_secs_f64() - d_ttfb, late99.as_secs_f64() - d_late99);
        let direct = *name == "direct";
        let _ = writeln!(
            report,
            "| {name} | {n} | {} | {} | {} | {} | {} | {} | {} |",
            ms(*ttfb),
            if direct {
                "—".into()
            } else {
                format!("{:.3} ms", a_ttfb * 1e3)
            },
            if direct {
                "—".into()
            } else {
                ratio(Some(a_ttfb), Some(n_ttfb))
            },
            ms(*late50),
            ms(*late99),
            if direct {
                "—".into()
            } else {
                format!("{:.3} ms", a_late * 1e3)
            },
            if direct {
                "—".into()
            } else {
                ratio(Some(a_late), Some(n_late99))
            },
        );
    }
}

/// Held streams: the memory each proxy spends per slow stream it holds
/// open, for each number of streams.
pub(crate) fn report_held_streams(
    report: &mut String,
    s: &Setup<'_>,
    targets: &[Contender],
    rt: &tokio::runtime::Runtime,
    local: &tokio::task::LocalSet,
    quick: bool,
) {
    let Setup { key, fd_limit, .. } = *s;
    // Each proxied stream costs the proxy two descriptors.
    let most = ((fd_limit.saturating_sub(100)) / 2) as usize;
    let reduced = !quick && most < 10_000;
    let sizes: Vec<usize> = if quick {
        vec![100]
    } else {
        vec![1000, 10_000.min(most)]
    };
    let request = Rc::new(client::chat_request(key, SLOW));
    for n in sizes {
        let _ = writeln!(
            report,
            "\n### {n} slow streams held open (a token a second)\n"
        );
        let _ = writeln!(
            report,
            "| target | streams open | RSS before | RSS with streams | per stream | × nginx |"
        );
        let _ = writeln!(report, "|---|---|---|---|---|---|");
        let mut rows = Vec::new();
        for t in targets.iter().filter(|t| !t.pids.is_empty()) {
            let before = rss_kib(&t.pids);
            let held = local.block_on(
                rt,
                client::hold_streams(t.addr, Rc::clone(&request), n, 500),
            );
            std::thread::sleep(Duration::from_secs(1));
            let with = rss_kib(&t.pids);
            let open = held.len();
            drop(held);
            let per = (with.saturating_sub(before)) as f64 / open.max(1) as f64;
            rows.push((t.name, open, before, with, per));
            std::thread::sleep(Duration::from_secs(2));
        }
        let nginx_per = rows.first().map(|r| r.4);
        for (name, open, before, with, per) in &rows {
            let _ = writeln!(
                report,
                "| {name} | {open} | {:.1} MiB | {:.1} MiB | {per:.1} KiB | {} |",
                *before as f64 / 1024.0,
                *with as f64 / 1024.0,
                ratio(Some(*per), nginx_per)
            );
        }
        if reduced && n == most {
            let _ = writeln!(
                report,
                "\n(The open-files limit here, {fd_limit}, allows {n} proxied streams: two descriptors each.)"
            );
        }
    }
}

/// Start-up: exec to accepting connections, nginx and both gateways,
/// the median of five starts each.
pub(crate) fn report_startup(report: &mut String, s: &Setup<'_>) {
    let Setup {
        tools,
        dir,
        sim: sim_addr,
        upstream,
        fd_limit,
        ..
    } = *s;
    let _ = writeln!(
        report,
        "\n### Start-up: exec to accepting connections (median of 5)\n"
    );
    let _ = writeln!(report, "| target | start-up | × nginx |");
    let _ = writeln!(report, "|---|---|---|");
    let mut nginx_times = Vec::new();
    for i in 0..5 {
        let port = free_port();
        let conf = write_nginx_conf(dir, port, sim_addr, fd_limit, &format!("start{i}"));
        let started = Instant::now();
        let _n = Child::spawn(
            &tools.nginx,
            &nginx_args(dir, &conf),
            &[],
            &dir.join(format!("start{i}.stderr")),
        );
        nginx_times.push(wait_accepting(([127, 0, 0, 1], port).into(), started));
    }
    nginx_times.sort_unstable();
    let nginx_start = nginx_times[2];
    let _ = writeln!(report, "| nginx | {} | 1.00 |", ms(nginx_start));
    for (name, bin) in [
        ("chatgate-smol", &tools.smol),
        ("chatgate-tokio", &tools.tokio),
    ] {
        let mut times = Vec::new();
        for i in 0..5 {
            let started = Instant::now();
            let mut g = gateway(bin, dir, upstream, &format!("start-{name}-{i}"));
            g.listening_address();
            times.push(started.elapsed());
        }
        times.sort_unstable();
        let _ = writeln!(
            report,
            "| {name} | {} | {} |",
            ms(times[2]),
            ratio(
                Some(times[2].as_secs_f64()),
                Some(nginx_start.as_secs_f64())
            )
        );
    }
}
