#!/usr/bin/env python3
"""One process per core against one process with a thread per core: CPU per
request, p99 and requests a second, on the lean comparison's setup
(BENCHMARKS.md, *One process per core*).

    bench/per-core.py                      # 3 rounds of 5 s, 8 and 64 connections
    bench/per-core.py --rounds 1 --seconds 3 --conns 64

Targets, for each of chatgate-tokio and chatgate-smol (`--log-level warn`,
the lean flags) and nginx (no access log, `proxy_buffering off`, an
upstream keep-alive pool of 64):

- `1t`: one process, `--worker-threads 1` (nginx: `worker_processes 1`);
- `2t`: one process, `--worker-threads 2`: tokio's work-stealing runtime,
  smol's executor on two threads (nginx: `worker_processes 2`);
- `2p`: two processes of `--worker-threads 1` sharing the port with
  `--reuse-port on` (SO_REUSEPORT), each with its own ledger.

The upstream is a static nginx (the completion of `bench/src/lean.rs`, a
104-event stream as a file); the client is wrk with one thread. Every
target gets a 2 s warm-up, then `--seconds` measured; the rounds are
interleaved (every target once per round), so a machine that slows down
slows every target alike. CPU per request = utime + stime of the target's
processes (all their threads; nginx's workers) over the requests wrk
counted. Ratios are against nginx with two workers in the same round.

Needs the release binaries (bench/run.sh or `cargo build --release`; the
directory is $CARGO_TARGET_DIR/release or target/release), nginx and wrk
(installed from the distribution when missing).
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HZ = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_accepting(port):
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing accepts on port {port}")


def completion():
    """The lean comparison's non-streamed answer (bench/src/lean.rs)."""
    words = "Paris is the capital of France, the seat of its government and its largest city "
    body = lambda content: json.dumps(
        {"id": "chatcmpl-lean0000000000000001", "object": "chat.completion", "created": 1795000000,
         "model": "reasoning-model-k3",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": content,
                                              "reasoning_content": "The user asks for a capital."},
                      "logprobs": None, "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 38, "completion_tokens": 30, "total_tokens": 68,
                   "completion_tokens_details": {"reasoning_tokens": 20}}},
        separators=(",", ":"))
    content = (words * 4)[: 460 - len(body(""))]
    return body(content)


def stream():
    """The lean comparison's streamed answer: 104 events, ~21.4 KB."""
    chunk = lambda choices, usage: (
        'data: {"id":"chatcmpl-lean2","object":"chat.completion.chunk","created":1795000000,'
        f'"model":"reasoning-model-k3","choices":[{choices}],"usage":{usage}}}\n\n')
    choice = lambda delta, finish: f'{{"index":0,"delta":{delta},"finish_reason":{finish}}}'
    out = chunk(choice('{"role":"assistant","content":""}', "null"), "null")
    for i in range(100):
        word = ["weighing ", "the ", "history ", "of ", "France "][i % 5]
        field = "reasoning_content" if i < 60 else "content"
        out += chunk(choice(f'{{"{field}":"{word}"}}', "null"), "null")
    out += chunk(choice("{}", '"stop"'), "null")
    out += chunk("", '{"prompt_tokens":38,"completion_tokens":100,"total_tokens":138,'
                     '"completion_tokens_details":{"reasoning_tokens":60}}')
    return out + "data: [DONE]\n\n"


REQUEST = ('{"model":"reasoning-model-k3",%s"messages":[{"role":"system","content":"You are a helpful '
           'assistant. Answer briefly."},{"role":"user","content":"What is the capital of France, and why '
           'is it the capital?"}]}')
LUA = ('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
       'wrk.headers["Authorization"] = "Bearer " .. os.getenv("KEY")\n'
       'local f = io.open(os.getenv("BODY"), "r"); wrk.body = f:read("*a"); f:close()\n')


class Bench:
    def __init__(self, args, work):
        self.args, self.work, self.procs = args, work, []
        self.nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        os.makedirs(f"{work}/tmp")
        os.makedirs(f"{work}/static")

    def spawn(self, argv, log):
        p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(f"{self.work}/{log}", "w"),
                             start_new_session=True)
        self.procs.append(p)
        return p

    def nginx_conf(self, name, main, http):
        w = self.work
        path = f"{w}/{name}.conf"
        with open(path, "w") as f:
            # Workers as the current user (root's would be nobody's, who
            # cannot read the work directory).
            user = "user root root;\n" if os.geteuid() == 0 else ""
            f.write(f"{user}{main}\npid {w}/{name}.pid;\nerror_log {w}/{name}.err warn;\n"
                    f"http {{\n  client_body_temp_path {w}/tmp;\n  proxy_temp_path {w}/tmp;\n"
                    f"  access_log off;\n  keepalive_requests 100000000;\n{http}}}\n")
        return self.spawn([self.nginx, "-p", w, "-c", path, "-g", "daemon off;"], f"{name}.log")

    def upstream(self):
        with open(f"{self.work}/static/stream.sse", "w") as f:
            f.write(stream())
        self.ports = {"nonstream": free_port(), "stream": free_port()}
        self.nginx_conf(
            "upstream", "worker_processes 1;\nevents { worker_connections 4096; }",
            f"  server {{ listen 127.0.0.1:{self.ports['nonstream']}; location / {{ "
            f"default_type application/json; return 200 '{completion()}'; }} }}\n"
            f"  server {{ listen 127.0.0.1:{self.ports['stream']}; root {self.work}/static; location / {{ "
            f"types {{ }} default_type text/event-stream; try_files /stream.sse =404; "
            f"error_page 405 =200 $uri; }} }}\n")
        for p in self.ports.values():
            wait_accepting(p)

    def key(self):
        out = subprocess.run([f"{self.args.bin_dir}/chatgate-smol", "keys", "new", "--keys",
                              f"{self.work}/keys.toml", "--name", "bench", "--rpm", "1000000000",
                              "--tpm", "1000000000000"], capture_output=True, text=True, check=True)
        return out.stdout.split("\n")[0]

    def targets(self, workload):
        """(name, port, pids) of every target, started in front of WORKLOAD's upstream."""
        up = self.ports[workload]
        out = []
        for workers in (1, 2):
            port = free_port()
            master = self.nginx_conf(
                f"nginx-{port}",
                f"worker_processes {workers};\nworker_rlimit_nofile 65536;\nevents {{ worker_connections 4096; }}",
                f"  upstream up {{ server 127.0.0.1:{up}; keepalive 64; keepalive_requests 100000000; }}\n"
                f"  server {{ listen 127.0.0.1:{port} backlog=4096; location / {{ proxy_pass http://up; "
                f"proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_buffering off; "
                f"proxy_read_timeout 900s; }} }}\n")
            wait_accepting(port)
            deadline = time.time() + 10
            while len(children(master.pid)) < workers and time.time() < deadline:
                time.sleep(0.05)
            out.append((f"nginx {workers}{'t' if workers == 1 else 'w'}", port, children(master.pid)))
        for rt in self.args.only.split(","):
            for mode in ("1t", "2t", "2p"):
                port, pids = free_port(), []
                for i in range(2 if mode == "2p" else 1):
                    argv = [f"{self.args.bin_dir}/chatgate-{rt}", "serve", "--listen", f"127.0.0.1:{port}",
                            "--upstream", f"http://127.0.0.1:{up}/v1", "--keys", f"{self.work}/keys.toml",
                            "--ledger", f"{self.work}/ledger-{rt}-{mode}-{port}-{i}.jsonl",
                            "--log-level", "warn", "--worker-threads", "2" if mode == "2t" else "1"]
                    if mode == "2p":
                        argv += ["--reuse-port", "on"]
                    pids.append(self.spawn(argv, f"{rt}-{mode}-{port}-{i}.log").pid)
                    wait_accepting(port)
                out.append((f"{rt} {mode}", port, pids))
        return out

    def wrk(self, port, body, conns, secs, key):
        out = subprocess.run(
            ["wrk", "-t1", f"-c{conns}", f"-d{secs}s", "--latency", "-s", f"{self.work}/request.lua",
             f"http://127.0.0.1:{port}/v1/chat/completions"],
            env={**os.environ, "KEY": key, "BODY": body}, capture_output=True, text=True).stdout
        requests = int(re.search(r"(\d+) requests in", out).group(1))
        p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
        p99_ms = float(p99.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[p99.group(2)]
        failed = "Non-2xx" in out or "Socket errors" in out
        return requests, p99_ms, failed

    def stop(self, pids):
        for p in pids:
            try:
                os.kill(p, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def close(self):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            p.wait()


def children(pid):
    """The processes whose parent is PID (nginx's workers)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                pass
    return out


def cpu_seconds(pids):
    total = 0
    for p in pids:
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / HZ


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    ap.add_argument("--conns", default="8,64")
    ap.add_argument("--only", default="tokio,smol")
    ap.add_argument("--bin-dir", default=os.path.join(
        os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release"))
    args = ap.parse_args()
    for pkg, tool in (("nginx", "nginx"), ("wrk", "wrk")):
        if not shutil.which(tool) and not (tool == "nginx" and os.path.exists("/usr/sbin/nginx")):
            subprocess.run([os.path.join(ROOT, "scripts/install-package.sh"), pkg, tool], check=True)
    work = tempfile.mkdtemp(prefix="per-core-")
    b = Bench(args, work)
    results = {}
    try:
        b.upstream()
        key = b.key()
        with open(f"{work}/request.lua", "w") as f:
            f.write(LUA)
        for workload, stream_flag in (("nonstream", ""), ("stream", '"stream":true,')):
            body = f"{work}/{workload}.json"
            with open(body, "w") as f:
                f.write(REQUEST % stream_flag)
            targets = b.targets(workload)
            for r in range(args.rounds):
                for conns in (int(c) for c in args.conns.split(",")):
                    for name, port, pids in targets:
                        b.wrk(port, body, conns, 2, key)
                        before = cpu_seconds(pids)
                        n, p99, failed = b.wrk(port, body, conns, args.seconds, key)
                        per = (cpu_seconds(pids) - before) / max(n, 1) * 1e6
                        results.setdefault((workload, conns, name), []).append((per, p99, n / args.seconds, failed))
                        print(f"round {r + 1}: {workload} c={conns} {name}: {per:.1f} µs, p99 {p99:.2f} ms,"
                              f" {n / args.seconds:.0f}/s{' (FAILED REQUESTS)' if failed else ''}", flush=True)
            for _, _, pids in targets:
                b.stop(pids)
    finally:
        b.close()
    print(f"\nCPU per request (µs) in each round; × nginx 2w of the same round; p99 (ms); requests/s\n")
    print("| workload | conns | target | CPU per request | × nginx 2w | p99 | requests/s |")
    print("|---|---|---|---|---|---|---|")
    for (workload, conns, name), rows in sorted(results.items()):
        ref = results[(workload, conns, "nginx 2w")]
        fmt = lambda xs: ", ".join(xs)
        print(f"| {workload} | {conns} | {name} | {fmt(f'{x[0]:.1f}' for x in rows)} | "
              f"{fmt(f'{x[0] / y[0]:.2f}' for x, y in zip(rows, ref))} | {fmt(f'{x[1]:.2f}' for x in rows)} | "
              f"{fmt(f'{x[2]:.0f}' for x in rows)} |{' FAILED REQUESTS' if any(x[3] for x in rows) else ''}")
    print(f"\nwork directory (logs, ledgers): {work}")


if __name__ == "__main__":
    main()
