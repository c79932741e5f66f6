//! The lean comparison: chatgate against the fastest plain proxy a new
//! user would set up, in front of an upstream that costs next to nothing.
//!
//! - The upstream is a second nginx answering every request with a fixed
//!   460-byte completion (`return 200 '…'`) or a fixed 104-event SSE file
//!   of about 21.7 KB (a static file; a `POST` is served it through
//!   `error_page 405 =200`), so the proxy's own cost dominates.
//! - The reference is nginx with one worker, no access log, HTTP/1.1 to an
//!   upstream `keepalive 64` pool, `proxy_buffering off`, and keep-alive
//!   connections that are never closed for their request count (nginx's
//!   default closes one every 1,000 requests; chatgate never does).
//! - chatgate runs `serve` with its ledger, without access lines
//!   (`--log-level warn`: the counterpart of `access_log off`) and with one
//!   worker thread (`--worker-threads 1`: the counterpart of
//!   `worker_processes 1`).
//! - wrk with one thread, a 2 s warm-up per target, then `secs` at 8 and
//!   64 connections; CPU per request = the proxy's utime + stime over the
//!   requests wrk counted.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use crate::procs::{Child, free_port, group_pids, wait_accepting};
use crate::{Contender, Setup, gateway_with, measured, nginx_args, ratio, write_conf, wrk};

/// The non-streamed answer's length, bytes.
pub(crate) const COMPLETION_BYTES: usize = 460;
/// Events in the streamed answer: the role, 100 deltas, the finish, the
/// usage chunk and `[DONE]`.
pub(crate) const STREAM_EVENTS: usize = 104;

/// The fixed non-streamed answer: an OpenAI-shaped completion of exactly
/// [`COMPLETION_BYTES`] (its content padded to length).
pub(crate) fn completion() -> String {
    let shape = |content: &str| {
        format!(
            r#"{{"id":"chatcmpl-lean0000000000000001","object":"chat.completion","created":1795000000,"model":"reasoning-model-k3","choices":[{{"index":0,"message":{{"role":"assistant","content":"{content}","reasoning_content":"The user asks for a capital."}},"logprobs":null,"finish_reason":"stop"}}],"usage":{{"prompt_tokens":38,"completion_tokens":30,"total_tokens":68,"completion_tokens_details":{{"reasoning_tokens":20}}}}}}"#
        )
    };
    let bare = shape("").len();
    let words = "Paris is the capital of France, the seat of its government and its largest city ";
    let content: String = words
        .chars()
        .cycle()
        .take(COMPLETION_BYTES - bare)
        .collect();
    let body = shape(content.trim_end_matches(' '));
    // Trimming may have shortened it: pad with a last word instead.
    let short = COMPLETION_BYTES - body.len();
    let body = shape(&format!(
        "{}{}",
        content.trim_end_matches(' '),
        "!".repeat(short)
    ));
    assert_eq!(body.len(), COMPLETION_BYTES);
    body
}

/// The fixed streamed answer: [`STREAM_EVENTS`] events as an OpenAI
/// provider sends them (60 reasoning deltas, 40 content deltas), about
/// 21.7 KB.
pub(crate) fn stream() -> String {
    let chunk = |choices: &str, usage: &str| {
        format!(
            "data: {{\"id\":\"chatcmpl-lean2\",\"object\":\"chat.completion.chunk\",\"created\":1795000000,\"model\":\"reasoning-model-k3\",\"choices\":[{choices}],\"usage\":{usage}}}\n\n"
        )
    };
    let choice = |delta: &str, finish: &str| {
        format!(r#"{{"index":0,"delta":{delta},"finish_reason":{finish}}}"#)
    };
    let mut out = chunk(
        &choice(r#"{"role":"assistant","content":""}"#, "null"),
        "null",
    );
    for i in 0..100 {
        let word = ["weighing ", "the ", "history ", "of ", "France "][i % 5];
        let delta = if i < 60 {
            format!(r#"{{"reasoning_content":"{word}"}}"#)
        } else {
            format!(r#"{{"content":"{word}"}}"#)
        };
        out.push_str(&chunk(&choice(&delta, "null"), "null"));
    }
    out.push_str(&chunk(&choice("{}", r#""stop""#), "null"));
    out.push_str(&chunk(
        "",
        r#"{"prompt_tokens":38,"completion_tokens":100,"total_tokens":138,"completion_tokens_details":{"reasoning_tokens":60}}"#,
    ));
    out.push_str("data: [DONE]\n\n");
    out
}

/// The upstream: one nginx worker, two ports (the completion, the stream).
pub(crate) fn write_upstream_conf(
    dir: &Path,
    completion_port: u16,
    stream_port: u16,
) -> std::path::PathBuf {
    let root = dir.join("lean-static");
    std::fs::create_dir_all(&root).expect("static directory");
    std::fs::write(root.join("stream.sse"), stream()).expect("stream file");
    write_conf(
        dir,
        "lean-up",
        "worker_processes 1;\nevents { worker_connections 4096; }",
        &format!(
            "  access_log off;\n  keepalive_requests 100000000;\n  \
             server {{\n    listen 127.0.0.1:{completion_port};\n    location / {{\n      default_type application/json;\n      \
             return 200 '{completion}';\n    }}\n  }}\n  \
             server {{\n    listen 127.0.0.1:{stream_port};\n    root {root};\n    \
             location / {{\n      types {{ }}\n      default_type text/event-stream;\n      try_files /stream.sse =404;\n      \
             error_page 405 =200 $uri;\n    }}\n  }}\n",
            completion = completion(),
            root = root.display(),
        ),
    )
}

/// The reference proxy, `dir/{name}.conf`: one worker for `connections`,
/// no access log, an upstream keep-alive pool of 64, unbuffered, and room
/// for a stream that is slow between events.
pub(crate) fn write_proxy_conf(
    dir: &Path,
    name: &str,
    port: u16,
    upstream: SocketAddr,
    fd_limit: u64,
    connections: u64,
) -> std::path::PathBuf {
    write_conf(
        dir,
        name,
        &format!(
            "worker_processes 1;\nworker_rlimit_nofile {fd_limit};\nevents {{ worker_connections {connections}; }}"
        ),
        &format!(
            "  access_log off;\n  keepalive_requests 100000000;\n  \
             upstream up {{ server {upstream}; keepalive 64; keepalive_requests 100000000; }}\n  \
             server {{\n    listen 127.0.0.1:{port} backlog=4096;\n    location / {{\n      proxy_pass http://up;\n      proxy_http_version 1.1;\n      \
             proxy_set_header Connection \"\";\n      proxy_buffering off;\n      proxy_read_timeout 900s;\n    }}\n  }}\n"
        ),
    )
}

/// Appends the lean tables to `report`: non-streamed and streamed, at 8
/// and 64 connections.
pub(crate) fn report(report: &mut String, s: &Setup<'_>) {
    let Setup {
        tools,
        dir,
        key,
        lua,
        secs,
        fd_limit,
        ..
    } = *s;
    let (completion_port, stream_port) = (free_port(), free_port());
    let up_conf = write_upstream_conf(dir, completion_port, stream_port);
    let _upstream = Child::spawn(
        &tools.nginx,
        &nginx_args(dir, &up_conf),
        &[],
        &dir.join("lean-up.stderr"),
    );
    let body = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("body file");
        p
    };
    let nonstream = body("lean-nonstream.json", crate::NONSTREAM);
    let stream_body = body("lean-stream.json", crate::STREAM);
    let kb = stream().len() as f64 / 1000.0;
    for (label, port, path) in [
        (
            format!("non-streamed ({COMPLETION_BYTES}-byte answer)"),
            completion_port,
            &nonstream,
        ),
        (
            format!("streamed ({STREAM_EVENTS} events, {kb:.1} KB)"),
            stream_port,
            &stream_body,
        ),
    ] {
        let up: SocketAddr = ([127, 0, 0, 1], port).into();
        wait_accepting(up, std::time::Instant::now());
        let proxy_port = free_port();
        let conf = write_proxy_conf(
            dir,
            &format!("lean-{proxy_port}"),
            proxy_port,
            up,
            fd_limit,
            4096,
        );
        let nginx = Child::spawn(
            &tools.nginx,
            &nginx_args(dir, &conf),
            &[],
            &dir.join(format!("lean-{proxy_port}.stderr")),
        );
        let nginx_addr: SocketAddr = ([127, 0, 0, 1], proxy_port).into();
        wait_accepting(nginx_addr, std::time::Instant::now());
        let worker = crate::procs::nginx_workers(nginx.pid(), 1);
        let upstream = format!("http://{up}/v1");
        let lean_gateway = |bin: &Path, name: &str| {
            let mut g = gateway_with(
                bin,
                dir,
                &[
                    "--upstream",
                    &upstream,
                    "--log-level",
                    "warn",
                    "--worker-threads",
                    "1",
                ],
                &format!("lean-{name}-{port}"),
            );
            let addr = g.listening_address();
            (g, addr)
        };
        let (smol, smol_addr) = lean_gateway(&tools.smol, "smol");
        let (tokio, tokio_addr) = lean_gateway(&tools.tokio, "tokio");
        let target = |name, addr, pids| Contender { name, addr, pids };
        let mut targets = vec![
            (target("upstream direct", up, vec![]), None),
            (target("nginx (lean)", nginx_addr, worker), None),
            (target("chatgate-smol", smol_addr, vec![smol.pid()]), None),
            (
                target("chatgate-tokio", tokio_addr, vec![tokio.pid()]),
                None,
            ),
        ];
        let text = std::fs::read_to_string(path).expect("body file");
        let (peers, notices) = crate::peers::start(dir, up, lua, &text);
        for p in &peers {
            targets.push((target(p.name, p.addr, vec![p.group]), Some(p)));
        }
        for c in [8, 64] {
            let _ = writeln!(
                report,
                "\n### Lean: {label}, {c} connections, static upstream (wrk -t1, 2 s warm-up, {secs} s)\n"
            );
            let _ = writeln!(
                report,
                "| target | requests/s | proxy CPU per request | × nginx | p50 | p99 | p99 − nginx's |"
            );
            let _ = writeln!(report, "|---|---|---|---|---|---|---|");
            let mut rows = Vec::new();
            for (t, peer) in &targets {
                let lua = peer.map_or(lua, |p| p.lua.as_path());
                wrk(&tools.wrk, t.addr, lua, path, key, c, 2, 1);
                // A peer's processes as they are now (workers come and go).
                let t = &Contender {
                    name: t.name,
                    addr: t.addr,
                    pids: peer.map_or_else(|| t.pids.clone(), |p| group_pids(p.group)),
                };
                let (r, per_req) = measured(&tools.wrk, t, lua, path, key, c, secs, 1);
                rows.push((t.name, r, per_req));
            }
            let (nginx_cpu, nginx_p99) = (rows[1].2, rows[1].1.p99_ms);
            for (i, (name, r, per_req)) in rows.iter().enumerate() {
                let _ = writeln!(
                    report,
                    "| {name} | {:.0} | {} | {} | {:.2} ms | {:.2} ms | {} |{}",
                    r.rps,
                    per_req.map_or("—".into(), |v| format!("{v:.1} µs")),
                    ratio(*per_req, nginx_cpu),
                    r.p50_ms,
                    r.p99_ms,
                    if i < 2 {
                        "—".into()
                    } else {
                        format!("{:+.2} ms", r.p99_ms - nginx_p99)
                    },
                    if r.bad > 0 {
                        format!(" ({} failed)", r.bad)
                    } else {
                        String::new()
                    },
                );
            }
        }
        for n in &notices {
            let _ = writeln!(report, "\n{n}");
        }
        drop(targets);
        drop((smol, tokio, nginx, peers));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_fixed_answers_have_their_sizes() {
        assert_eq!(super::completion().len(), super::COMPLETION_BYTES);
        let s = super::stream();
        assert_eq!(s.matches("data: ").count(), super::STREAM_EVENTS);
        assert!((21_000..22_500).contains(&s.len()), "{}", s.len());
        for event in s
            .split("\n\n")
            .filter(|e| !e.is_empty() && *e != "data: [DONE]")
        {
            let json = event.strip_prefix("data: ").unwrap();
            serde_json::from_str::<serde_json::Value>(json).unwrap();
        }
        serde_json::from_str::<serde_json::Value>(&super::completion()).unwrap();
    }
}
