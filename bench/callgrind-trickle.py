#!/usr/bin/env python3
"""User-space instructions per relayed event of a trickling stream, counted
by valgrind's callgrind, for nginx (one process, `proxy_buffering off`) and
both gateways (one worker thread): the part of "CPU per event" that a busy,
shared machine does not move (BENCHMARKS.md, *Many long streams*).

    bench/callgrind-trickle.py                       # 100 streams, 10 s and 20 s
    bench/callgrind-trickle.py --streams 200 --only nginx,tokio

For each target, two runs: STREAMS streams held open at RATE events a
second for SHORT seconds, then for LONG seconds, each run a fresh process
under callgrind (nginx with `master_process off`, so the one process is
the worker). Per event = (Ir(LONG) - Ir(SHORT)) / (STREAMS * RATE *
(LONG - SHORT)): start-up, the streams' requests and heads and the exit
are the same in both runs and cancel; what is left is the events. The
upstream is `chatgate-smol sim`, never under callgrind; the client is this
script (asyncio, one connection per stream), which checks that every
stream ends with `data: [DONE]` and counts the events it read.

Needs the release binaries (bench/run.sh or `cargo build --release`; the
directory is $CARGO_TARGET_DIR/release or target/release), nginx and
valgrind (installed from the distribution when missing).
"""

import argparse
import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def listening(path, proc, what):
    """The ADDR of the "listening on http://ADDR/v1" line in PATH."""
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with open(path) as f:
                m = re.search(r"listening on http://([^/ ]+)/v1", f.read())
            if m:
                return m.group(1)
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            sys.exit(f"callgrind-trickle: {what} exited before listening")
        time.sleep(0.1)
    sys.exit(f"callgrind-trickle: {what} is not listening after 120 s")


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port):
    import socket

    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"callgrind-trickle: nothing listens on {port} after 120 s")


async def one_stream(addr, key, body):
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\n"
        f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    data = await reader.read()
    writer.close()
    text = data.decode(errors="replace")
    if not text.startswith("HTTP/1.1 200"):
        raise RuntimeError(f"not 200: {text[:200]!r}")
    if "data: [DONE]" not in text:
        raise RuntimeError("a stream ended without [DONE]")
    return text.count("data: ") - 1


async def hold(addr, key, streams, rate, seconds):
    events = rate * seconds
    body = (
        '{"model":"reasoning-model-k3","stream":true,"messages":[{"role":"user",'
        '"content":"Think it through."}],"x_sim":{"reasoning_tokens":%d,'
        '"answer_tokens":1,"token_ms":%d}}' % (events, 1000 // rate)
    ).encode()
    got = await asyncio.gather(*(one_stream(addr, key, body) for _ in range(streams)))
    return sum(got)


def total_ir(path):
    with open(path) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    sys.exit(f"callgrind-trickle: no total in {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--rate", type=int, default=1, help="events a second per stream")
    ap.add_argument("--short", type=int, default=10, help="seconds of the shorter run")
    ap.add_argument("--long", type=int, default=20, help="seconds of the longer run")
    ap.add_argument("--only", default="nginx,smol,tokio")
    ap.add_argument("--out-dir", default=None)
    a = ap.parse_args()
    if a.long <= a.short:
        sys.exit("callgrind-trickle: --long must exceed --short")
    target_dir = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    bins = os.path.join(os.path.abspath(target_dir), "release")
    for tool, pkg in (("valgrind", "valgrind"), ("nginx", "nginx")):
        if not shutil.which(tool) and not os.path.exists("/usr/sbin/nginx"):
            subprocess.run([os.path.join(ROOT, "scripts/install-package.sh"), pkg, tool], check=True)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    work = a.out_dir or tempfile.mkdtemp(prefix="chatgate-trickle.")
    os.makedirs(work, exist_ok=True)
    smol = os.path.join(bins, "chatgate-smol")

    sim_out = open(os.path.join(work, "sim.stdout"), "w")
    sim = subprocess.Popen([smol, "sim", "--listen", "127.0.0.1:0"], stdout=sim_out,
                           stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        sim_addr = listening(os.path.join(work, "sim.stdout"), sim, "the simulator")
        keys = os.path.join(work, "keys.toml")
        key = subprocess.run(
            [smol, "keys", "new", "--keys", keys, "--name", "b", "--rpm", "1000000000",
             "--tpm", "1000000000000"],
            check=True, capture_output=True, text=True).stdout.split()[0]
        rows = []
        for target in a.only.split(","):
            irs, events = [], []
            for secs in (a.short, a.long):
                tag = f"{target}.{secs}"
                out = os.path.join(work, f"callgrind.{tag}.out")
                cg = ["valgrind", "--tool=callgrind", "--fair-sched=yes",
                      f"--callgrind-out-file={out}"]
                log = open(os.path.join(work, f"{tag}.log"), "w")
                if target == "nginx":
                    port = free_port()
                    conf = os.path.join(work, f"nginx.{tag}.conf")
                    with open(conf, "w") as f:
                        f.write(
                            "daemon off;\nmaster_process off;\nworker_processes 1;\n"
                            f"pid {work}/nginx.{tag}.pid;\nerror_log {work}/nginx.{tag}.err warn;\n"
                            "events { worker_connections 4096; }\nhttp {\n  access_log off;\n"
                            f"  upstream up {{ server {sim_addr}; keepalive 64; }}\n"
                            f"  server {{\n    listen 127.0.0.1:{port} backlog=4096;\n"
                            "    location / {\n      proxy_pass http://up;\n"
                            "      proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n"
                            "      proxy_buffering off;\n      proxy_read_timeout 900s;\n    }\n  }\n}\n")
                    proc = subprocess.Popen(cg + [nginx, "-p", work, "-c", conf], stdout=log,
                                            stderr=log, stdin=subprocess.DEVNULL)
                    wait_port(port)
                    addr = f"127.0.0.1:{port}"
                else:
                    stdout = os.path.join(work, f"{tag}.stdout")
                    proc = subprocess.Popen(
                        cg + [os.path.join(bins, f"chatgate-{target}"), "serve", "--listen",
                              "127.0.0.1:0", "--upstream", f"http://{sim_addr}/v1", "--keys",
                              keys, "--ledger", os.path.join(work, f"ledger.{tag}.jsonl"),
                              "--log-level", "warn", "--worker-threads", "1"],
                        stdout=open(stdout, "w"), stderr=log, stdin=subprocess.DEVNULL,
                        env={**os.environ, "CHATGATE_UPSTREAM_API_KEY": "sk-sim-not-a-secret"})
                    addr = listening(stdout, proc, f"chatgate-{target}")
                # One stream first, as the long workload warms a process.
                asyncio.run(hold(addr, key, 1, 10, 1))
                n = asyncio.run(hold(addr, key, a.streams, a.rate, secs))
                proc.send_signal(signal.SIGTERM if target == "nginx" else signal.SIGINT)
                proc.wait(timeout=120)
                irs.append(total_ir(out))
                events.append(n)
                print(f"==> {target}, {a.streams} streams x {secs} s: {n} events, Ir {irs[-1]}",
                      flush=True)
            rows.append((target, (irs[1] - irs[0]) / (events[1] - events[0])))
    finally:
        sim.terminate()
    nginx_ir = dict(rows).get("nginx")
    print(f"\nuser-space instructions per relayed event (callgrind Ir), {a.streams} streams "
          f"at {a.rate}/s, ({a.long} s run - {a.short} s run) / events between them\n")
    print("| target | per event | x nginx |\n|---|---|---|")
    for target, per in rows:
        ratio = f"{per / nginx_ir:.2f}" if nginx_ir else "-"
        name = "nginx (one process)" if target == "nginx" else f"chatgate-{target}"
        print(f"| {name} | {per:,.0f} | {ratio} |")
    print(f"\nprofiles and logs: {work}")


if __name__ == "__main__":
    main()
