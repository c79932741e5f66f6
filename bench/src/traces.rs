//! What tracing costs: CPU per request with every request traced (100 %
//! sampling, exported to a collector that accepts everything) against
//! tracing off, and with the collector down or stalling (every export
//! fails, the spans are dropped): the gateways interleaved in one run.
//! The collector here is a second simulator (`POST /v1/traces` is a sink),
//! so its own cost is not the gateway's.

use std::fmt::Write as _;
use std::net::TcpListener;

use crate::procs::Child;
use crate::{Setup, args, gateway_with, interleaved_cpu};

/// Appends the table to `report`.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let Setup {
        tools,
        dir,
        upstream,
        key,
        lua,
        body,
        secs,
        ..
    } = *s;
    let mut sink = Child::spawn(
        &tools.smol,
        &args(&["sim", "--listen", "127.0.0.1:0"]),
        &[],
        &dir.join("trace-sink.log"),
    );
    let sink = format!("http://{}", sink.listening_address());
    // Down: a port nothing listens on. Stalled: a listener that accepts
    // and never answers (the backlog holds the connections).
    let down = format!(
        "http://{}",
        TcpListener::bind("127.0.0.1:0")
            .expect("a free port")
            .local_addr()
            .expect("its address")
    );
    let stalled_listener = TcpListener::bind("127.0.0.1:0").expect("a stalled collector");
    let stalled = format!(
        "http://{}",
        stalled_listener.local_addr().expect("its address")
    );
    let _ = writeln!(
        report,
        "\n### Tracing: non-streamed, 8 connections, {secs} s each (two rounds, interleaved)\n"
    );
    let _ = writeln!(
        report,
        "| binary | CPU per request, off | traced, 100 % exported | ratio | collector down | ratio | collector stalled | ratio | p99 latency: off / traced / down / stalled |"
    );
    let _ = writeln!(report, "|---|---|---|---|---|---|---|---|---|");
    for (name, bin) in [
        ("chatgate-smol", &tools.smol),
        ("chatgate-tokio", &tools.tokio),
    ] {
        let with = |collector: &str, label: &str| {
            gateway_with(
                bin,
                dir,
                &[
                    "--upstream",
                    upstream,
                    "--otlp-endpoint",
                    collector,
                    "--otlp-timeout",
                    "500ms",
                ],
                &format!("{name}-traces-{label}"),
            )
        };
        let mut gws = [
            gateway_with(
                bin,
                dir,
                &["--upstream", upstream],
                &format!("{name}-traces-off"),
            ),
            with(&sink, "on"),
            with(&down, "down"),
            with(&stalled, "stalled"),
        ];
        let targets: Vec<_> = gws
            .iter_mut()
            .map(|g| (g.listening_address(), vec![g.pid()]))
            .collect();
        let per = interleaved_cpu(tools, &targets, lua, body, key, secs);
        let off = per[0].cpu[0];
        let cell = |v: f64| format!("{v:.1} µs | {:.2}", v / off);
        let _ = writeln!(
            report,
            "| {name} | {off:.1} µs | {} | {} | {} | {:.2} / {:.2} / {:.2} / {:.2} ms |",
            cell(per[1].cpu[0]),
            cell(per[2].cpu[0]),
            cell(per[3].cpu[0]),
            per[0].p99_ms,
            per[1].p99_ms,
            per[2].p99_ms,
            per[3].p99_ms
        );
    }
    drop(stalled_listener);
}
