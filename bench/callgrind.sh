#!/usr/bin/env bash
# User-space instructions per request, counted by valgrind's callgrind: exact
# counts that hold on a shared, noisy machine where CPU time does not (see
# BENCHMARKS.md, "What each change bought" and "Reproducing a profile").
#
#   bench/callgrind.sh                        # both binaries, both workloads
#   bench/callgrind.sh --requests 4000 --only tokio --workloads nonstream
#   bench/callgrind.sh --no-build --out-dir /tmp/cg   # keep the profiles there
#
# What it does:
#   1. builds the release binaries (`cargo build --release --bins`: fat LTO,
#      one codegen unit), in $CARGO_TARGET_DIR if set;
#   2. starts `chatgate-smol sim` as the upstream at full speed (zero
#      time to first token, zero time per token) and mints a key with huge
#      rpm/tpm limits, as bench/src/main.rs does (every process listens on
#      port 0, a free port the kernel picks, and prints it);
#   3. for each binary (chatgate-smol, chatgate-tokio) and each workload —
#      the benchmark's own request bodies, copied from bench/src/main.rs:
#      non-streamed (a 272-byte body; a 30-token, ~700-byte answer) and
#      streamed (100 events, 22 KB) — runs `serve` under `valgrind --tool=callgrind` twice, once
#      sent W requests (the warm-up) and once W + N, each time by a small
#      deterministic driver (python3, raw HTTP/1.1 keep-alive, C
#      connections at once like wrk's closed loop, exactly W or W + N
#      requests in all, every answer checked: 200, complete body, and for
#      streams the final `data: [DONE]`), then stops the gateway with SIGINT
#      so that callgrind writes its profile, and checks that the ledger has
#      one line per request;
#   4. prints instructions per request = (Ir(W + N) - Ir(W)) / N: start-up,
#      the warm-up (first connections to the upstream, allocator growth,
#      lazy initialisation) and the drain at shutdown are the same in both
#      runs and cancel. The naive Ir(W + N) / (W + N) is printed too.
#
# Options:
#   --requests N      measured requests per workload        [default: 2000]
#   --warmup W        requests in the shorter run           [default: 200]
#   --conns C         client connections at once            [default: 8, as wrk -c8]
#   --only LIST       binaries: smol,tokio                  [default: both]
#   --workloads LIST  nonstream,stream,responses,messages,gemini,toolloop
#                                                           [default: nonstream,stream]
#                     (responses: the stream workload through POST /v1/responses;
#                     messages: through POST /v1/messages, the key as x-api-key;
#                     gemini: through :streamGenerateContent?alt=sse, the key
#                     as x-goog-api-key;
#                     toolloop: a tool loop's second turn, streamed: the
#                     assistant's call sent back without its reasoning and
#                     the tool's result; each run first serves the first
#                     turn once, so that with --serve-args
#                     "--reasoning-replay tool_calls" every measured request
#                     restores the reasoning from the memory)
#   --tokens R,A      the streamed workloads' reasoning and answer tokens
#                     (one event each, plus the role, finish and usage
#                     events): a reasoning model's long answer, where the
#                     per-event part outweighs the per-request one
#                                                   [default: 60,37: 100 events]
#   --fair-sched Y|N  valgrind's --fair-sched                [default: yes]
#   --endpoints N     a pool of N [[upstream]] endpoints, all the one
#                     simulator (the pool's own cost)        [default: 1, --upstream]
#   --continuation M  every endpoint of the pool says it continues a cut
#                     stream as M (`continuation` on [[upstream]]; a pool
#                     file even with one endpoint): what recording each
#                     stream for --stream-resume costs  [default: none]
#   --serve-args "A"  more `serve` flags, split on spaces (e.g.
#                     "--default-budget-usd 1000000 --default-max-in-flight 64":
#                     what a budget and a cap cost)  [default: none]
#   --no-build        use the binaries already built
#   --out-dir DIR     where the profiles, logs and ledgers go [default: a new
#                     /tmp/chatgate-callgrind.XXXXXX, kept; its path is printed]
#
# Environment: CARGO_TARGET_DIR (where the binaries are built and found),
# NICE (niceness of everything started here, default 10: the machine is
# shared), VALGRIND_OPTS (extra valgrind options, read by valgrind itself).
#
# Needs valgrind (installed from the distribution when missing) and python3.
# The counts are of user-space instructions of the gateway process only
# (every thread; not the kernel, not the simulator, not the driver).
# Repeatability: callgrind counts exactly, but what the program executes
# depends on how its threads interleave (how many reactor turns, parks and
# wake-ups a request costs), and valgrind runs one thread at a time. With
# valgrind's default scheduling (an unfair lock: who runs next depends on
# the host's timing and load) chatgate-smol's non-streamed figure moved by
# about ±1k between runs, through async-io's reactor; with --fair-sched=yes
# (threads take turns in order, the default here) by about ±0.1k, and
# chatgate-tokio's and the streamed figures by about ±0.2k either way.
# Inspect a profile with:
#   callgrind_annotate --inclusive=yes DIR/callgrind.tokio.nonstream.2200.out
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

requests=2000
warmup=200
conns=8
only="smol,tokio"
workloads="nonstream,stream"
build=1
fair_sched=yes
endpoints=1
continuation=""
tokens=""
serve_args=""
out_dir=""
nice_level="${NICE:-10}"

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --requests) requests="$2"; shift 2 ;;
        --warmup) warmup="$2"; shift 2 ;;
        --conns) conns="$2"; shift 2 ;;
        --only) only="$2"; shift 2 ;;
        --workloads) workloads="$2"; shift 2 ;;
        --tokens) tokens="$2"; shift 2 ;;
        --fair-sched) fair_sched="$2"; shift 2 ;;
        --endpoints) endpoints="$2"; shift 2 ;;
        --continuation) continuation="$2"; shift 2 ;;
        --serve-args) serve_args="$2"; shift 2 ;;
        --no-build) build=0; shift ;;
        --out-dir) out_dir="$2"; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) echo "callgrind.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$fair_sched" in yes | no) ;; *) echo "callgrind.sh: --fair-sched takes yes or no" >&2; exit 2 ;; esac
[ -z "$tokens" ] || [[ "$tokens" =~ ^[0-9]+,[0-9]+$ ]] || { echo "callgrind.sh: --tokens takes R,A (two counts)" >&2; exit 2; }
for v in "$requests" "$warmup" "$conns" "$endpoints"; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || { echo "callgrind.sh: counts must be positive integers" >&2; exit 2; }
done

started_at=$SECONDS
command -v python3 >/dev/null || { echo "callgrind.sh: python3 is needed for the driver" >&2; exit 1; }
scripts/install-package.sh valgrind valgrind >/dev/null

target_dir="${CARGO_TARGET_DIR:-target}"
[[ "$target_dir" == /* ]] || target_dir="$root/$target_dir"
bin_dir="$target_dir/release"
if [ "$build" = 1 ]; then
    echo "==> building release binaries (nice -n $nice_level)"
    nice -n "$nice_level" cargo build --release --bins
fi
for b in chatgate-smol chatgate-tokio; do
    [ -x "$bin_dir/$b" ] || { echo "callgrind.sh: $bin_dir/$b is missing (build without --no-build)" >&2; exit 1; }
done

if [ -n "$out_dir" ]; then
    mkdir -p "$out_dir"
    work="$(cd "$out_dir" && pwd)"
else
    work="$(mktemp -d /tmp/chatgate-callgrind.XXXXXX)"
fi

# Every process started here and still running, stopped on exit, by pid
# (`nice` execs what it starts, and valgrind runs its program in the same
# process, so each pid is the simulator's or the gateway's own).
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Waits until FILE has the "... listening on http://ADDR/v1" line of process
# PID and prints ADDR.
listening_address() {
    local file="$1" pid="$2" what="$3" addr=""
    for _ in $(seq 1200); do
        addr="$(sed -n 's#.*listening on http://\([^/ ]*\)/v1.*#\1#p' "$file" 2>/dev/null | head -n 1)"
        if [ -n "$addr" ]; then echo "$addr"; return 0; fi
        kill -0 "$pid" 2>/dev/null || { echo "callgrind.sh: $what exited before listening" >&2; return 1; }
        sleep 0.1
    done
    echo "callgrind.sh: $what is not listening after 120 s" >&2
    return 1
}

# The benchmark's request bodies (bench/src/main.rs, NONSTREAM and STREAM),
# read from there so the two stay the same; these copies only if it moved.
NONSTREAM='{"model":"reasoning-model-k3","messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly."},{"role":"user","content":"What is the capital of France, and why is it the capital?"}],"max_tokens":512,"x_sim":{"reasoning_tokens":20,"answer_tokens":10}}'
STREAM='{"model":"reasoning-model-k3","stream":true,"messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly."},{"role":"user","content":"What is the capital of France, and why is it the capital?"}],"x_sim":{"reasoning_tokens":60,"answer_tokens":37}}'
bench_body() {
    grep -h "^const $1: &str = r#\"" bench/src/*.rs 2>/dev/null | head -n 1 \
        | sed 's/^const [A-Z]*: &str = r#"\(.*\)"#;$/\1/'
}
for name in NONSTREAM STREAM; do
    from_bench="$(bench_body "$name" || true)"
    if [ -n "$from_bench" ]; then
        printf -v "$name" '%s' "$from_bench"
    else
        echo "note: $name not found in bench/src; using this script's copy" >&2
    fi
done
if [ -n "$tokens" ]; then
    STREAM="$(python3 - "$STREAM" "$tokens" <<'PY'
import json, sys
chat = json.loads(sys.argv[1])
r, a = (int(n) for n in sys.argv[2].split(","))
chat["x_sim"] = dict(chat.get("x_sim", {}), reasoning_tokens=r, answer_tokens=a)
print(json.dumps(chat, separators=(",", ":")), end="")
PY
)"
fi
events=$(python3 -c 'import json,sys; s=json.loads(sys.argv[1])["x_sim"]; print(s["reasoning_tokens"]+s["answer_tokens"]+3)' "$STREAM")
printf '%s' "$NONSTREAM" >"$work/nonstream.json"
printf '%s' "$STREAM" >"$work/stream.json"
# The same stream through the Responses API (`--apis responses`): the same
# prompt, the simulator's lengths in a marker (the translator does not
# forward x_sim), and `store: false`, as the benchmark's own workload sends
# it: the translation alone, not the responses store's writes.
python3 - "$STREAM" >"$work/responses.json" <<'PY'
import json, sys
chat = json.loads(sys.argv[1])
sim = ",".join(f"{k}={v}" for k, v in chat.get("x_sim", {}).items())
print(json.dumps({
    "model": chat["model"],
    "stream": True,
    "instructions": chat["messages"][0]["content"],
    "input": chat["messages"][1]["content"] + (f" [[sim:{sim}]]" if sim else ""),
    "store": False,
}), end="")
PY
# The same stream through the Messages API (`--apis messages`): the system
# prompt as `system`, the user's prompt with the marker, thinking asked for
# as Claude Code asks (so the reasoning is written, as chat forwards it),
# `max_tokens` above the simulator's tokens.
python3 - "$STREAM" >"$work/messages.json" <<'PY'
import json, sys
chat = json.loads(sys.argv[1])
sim = ",".join(f"{k}={v}" for k, v in chat.get("x_sim", {}).items())
print(json.dumps({
    "model": chat["model"],
    "max_tokens": max(1024, sum(chat.get("x_sim", {}).values()) + 64),
    "stream": True,
    "system": chat["messages"][0]["content"],
    "thinking": {"type": "adaptive"},
    "messages": [{
        "role": "user",
        "content": chat["messages"][1]["content"] + (f" [[sim:{sim}]]" if sim else ""),
    }],
}), end="")
PY

# The same stream through the Gemini API (`--apis gemini`), as Gemini CLI
# asks: the system prompt as `systemInstruction`, the thoughts asked for,
# the key as x-goog-api-key.
python3 - "$STREAM" >"$work/gemini.json" <<'PY'
import json, sys
chat = json.loads(sys.argv[1])
sim = ",".join(f"{k}={v}" for k, v in chat.get("x_sim", {}).items())
print(json.dumps({
    "systemInstruction": {"role": "user", "parts": [{"text": chat["messages"][0]["content"]}]},
    "contents": [{"role": "user", "parts": [{
        "text": chat["messages"][1]["content"] + (f" [[sim:{sim}]]" if sim else ""),
    }]}],
    "generationConfig": {"thinkingConfig": {"includeThoughts": True}},
}), end="")
PY

# A tool loop's first turn (the simulator calls a tool), streamed; its
# second turn is written once the simulator runs (the call's id is its).
python3 - "$STREAM" "$work" <<'PY'
import json, sys
chat, work = json.loads(sys.argv[1]), sys.argv[2]
tools = [{"type": "function", "function": {"name": "run", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}]
open(f"{work}/toolloop.first.json", "w").write(json.dumps(dict(chat, tools=tools)))
PY

# The driver: exactly COUNT requests over CONNS keep-alive connections at
# once (each sends its share back to back), every answer read to its end
# and checked. Exits non-zero on any failure.
cat >"$work/driver.py" <<'PY'
import os, socket, sys, threading

addr, body_file, count, conns, workload = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
stream = workload in ("stream", "responses", "messages", "gemini", "toolloop")
path = {
    "responses": "/v1/responses",
    "messages": "/v1/messages",
    "gemini": "/v1beta/models/reasoning-model-k3:streamGenerateContent?alt=sse",
}.get(workload, "/v1/chat/completions")
host, port = addr.rsplit(":", 1)
body = open(body_file, "rb").read()
key = open(os.environ["KEY_FILE"]).read().strip()
auth = {"messages": f"x-api-key: {key}", "gemini": f"x-goog-api-key: {key}"}.get(
    workload, f"Authorization: Bearer {key}")
def framed(body):
    return (
        f"POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n"
        f"{auth}\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
request = framed(body)
shares = [count // conns + (1 if i < count % conns else 0) for i in range(conns)]
done = [0] * conns
errors = []
ready = threading.Barrier(conns)

def one(f):
    f_write, f_read = f
    f_write.sendall(request)
    status = f_read.readline()
    if not status.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"status line {status!r}")
    length, chunked, close = None, False, False
    while True:
        line = f_read.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.partition(b":")
        name, value = name.strip().lower(), value.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value:
            chunked = True
        elif name == b"connection" and value == b"close":
            close = True
    if close:
        raise RuntimeError("the gateway closes the connection")
    if chunked:
        parts = []
        while True:
            size = int(f_read.readline().split(b";")[0], 16)
            data = f_read.read(size + 2)
            if len(data) != size + 2:
                raise RuntimeError("short chunk")
            if size == 0:
                break
            parts.append(data[:-2])
        content = b"".join(parts)
    elif length is not None:
        content = f_read.read(length)
        if len(content) != length:
            raise RuntimeError("short body")
    else:
        raise RuntimeError("no framing")
    if workload in ("stream", "toolloop") and not content.rstrip().endswith(b"data: [DONE]"):
        raise RuntimeError("stream without [DONE]")
    if workload == "responses" and b"event: response.completed" not in content:
        raise RuntimeError("stream without response.completed")
    if workload == "messages" and b"event: message_stop" not in content:
        raise RuntimeError("stream without message_stop")
    if workload == "gemini" and b'"finishReason":"STOP"' not in content:
        raise RuntimeError("stream without finishReason")
    if not stream and b'"usage"' not in content:
        raise RuntimeError("answer without usage")

def client(i):
    try:
        s = socket.create_connection((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = s.makefile("rb", buffering=65536)
        ready.wait()
        for _ in range(shares[i]):
            one((s, f))
            done[i] += 1
        f.close()
        s.close()
    except Exception as e:
        errors.append(repr(e))
        try:
            ready.abort()
        except Exception:
            pass

done_first = 0
if workload == "toolloop":
    # The first turn, once, on a connection of its own (both runs send it,
    # so it cancels out); the rest are second turns.
    s = socket.create_connection((host, int(port)))
    f = s.makefile("rb", buffering=65536)
    saved = request
    request = framed(open(body_file.replace(".json", ".first.json"), "rb").read())
    one((s, f))
    request = saved
    f.close()
    s.close()
    done_first = 1
    count -= 1
    shares = [count // conns + (1 if i < count % conns else 0) for i in range(conns)]

threads = [threading.Thread(target=client, args=(i,)) for i in range(conns)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sum(done) + done_first)
if errors or sum(done) != count:
    print(f"driver: {sum(done)} of {count} requests answered; {errors[:3]}", file=sys.stderr)
    sys.exit(1)
PY

echo "==> upstream: chatgate-smol sim at full speed"
nice -n "$nice_level" "$bin_dir/chatgate-smol" sim --listen 127.0.0.1:0 --ttft-ms 0 --token-ms 0 \
    >"$work/sim.stdout" 2>"$work/sim.stderr" </dev/null &
sim_pid=$!
pids+=("$sim_pid")
sim_addr="$(listening_address "$work/sim.stdout" "$sim_pid" sim)"
upstream="http://$sim_addr/v1"
# The tool loop's second turn, with the id of the call the simulator makes
# in the first.
python3 - "$sim_addr" "$work" <<'PY'
import json, sys, urllib.request
addr, work = sys.argv[1], sys.argv[2]
first = json.load(open(f"{work}/toolloop.first.json"))
ask = dict(first, stream=False)
answer = json.load(urllib.request.urlopen(urllib.request.Request(
    f"http://{addr}/v1/chat/completions", json.dumps(ask).encode(),
    {"Content-Type": "application/json"})))
call = answer["choices"][0]["message"]["tool_calls"][0]
second = dict(first, messages=first["messages"] + [
    {"role": "assistant", "content": None, "tool_calls": [call]},
    {"role": "tool", "tool_call_id": call["id"], "content": "Paris, since 987."}])
open(f"{work}/toolloop.json", "w").write(json.dumps(second))
PY
if [ "$endpoints" -gt 1 ] || [ -n "$continuation" ]; then
    for i in $(seq 1 "$endpoints"); do
        printf '[[upstream]]\nname = "e%s"\nurl = "%s"\n' "$i" "$upstream"
        [ -z "$continuation" ] || printf 'continuation = "%s"\n' "$continuation"
    done >"$work/pool.toml"
    upstream_args=(--config "$work/pool.toml")
else
    upstream_args=(--upstream "$upstream")
fi
read -r -a extra_args <<<"$serve_args"

keys="$work/keys.toml"
rm -f "$keys"
(umask 077 && "$bin_dir/chatgate-smol" keys new --keys "$keys" --name b \
    --rpm 1000000000 --tpm 1000000000000 2>/dev/null | head -n 1 >"$work/key")
[ -s "$work/key" ] || { echo "callgrind.sh: could not mint a key" >&2; exit 1; }

# One gateway under callgrind: BIN WORKLOAD COUNT; sets measured_ir to its
# total Ir (not printed: a command substitution would run it in a subshell,
# out of reach of the cleanup).
measured_ir=""
measure() {
    local bin="$1" workload="$2" count="$3"
    local tag="$bin.$workload.$count"
    local out="$work/callgrind.$tag.out" ledger="$work/ledger.$tag.jsonl"
    rm -f "$out" "$ledger"
    CHATGATE_UPSTREAM_API_KEY=sk-sim-not-a-secret nice -n "$nice_level" \
        valgrind --tool=callgrind --fair-sched="$fair_sched" --callgrind-out-file="$out" --log-file="$work/valgrind.$tag.log" \
        "$bin_dir/chatgate-$bin" serve --listen 127.0.0.1:0 "${upstream_args[@]}" \
        --keys "$keys" --ledger "$ledger" ${extra_args[@]+"${extra_args[@]}"} \
        $(case "$workload" in responses | messages | gemini) echo --apis "$workload" ;; esac) \
        >"$work/gateway.$tag.stdout" 2>"$work/gateway.$tag.stderr" </dev/null &
    local pid=$!
    pids+=("$pid")
    local addr
    addr="$(listening_address "$work/gateway.$tag.stdout" "$pid" "chatgate-$bin under callgrind")"
    KEY_FILE="$work/key" nice -n "$nice_level" python3 "$work/driver.py" \
        "$addr" "$work/$workload.json" "$count" "$conns" "$workload" >/dev/null
    kill -INT "$pid"
    local waited=0
    while kill -0 "$pid" 2>/dev/null; do
        sleep 0.2
        waited=$((waited + 1))
        if [ "$waited" -ge 900 ]; then
            echo "callgrind.sh: chatgate-$bin did not stop within 180 s of SIGINT" >&2
            return 1
        fi
    done
    local status=0
    wait "$pid" || status=$?
    pids=("$sim_pid")
    [ "$status" = 0 ] || { echo "callgrind.sh: chatgate-$bin exited with status $status (see $work/gateway.$tag.stderr)" >&2; return 1; }
    local lines
    lines="$(wc -l <"$ledger")"
    [ "$lines" = "$count" ] || { echo "callgrind.sh: $ledger has $lines lines, expected $count" >&2; return 1; }
    local total
    # The total callgrind reports at exit ("Collected : N", the profile's
    # "totals:" line; every thread of the process).
    total="$(sed -n 's/^==[0-9]*== Collected : \([0-9]*\)$/\1/p' "$work/valgrind.$tag.log" | head -n 1)"
    [[ "$total" =~ ^[0-9]+$ ]] || total="$(sed -n 's/^totals: \([0-9]*\).*/\1/p' "$out" | head -n 1)"
    [[ "$total" =~ ^[0-9]+$ ]] || { echo "callgrind.sh: no total in $out" >&2; return 1; }
    measured_ir="$total"
}

results=()
IFS=, read -r -a bins <<<"$only"
IFS=, read -r -a wls <<<"$workloads"
for bin in "${bins[@]}"; do
    case "$bin" in smol | tokio) ;; *) echo "callgrind.sh: --only takes smol,tokio" >&2; exit 2 ;; esac
    for wl in "${wls[@]}"; do
        case "$wl" in nonstream | stream | responses | messages | gemini | toolloop) ;; *) echo "callgrind.sh: --workloads takes nonstream,stream,responses,messages,gemini,toolloop" >&2; exit 2 ;; esac
        echo "==> chatgate-$bin, $wl: $warmup and $((warmup + requests)) requests, $conns connections"
        t0=$SECONDS
        measure "$bin" "$wl" "$warmup"
        ir_short="$measured_ir"
        measure "$bin" "$wl" "$((warmup + requests))"
        ir_long="$measured_ir"
        results+=("$bin $wl $ir_short $ir_long")
        echo "    Ir $ir_short and $ir_long ($((SECONDS - t0)) s)"
    done
done

echo
echo "user-space instructions per request (callgrind Ir, chatgate $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "endpoints: $endpoints${continuation:+ (continuation = $continuation)}"
echo "serve args: ${serve_args:-none}"
echo "warm-up W=$warmup, measured N=$requests, $conns connections, --fair-sched=$fair_sched; per request = (Ir(W+N) - Ir(W)) / N"
echo
echo "| binary | workload | Ir(W) | Ir(W+N) | per request | naive Ir(W+N)/(W+N) |"
echo "|---|---|---|---|---|---|"
for r in "${results[@]}"; do
    read -r bin wl a b <<<"$r"
    awk -v bin="$bin" -v wl="$wl" -v a="$a" -v b="$b" -v n="$requests" -v w="$warmup" -v ev="$events" 'BEGIN {
        name = (wl == "stream") ? "streamed (" ev " events)" : (wl == "responses") ? "streamed through /v1/responses" : (wl == "messages") ? "streamed through /v1/messages" : (wl == "gemini") ? "streamed through the Gemini API" : (wl == "toolloop") ? "tool loop, second turn (streamed)" : "non-streamed"
        printf "| chatgate-%s | %s | %d | %d | **%.1fk** | %.1fk |\n", bin, name, a, b, (b - a) / n / 1000, b / (w + n) / 1000
    }'
done
echo
echo "profiles, logs and ledgers: $work"
echo "took $((SECONDS - started_at)) s"
