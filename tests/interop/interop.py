#!/usr/bin/env python3
"""chatgate in front of a real model server (llama-cpp-python's
llama_cpp.server), driven by the official OpenAI Python SDK.

scripts/interop.sh installs the model server, builds the binaries, starts
the server and runs this once per binary; see its header. Run by hand:

    python tests/interop/interop.py --bin target/release/chatgate-smol \
        --upstream http://127.0.0.1:PORT/v1 --llama-pid PID --llama-log LOG \
        --llama-python VENV/bin/python --model GGUF --work DIR \
        [--llama-server PATH]

The suite starts its own gateways (keys file, ledger and log in --work), in
front of the server at --upstream, and for case 5 a second model server of
its own that it kills. It never sends two requests at once to the shared
server: llama-cpp-python serves one request at a time and, by default,
cuts a running stream (`data: [DONE]`, no finish_reason) when another one
arrives. Every request is made with max_retries=0, so each one is exactly
one gateway request and one ledger line.

Prints `PASS name (figures)` or `FAIL name: why` per case, then
`N passed, M failed`; exits 1 when a case failed.
"""

import argparse
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.request
from decimal import Decimal

# Loopback only: no proxy from the environment may see a request.
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

import anthropic  # noqa: E402
import openai  # noqa: E402
from openai import OpenAI  # noqa: E402

MODEL = "reasoning-model-k3"
PROMPT_NANO = 2850  # nano-USD per prompt token (2.85 USD per million)
COMPLETION_NANO = 14250  # nano-USD per completion token (14.25 USD per million)
PROMPT_USD = Decimal("0.00000285")
COMPLETION_USD = Decimal("0.00001425")
# SmolLM2's end-of-sequence tokens (<|endoftext|>, <|im_end|>): banned with
# logit_bias where an answer must not end by itself.
NO_EOS = {"0": -100, "2": -100}
BUDGET_USD = "0.002"
BUDGET_NANO = 2_000_000


class Failure(Exception):
    pass


def check(cond, why):
    if not cond:
        raise Failure(why)


def short(text, n=60):
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def api_error(e):
    """An SDK error in one line: status, code and message."""
    if isinstance(e, openai.APIStatusError):
        rid = e.response.headers.get("x-request-id")
        return f"HTTP {e.status_code} {getattr(e, 'code', None)}: {short(e.message, 200)} (request {rid})"
    return f"{type(e).__name__}: {short(e, 200)}"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, headers=None, timeout=30):
    """(status, headers, body bytes) of one plain HTTP request."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATGATE_")}
    env.update(extra)
    return env


class Gateway:
    """One `serve` process with its own keys file, ledger and log."""

    def __init__(self, binary, upstream, work, tag, *extra_args):
        self.binary, self.upstream, self.extra = binary, upstream, extra_args
        self.keys = os.path.join(work, f"{tag}-keys.toml")
        self.ledger = os.path.join(work, f"{tag}-ledger.jsonl")
        self.log = os.path.join(work, f"{tag}-gateway.log")
        self.env = clean_env(CHATGATE_UPSTREAM_API_KEY="interop-provider-key")
        self.proc = None
        self.base_url = self.admin_url = None

    def mint(self, name, *args):
        out = subprocess.run(
            [self.binary, "keys", "new", "--keys", self.keys, "--name", name, *args],
            capture_output=True, text=True, timeout=30, env=self.env,
        )
        if out.returncode != 0 or not out.stdout.strip():
            raise RuntimeError(f"keys new {name}: status {out.returncode}: {out.stderr.strip()}")
        return out.stdout.splitlines()[0].strip()

    def start(self, timeout=30):
        log = open(self.log, "w")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
             *(["--upstream", self.upstream] if self.upstream else []),
             "--keys", self.keys, "--ledger", self.ledger, *self.extra],
            stdout=subprocess.PIPE, stderr=log, text=True, env=self.env,
        )
        log.close()
        lines = queue.Queue()

        def read():
            for line in self.proc.stdout:
                lines.put(line)

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while self.base_url is None or self.admin_url is None:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.binary} serve exited with {self.proc.returncode}: "
                                       f"{short(self.log_tail(), 300)}")
                if time.monotonic() > deadline:
                    self.kill()
                    raise RuntimeError(f"{self.binary} serve printed no address in {timeout}s (log {self.log})")
                continue
            if m := re.match(r"chatgate listening on (http://\S+/v1)$", line.strip()):
                self.base_url = m.group(1)
            elif m := re.match(r"chatgate admin listening on (http://\S+)$", line.strip()):
                self.admin_url = m.group(1)

    def client(self, key, timeout=120.0):
        return OpenAI(base_url=self.base_url, api_key=key, max_retries=0, timeout=timeout)

    def lines(self):
        """Every complete ledger line, numbers with decimals as Decimal."""
        try:
            with open(self.ledger) as f:
                text = f.read()
        except FileNotFoundError:
            return []
        return [json.loads(l, parse_float=Decimal) for l in text.split("\n")[:-1] if l.strip()]

    def line_for(self, request_id, wait=15.0):
        deadline = time.monotonic() + wait
        while True:
            found = [l for l in self.lines() if l.get("request_id") == request_id]
            if found:
                check(len(found) == 1, f"{len(found)} ledger lines for {request_id}")
                return found[0]
            if time.monotonic() > deadline:
                raise Failure(f"no ledger line for {request_id} after {wait:.0f}s")
            time.sleep(0.1)

    def lines_for_key(self, name):
        return [l for l in self.lines() if l.get("key") == name]

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def stop(self, timeout=40):
        """SIGTERM, as an operator would; the exit status (None: had to kill)."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def log_tail(self, n=5):
        try:
            with open(self.log, errors="replace") as f:
                return " | ".join(l.strip() for l in f.readlines()[-n:])
        except FileNotFoundError:
            return ""

    def panics(self):
        try:
            with open(self.log, errors="replace") as f:
                return [l.strip() for l in f if "panicked" in l]
        except FileNotFoundError:
            return []


class ModelServer:
    """A model server process the suite started: its `proc` and `url`."""

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class LlamaServer(ModelServer):
    """A llama_cpp.server of the suite's own (case 5)."""

    def __init__(self, python, model, threads, log, *extra):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                [python, "-m", "llama_cpp.server", "--model", model, "--model_alias", MODEL,
                 "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "2048",
                 "--n_threads", str(threads), *extra],
                stdout=out, stderr=subprocess.STDOUT,
            )
        wait_for_models(self, "the second llama server", log)


def wait_for_models(server, what, log):
    """Until `server` (its `url` and `proc`) answers GET /models; killed,
    and an error naming `what` and its `log`, after 90 s or if it exits."""
    deadline = time.monotonic() + 90
    while True:
        try:
            if http("GET", f"{server.url}/models", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        if server.proc.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"{what} did not start (log {log})")
        time.sleep(0.5)


class LlamaCppServer(ModelServer):
    """llama.cpp's own `llama-server` (case 9), on the same GGUF file."""

    def __init__(self, binary, model, threads, log):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                [binary, "--model", model, "--alias", MODEL, "--host", "127.0.0.1",
                 "--port", str(self.port), "--ctx-size", "2048", "--threads", str(threads),
                 "--parallel", "1"],
                stdout=out, stderr=subprocess.STDOUT,
            )
        wait_for_models(self, "llama-server", log)


class CuttingProxy:
    """A TCP relay to 127.0.0.1:`port` that resets the connection once the
    answer has sent `events` SSE data events: a provider whose stream
    breaks mid-answer."""

    def __init__(self, port, events):
        self.port, self.events = port, events
        self.cuts = 0
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), daemon=True).start()

    def _relay(self, client):
        up = socket.create_connection(("127.0.0.1", self.port))

        def to_server():
            try:
                while data := client.recv(65536):
                    up.sendall(data)
            except OSError:
                pass

        threading.Thread(target=to_server, daemon=True).start()
        seen = 0
        try:
            while data := up.recv(4096):
                seen += data.count(b"data: {")
                if seen >= self.events:
                    # Up to the last whole event, then a reset.
                    end = data.rfind(b"\n\n")
                    client.sendall(data[:end + 2] if end >= 0 else b"")
                    self.cuts += 1
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    break
                client.sendall(data)
        except OSError:
            pass
        # Shut down before closing: the other direction's thread is
        # blocked reading these sockets, and a socket is not released
        # (no reset sent) while a read holds it.
        for s in (client, up):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self):
        self.sock.close()


def cpu_seconds(pid):
    """User + system CPU time of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def check_metered(line, prompt, completion):
    """The ledger line's tokens are these, and its cost is exactly their price."""
    check(
        (line["prompt_tokens"], line["completion_tokens"]) == (prompt, completion),
        f"ledger tokens {line['prompt_tokens']}+{line['completion_tokens']}, response usage {prompt}+{completion}",
    )
    nano = prompt * PROMPT_NANO + completion * COMPLETION_NANO
    check(line["cost_nano_usd"] == nano, f"cost_nano_usd {line['cost_nano_usd']}, expected {nano}")
    usd = prompt * PROMPT_USD + completion * COMPLETION_USD
    check(Decimal(line["cost_usd"]) == usd, f"cost_usd {line['cost_usd']}, expected {usd}")
    return usd


class Suite:
    def __init__(self, args):
        self.args = args
        self.name = os.path.basename(args.bin)
        self.passed = self.failed = 0

    def case(self, name, fn):
        label = f"{self.name} {name}"
        try:
            figures = fn()
        except Failure as e:
            self.failed += 1
            print(f"FAIL {label}: {e}", flush=True)
        except openai.APIError as e:
            self.failed += 1
            print(f"FAIL {label}: {api_error(e)}", flush=True)
        except anthropic.APIError as e:
            self.failed += 1
            print(f"FAIL {label}: {type(e).__name__}: {short(e, 300)}", flush=True)
        except Exception as e:  # noqa: BLE001 - a broken case is a failed case
            self.failed += 1
            print(f"FAIL {label}: {type(e).__name__}: {short(e, 300)}", flush=True)
            traceback.print_exc(file=sys.stderr)
        else:
            self.passed += 1
            print(f"PASS {label} ({figures})", flush=True)

    def run(self):
        a = self.args
        os.makedirs(a.work, exist_ok=True)
        self.gw = Gateway(a.bin, a.upstream, a.work, "main", "--apis", "chat,responses,messages")
        try:
            self.key = self.gw.mint("interop", "--rpm", "1000")
            self.budget_key = self.gw.mint(
                "budget", "--budget-usd", BUDGET_USD, "--budget-period", "day", "--rpm", "1000")
            self.gw.start()
        except Exception as e:  # noqa: BLE001
            print(f"FAIL {self.name} start: {e}", flush=True)
            print("0 passed, 1 failed", flush=True)
            return False
        print(f"{self.name}: gateway at {self.gw.base_url} (admin {self.gw.admin_url}), "
              f"upstream {a.upstream}, ledger {self.gw.ledger}", flush=True)
        self.c = self.gw.client(self.key)
        try:
            self.case("0-request-id", self.request_id)
            self.case("1-plain-chat", self.plain_chat)
            self.case("2-streamed-chat", self.streamed_chat)
            self.case("3-tools", self.tools)
            self.case("4-disconnect-stops-generation", self.disconnect)
            self.case("5-server-killed-under-20-streams", self.server_killed)
            self.case("6-budget-holds", self.budget)
            self.case("7-responses-api", self.responses_api)
            self.case("8-messages-api", self.messages_api)
            self.case("9-llama-server-continues-a-cut-stream", self.continued_stream)
        finally:
            status = self.gw.stop()
            print(f"{self.name}: gateway stopped with SIGTERM, exit status {status}", flush=True)
            for p in self.gw.panics():
                print(f"{self.name}: WARNING gateway log: {p}", flush=True)
        print(f"{self.passed} passed, {self.failed} failed", flush=True)
        return self.failed == 0

    # --- 0 ---------------------------------------------------------------
    def request_id(self):
        """The X-Request-Id the gateway sends upstream is accepted.

        llama-cpp-python (starlette-context's RequestIdPlugin) answers 400
        with an empty body to an X-Request-Id that is not a UUID."""
        direct = f"{self.args.upstream}/chat/completions"
        body = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}
        try:
            raw = self.c.chat.completions.with_raw_response.create(**body)
        except openai.APIStatusError as e:
            rid = e.response.headers.get("x-request-id", "")
            try:
                line = self.gw.line_for(rid, wait=5) if rid else {}
            except Failure:
                line = {}
            sent = line.get("provider_request_id") or rid
            st, _, b = http("POST", direct, body, {"X-Request-Id": sent})
            raise Failure(
                f"gateway answered {api_error(e)}; ledger upstream_status {line.get('upstream_status')}, "
                f"error {line.get('error')}; the model server answers X-Request-Id {sent!r} directly "
                f"with {st} {short(b.decode(errors='replace'), 80)!r}")
        rid = raw.headers.get("x-request-id", "")
        raw.parse()
        check(raw.status_code == 200, f"status {raw.status_code}")
        line = self.gw.line_for(rid)
        check(line["upstream_status"] == 200, f"ledger upstream_status {line['upstream_status']}")
        sent = line.get("provider_request_id")
        figures = f"client id {rid}"
        if sent:
            st, headers, _ = http("POST", direct, body, {"X-Request-Id": sent})
            check(st == 200, f"the model server answers the ledger's provider_request_id {sent!r} with {st}")
            figures += f", sent upstream as {sent} (the model server echoes {headers.get('x-request-id')})"
        st, _, _ = http("POST", direct, body, {"X-Request-Id": rid})
        return figures + f"; the client id itself would get {st} from the model server"

    # --- 1 ---------------------------------------------------------------
    def plain_chat(self):
        raw = self.c.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "Say hi"}], max_tokens=32)
        check(raw.status_code == 200, f"status {raw.status_code}")
        rid = raw.headers.get("x-request-id")
        comp = raw.parse()
        text = comp.choices[0].message.content or ""
        check(text.strip(), "empty content")
        u = comp.usage
        check(u is not None and u.prompt_tokens > 0 and u.completion_tokens > 0, f"usage {u}")
        line = self.gw.line_for(rid)
        check(line["status"] == 200 and line["stream"] is False, f"ledger status {line['status']} stream {line['stream']}")
        check(line["complete"] is True, f"ledger complete {line['complete']}")
        check(line["finish_reason"] == comp.choices[0].finish_reason,
              f"ledger finish_reason {line['finish_reason']}, response {comp.choices[0].finish_reason}")
        usd = check_metered(line, u.prompt_tokens, u.completion_tokens)
        return (f"prompt {u.prompt_tokens} + completion {u.completion_tokens} tokens = {usd} USD, "
                f"finish {line['finish_reason']}, {short(text, 40)!r}")

    # --- 2 ---------------------------------------------------------------
    def streamed_chat(self):
        stream = self.c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Say hi in five words"}],
            max_tokens=32, stream=True)
        rid = stream.response.headers.get("x-request-id")
        chunks, text, finish, usage = 0, "", None, None
        for ch in stream:
            chunks += 1
            if ch.choices:
                text += ch.choices[0].delta.content or ""
                finish = ch.choices[0].finish_reason or finish
            if ch.usage:
                usage = ch.usage
        check(chunks > 0, "no chunk")
        check(text.strip(), f"{chunks} chunks, no text")
        end = (f"finish_reason {finish}, usage chunk " +
               (f"{usage.prompt_tokens}+{usage.completion_tokens}" if usage else "none"))
        line = self.gw.line_for(rid)
        check(line["status"] == 200 and line["stream"] is True, f"ledger status {line['status']} stream {line['stream']}")
        check(line["finish_reason"] == finish, f"ledger finish_reason {line['finish_reason']}, stream {finish}")
        check(line.get("usage_missing") is True,
              f"ledger line has usage_missing={line.get('usage_missing')!r} (the model server sends no usage); "
              f"ledger tokens {line['prompt_tokens']}+{line['completion_tokens']}, complete {line['complete']}; "
              f"the client got: {end}")
        return (f"{chunks} chunks, {short(text, 40)!r}; client got at the end: {end}; ledger usage_missing, "
                f"tokens {line['prompt_tokens']}+{line['completion_tokens']}, complete {line['complete']}")

    # --- 3 ---------------------------------------------------------------
    def tools(self):
        tool = {"type": "function", "function": {
            "name": "get_weather", "description": "Get the current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
        raw = self.c.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=[tool], tool_choice={"type": "function", "function": {"name": "get_weather"}},
            max_tokens=64)
        check(raw.status_code == 200, f"status {raw.status_code}")
        rid = raw.headers.get("x-request-id")
        comp = raw.parse()
        msg = comp.choices[0].message
        if msg.tool_calls:
            call = msg.tool_calls[0].function
            check(call.name == "get_weather", f"tool call to {call.name}")
            json.loads(call.arguments)
            got = f"tool call {call.name}({short(call.arguments, 50)})"
        else:
            got = f"plain answer {short(msg.content, 40)!r} (no tool call)"
        u = comp.usage
        check(u is not None, "no usage")
        line = self.gw.line_for(rid)
        check(line["status"] == 200, f"ledger status {line['status']}")
        usd = check_metered(line, u.prompt_tokens, u.completion_tokens)
        return f"{got}, finish {comp.choices[0].finish_reason}, metered {u.prompt_tokens}+{u.completion_tokens} = {usd} USD"

    # --- 4 ---------------------------------------------------------------
    def disconnect(self):
        pid, log = self.args.llama_pid, self.args.llama_log
        stream = self.c.chat.completions.create(
            model=MODEL, max_tokens=2000, stream=True, logit_bias=NO_EOS,
            messages=[{"role": "user", "content": "Write a very long story about a dragon who learns to bake bread."}])
        rid = stream.response.headers.get("x-request-id")
        # Read a few chunks, for at least 1.5 s: how busy the server is while generating.
        chunks, first, cpu0 = 0, None, None
        for ch in stream:
            if ch.choices and ch.choices[0].delta.content:
                chunks += 1
                if first is None:
                    first, cpu0 = time.monotonic(), cpu_seconds(pid)
                elif chunks >= 5 and time.monotonic() - first >= 1.5:
                    break
        check(first is not None, "the stream ended before any text")
        busy = (cpu_seconds(pid) - cpu0) / (time.monotonic() - first)
        log_at = os.path.getsize(log)
        closed = time.monotonic()
        stream.close()
        # The gateway's ledger line says the client left.
        line = self.gw.line_for(rid, wait=20)
        line_after = time.monotonic() - closed
        check(line["client_disconnected"] is True, f"ledger client_disconnected {line['client_disconnected']}")
        check(line["complete"] is False, f"ledger complete {line['complete']}")
        # The model server stopped generating: it logs the disconnect, and its
        # CPU use falls from `busy` to next to nothing.
        idle_after, said = None, None
        prev_t, prev_cpu = time.monotonic(), cpu_seconds(pid)
        while time.monotonic() - closed < 20 and (idle_after is None or said is None):
            time.sleep(0.5)
            now, cpu = time.monotonic(), cpu_seconds(pid)
            if idle_after is None and now - prev_t >= 1.0:
                if (cpu - prev_cpu) / (now - prev_t) < max(0.05, min(0.15, busy / 4)):
                    idle_after = now - closed
                prev_t, prev_cpu = now, cpu
            if said is None:
                with open(log, errors="replace") as f:
                    f.seek(log_at)
                    if "Disconnected from client" in f.read():
                        said = time.monotonic() - closed
        check(said is not None, "the model server did not log a client disconnect within 20s of the close")
        check(idle_after is not None,
              f"the model server was still using CPU 20s after the close (busy {busy:.2f} cores while streaming)")
        # And answers the next request promptly.
        t = time.monotonic()
        self.c.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Say hi"}], max_tokens=8)
        nxt = time.monotonic() - t
        return (f"closed after {chunks} chunks; ledger line {line_after:.1f}s later: client_disconnected, status "
                f"{line['status']}, {line['completion_tokens']} completion tokens metered; model server logged the "
                f"disconnect after {said:.1f}s, CPU {busy:.2f} cores -> idle within {idle_after:.1f}s; "
                f"next request served in {nxt:.1f}s")

    # --- 5 ---------------------------------------------------------------
    def server_killed(self, n=20):
        a = self.args
        # interrupt_requests off: the server queues the streams and serves
        # them one after the other (its default cuts a running stream as
        # soon as another request arrives).
        llama = LlamaServer(a.llama_python, a.model, a.threads, os.path.join(a.work, "llama-crash.log"),
                            "--interrupt_requests", "False")
        gw = Gateway(a.bin, llama.url, a.work, "crash")
        try:
            key = gw.mint("crash", "--rpm", "1000")
            gw.start()
            return self._server_killed(llama, gw, key, n)
        finally:
            llama.kill()
            gw.stop()

    def _server_killed(self, llama, gw, key, n):
        progress = [0] * n
        results = [None] * n

        def worker(i):
            rid = None
            try:
                c = gw.client(key, timeout=90)
                s = c.chat.completions.create(
                    model=MODEL, max_tokens=100, stream=True, logit_bias=NO_EOS,
                    messages=[{"role": "user", "content": f"Tell me story number {i} about a cat."}])
                rid = s.response.headers.get("x-request-id")
                finish = None
                for ch in s:
                    progress[i] += 1
                    if ch.choices:
                        finish = ch.choices[0].finish_reason or finish
                results[i] = ("ended", rid, finish)
            except openai.APIStatusError as e:
                results[i] = ("status", e.response.headers.get("x-request-id"), e.status_code)
            except openai.APIError as e:  # APIConnectionError, APITimeoutError, an error event
                results[i] = ("sdk-error", rid, type(e).__name__)
            except Exception as e:  # noqa: BLE001
                results[i] = ("other", rid, f"{type(e).__name__}: {short(e, 80)}")

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        # Kill when one stream has ended and another is under way (or at
        # least one is under way after 30 s).
        start = time.monotonic()
        while True:
            done = sum(1 for r in results if r is not None)
            running = [i for i in range(n) if progress[i] >= 5 and results[i] is None]
            if (done >= 1 and running) or done == n or (running and time.monotonic() - start > 30):
                break
            if time.monotonic() - start > 120:
                break
            time.sleep(0.05)
        before = {"done": done, "under way": len(running)}
        started = sum(1 for p in progress if p > 0)
        llama.kill()
        killed = time.monotonic()
        for t in threads:
            t.join(timeout=max(0.1, 60 - (time.monotonic() - killed)))
        hung = [i for i, t in enumerate(threads) if t.is_alive()]
        last = time.monotonic() - killed
        kinds = {}
        for r in results:
            if r is None:
                k = "hung"
            elif r[0] == "ended":
                k = f"ended ({'finish ' + r[2] if r[2] else 'cut'})"
            elif r[0] == "status":
                k = f"HTTP {r[2]}"
            else:
                k = str(r[2])
            kinds[k] = kinds.get(k, 0) + 1
        clients = ", ".join(f"{v}x {k}" for k, v in sorted(kinds.items()))
        check(not hung, f"{len(hung)} clients still waiting 60s after the kill (requests {hung})")
        check(started > 0, f"no stream had started when the server was killed ({before}; clients: {clients})")
        other = [r for r in results if r[0] == "other"]
        check(not other, f"{len(other)} clients got an exception that is not the SDK's: {other[:3]}")
        bad = [r for r in results if r[0] == "status" and r[2] not in (502, 504)]
        check(not bad, f"statuses other than 502/504 for requests that got no byte: {bad}")
        # Exactly one ledger line per request.
        deadline = time.monotonic() + 20
        while len(gw.lines_for_key("crash")) < n and time.monotonic() < deadline:
            time.sleep(0.2)
        lines = gw.lines_for_key("crash")
        check(len(lines) == n, f"{len(lines)} ledger lines for {n} requests")
        ids = [l["request_id"] for l in lines]
        for r in results:
            if r[1]:
                check(ids.count(r[1]) == 1, f"request {r[1]} has {ids.count(r[1])} ledger lines")
        by_id = {l["request_id"]: l for l in lines}
        for r in results:
            if r[0] == "ended" and r[2] is None and r[1] in by_id:
                check(by_id[r[1]]["complete"] is False, f"stream {r[1]} cut without finish_reason is metered complete")
        # The gateway lives on.
        check(gw.alive(), f"the gateway exited with {gw.proc.returncode}")
        models = gw.client(key, timeout=10).models.list()
        check(any(m.id == MODEL for m in models.data), f"GET /v1/models lists {[m.id for m in models.data]}")
        errors = {}
        for l in lines:
            errors[str(l.get("error"))] = errors.get(str(l.get("error")), 0) + 1
        return (f"killed with {before['done']} done, {before['under way']} under way, {started} started; "
                f"clients: {clients}; all back {last:.1f}s "
                f"after the kill; {len(lines)} ledger lines, errors "
                f"{', '.join(f'{v}x {k}' for k, v in sorted(errors.items()))}; gateway alive, GET /v1/models 200")

    # --- 6 ---------------------------------------------------------------
    def budget(self):
        c = self.gw.client(self.budget_key)
        served, refusal = 0, None
        for _ in range(60):
            try:
                c.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "Say hi"}], max_tokens=16)
                served += 1
            except openai.RateLimitError as e:
                if e.code == "insufficient_quota":
                    refusal = e
                    break
                time.sleep(float(e.response.headers.get("retry-after", "1")))
        check(refusal is not None, f"no 429 insufficient_quota after {served} requests")
        lines = self.gw.lines_for_key("budget")
        spent = sum(l["cost_nano_usd"] for l in lines)
        # What the budget counts: a line's charged_nano_usd, when it has
        # one, is what its key was charged (usage missing: the worst case).
        charged = sum(max(l["cost_nano_usd"], l.get("charged_nano_usd", 0)) for l in lines)
        over = sum(l.get("budget_overshoot_nano_usd", 0) for l in lines)
        prompts = sorted({l["prompt_tokens"] for l in lines if l["status"] == 200})
        figures = (f"{served} requests served, then 429 insufficient_quota; spent {Decimal(spent) / 10**9} USD "
                   f"of {BUDGET_USD}, charged {Decimal(charged) / 10**9} ({len(lines)} ledger lines, provider "
                   f"prompt tokens {prompts}, overshoot {Decimal(over) / 10**9} USD)")
        check(served > 0, "no request was served: " + figures)
        check(spent <= BUDGET_NANO and charged <= BUDGET_NANO, "over budget: " + figures)
        return figures + f"; refusal: {short(refusal.message, 160)!r}"

    # --- 7 ---------------------------------------------------------------
    def responses_api(self):
        """The Responses API (what Codex speaks) in front of the real server:
        a plain answer with the server's usage, and a stream whose deltas add
        up to the final text and end with response.completed or
        response.incomplete, each metered with api = responses."""
        raw = self.c.responses.with_raw_response.create(model=MODEL, input="Say hi", max_output_tokens=32)
        check(raw.status_code == 200, f"status {raw.status_code}")
        rid = raw.headers.get("x-request-id")
        r = raw.parse()
        check(r.status in ("completed", "incomplete"), f"status {r.status}")
        check(r.output_text.strip(), "empty output_text")
        line = self.gw.line_for(rid)
        check(line.get("api") == "responses", f"ledger api {line.get('api')!r}")
        check(r.usage is not None and r.usage.input_tokens == line["prompt_tokens"]
              and r.usage.output_tokens == line["completion_tokens"],
              f"usage {r.usage} against the ledger's {line['prompt_tokens']}+{line['completion_tokens']}")
        text, events = "", 0
        with self.c.responses.stream(model=MODEL, input="Say hi in five words", max_output_tokens=32) as stream:
            for ev in stream:
                events += 1
                if ev.type == "response.output_text.delta":
                    text += ev.delta
            final = stream.get_final_response()
        check(final.status in ("completed", "incomplete"), f"stream status {final.status}")
        check(text == final.output_text and text.strip(), f"deltas {short(text)!r}, final {short(final.output_text)!r}")
        lines = [l for l in self.gw.lines_for_key("interop") if l.get("api") == "responses" and l["stream"]]
        check(lines, "no ledger line for the streamed response")
        return (f"plain {r.status} {short(r.output_text, 30)!r} ({r.usage.input_tokens}+{r.usage.output_tokens} tokens); "
                f"stream {final.status}, {events} events, {short(text, 30)!r}")

    # --- 8 ---------------------------------------------------------------
    def messages_api(self):
        """The Messages API (what Claude Code speaks) in front of the real
        server, through the Anthropic Python SDK: a plain answer with the
        server's usage (the key as x-api-key), and a stream with thinking
        asked for whose deltas add up to the final message and end with
        message_stop, each metered with api = messages."""
        c = anthropic.Anthropic(base_url=self.gw.base_url.removesuffix("/v1"), api_key=self.key, max_retries=0)
        raw = c.messages.with_raw_response.create(
            model=MODEL, max_tokens=32, messages=[{"role": "user", "content": "Say hi"}])
        check(raw.http_response.status_code == 200, f"status {raw.http_response.status_code}")
        rid = raw.http_response.headers.get("x-request-id")
        m = raw.parse()
        check(m.stop_reason in ("end_turn", "max_tokens"), f"stop_reason {m.stop_reason}")
        text = "".join(b.text for b in m.content if b.type == "text")
        check(text.strip(), f"no text in {m.content}")
        line = self.gw.line_for(rid)
        check(line.get("api") == "messages", f"ledger api {line.get('api')!r}")
        check(m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) == line["prompt_tokens"]
              and m.usage.output_tokens == line["completion_tokens"],
              f"usage {m.usage} against the ledger's {line['prompt_tokens']}+{line['completion_tokens']}")
        streamed, events = "", 0
        with c.messages.stream(model=MODEL, max_tokens=32, thinking={"type": "adaptive"},
                               messages=[{"role": "user", "content": "Say hi in five words"}]) as stream:
            for ev in stream:
                events += 1
                if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                    streamed += ev.delta.text
            final = stream.get_final_message()
        final_text = "".join(b.text for b in final.content if b.type == "text")
        check(final.stop_reason in ("end_turn", "max_tokens"), f"stream stop_reason {final.stop_reason}")
        check(streamed == final_text and streamed.strip(), f"deltas {short(streamed)!r}, final {short(final_text)!r}")
        lines = [l for l in self.gw.lines_for_key("interop") if l.get("api") == "messages" and l["stream"]]
        check(lines, "no ledger line for the streamed message")
        # As Claude Code sends its first turn: system blocks, the user's
        # blocks, then a system-role message at the end of the list.
        cc = c.messages.create(
            model=MODEL, max_tokens=32,
            system=[{"type": "text", "text": "You are a helpful assistant.", "cache_control": {"type": "ephemeral"}}],
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "Say hi", "cache_control": {"type": "ephemeral"}}]},
                {"role": "system", "content": "Answer in English."},
            ])
        cc_text = "".join(b.text for b in cc.content if b.type == "text")
        check(cc.stop_reason in ("end_turn", "max_tokens") and cc_text.strip(),
              f"with a system-role message: {cc.stop_reason} {short(cc_text)!r}")
        return (f"plain {m.stop_reason} {short(text, 30)!r} ({m.usage.input_tokens}+{m.usage.output_tokens} tokens); "
                f"stream {final.stop_reason}, {events} events, {short(streamed, 30)!r}; "
                f"a system-role message last: {short(cc_text, 30)!r}")


    # --- 9 ---------------------------------------------------------------
    def continued_stream(self):
        """A stream cut mid-answer is finished by llama.cpp's llama-server.

        The model `smol` is served through a relay that resets its stream
        after a few events; its fallback `smol-direct` is the same
        llama-server, which continues a final assistant message (its
        default `--prefill-assistant`: `continuation = "final_assistant"`).
        Greedy decoding makes the answer deterministic, so the client's
        text must equal the uncut answer's, in one stream."""
        a = self.args
        if not a.llama_server:
            raise Failure("no llama-server binary (--llama-server; scripts/interop.sh installs it)")
        llama = LlamaCppServer(a.llama_server, a.model, a.threads,
                               os.path.join(a.work, "llama-server.log"))
        proxy = CuttingProxy(llama.port, events=12)
        config = os.path.join(a.work, "continue.toml")
        with open(config, "w") as f:
            f.write(f"""
[[upstream]]
name = "cutting"
url = "{proxy.url}"

[[upstream]]
name = "llama-server"
url = "{llama.url}"
continuation = "final_assistant"

[[model]]
id = "smol"
upstream_id = "{MODEL}"
endpoints = ["cutting"]
fallback = ["smol-direct"]

[[model]]
id = "smol-direct"
upstream_id = "{MODEL}"
endpoints = ["llama-server"]
""")
        gw = Gateway(a.bin, None, a.work, "continue", "--config", config, "--stream-error-event")
        try:
            key = gw.mint("continue", "--rpm", "1000")
            gw.start()
            c = gw.client(key)
            ask = dict(messages=[{"role": "user", "content": "Count from 1 to 30, separated by commas."}],
                       max_tokens=200, temperature=0, seed=7, stream=True)

            def read(model):
                roles, ids, text, finish = [], set(), "", None
                with c.chat.completions.with_streaming_response.create(model=model, **ask) as r:
                    rid = r.headers.get("x-request-id")
                    for chunk in r.parse():
                        ids.add(chunk.id)
                        for ch in chunk.choices:
                            if ch.delta.role:
                                roles.append(ch.delta.role)
                            text += ch.delta.content or ""
                            finish = ch.finish_reason or finish
                return rid, roles, ids, text, finish

            _, _, _, whole, whole_finish = read("smol-direct")
            check(whole_finish == "stop", f"the uncut answer ended {whole_finish}: {short(whole)!r}")
            rid, roles, ids, text, finish = read("smol")
            check(proxy.cuts >= 1, "the relay did not cut the stream")
            check(roles == ["assistant"] and len(ids) == 1, f"roles {roles}, ids {ids}")
            line = gw.line_for(rid)
            check(line.get("continued") == 1 and line["complete"] and line["attempts"] == 2,
                  f"ledger continued {line.get('continued')}, complete {line['complete']}, "
                  f"attempts {line['attempts']}, error {line.get('error')}")
            check(finish == "stop", f"finish {finish}")
            check(text == whole, f"continued {short(text, 120)!r} != uncut {short(whole, 120)!r}")
            return (f"cut after 12 events, continued by llama-server: {len(text)} characters equal to "
                    f"the uncut answer, one role, one id; ledger {line['prompt_tokens']}+"
                    f"{line['completion_tokens']} tokens over 2 attempts")
        finally:
            gw.stop()
            proxy.close()
            llama.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="the chatgate binary")
    p.add_argument("--upstream", required=True, help="the model server's base URL (…/v1)")
    p.add_argument("--llama-pid", type=int, required=True, help="its process id (case 4 reads its CPU time)")
    p.add_argument("--llama-log", required=True, help="its log (case 4 reads its disconnect line)")
    p.add_argument("--llama-python", required=True, help="the interpreter with llama_cpp (case 5)")
    p.add_argument("--model", required=True, help="the GGUF file (case 5)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="--n_threads of case 5's server")
    p.add_argument("--work", required=True, help="directory for keys, ledgers and logs")
    p.add_argument("--llama-server", help="llama.cpp's llama-server binary (case 9)")
    ok = Suite(p.parse_args()).run()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
