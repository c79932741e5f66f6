#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it. Installs what it needs:
# the client libraries (OpenAI Python and Node SDKs, Vercel AI SDK, into
# .cache/ and clients/node/node_modules), nginx, redis-server,
# postgresql, curl, openssl, chromium and chromium-driver (Debian packages; the tests
# start their own servers and a headless browser), cargo-fuzz and
# cargo-deny (into .cache/). A second run reuses them.
#
#   scripts/test.sh
#
# Long runs are separate (see RELIABILITY.md): scripts/soak.sh [SECONDS]
# soaks both binaries (10 minutes by default), fuzz/run.sh [SECONDS [JOBS]]
# fuzzes each target longer, bench/run.sh measures (BENCHMARKS.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

step() { printf '\n==> %s\n' "$*"; }
start=$(date +%s)

step "install test dependencies"
clients/install.sh
scripts/install-nginx.sh
scripts/install-package.sh redis-server redis-server
scripts/install-package.sh redis-sentinel redis-sentinel
scripts/install-package.sh postgresql '/usr/lib/postgresql/*/bin/postgres'
scripts/install-package.sh curl curl
scripts/install-package.sh openssl openssl
scripts/install-package.sh chromium chromium
scripts/install-package.sh chromium-driver chromedriver

step "format"
cargo fmt --all -- --check

step "lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build the binaries and examples"
cargo build --workspace --bins --examples --locked

# The supply chain's check installs cargo-deny the first time (a few
# minutes of compiling): it runs beside the tests, which mostly wait on
# the servers they start, and is waited for after them.
step "supply chain (cargo deny; beside the tests)"
supply_log="$(mktemp)"
nice scripts/supply-chain.sh >"$supply_log" 2>&1 &
supply_pid=$!
trap 'kill "$supply_pid" 2>/dev/null || true' EXIT

step "unit, integration, end-to-end and doc tests"
cargo test --workspace --locked

step "supply chain: the result"
if ! wait "$supply_pid"; then
    cat "$supply_log"
    echo "the supply chain check failed (deny.toml)" >&2
    exit 1
fi
cat "$supply_log"

step "fuzzing smoke run"
fuzz/smoke.sh

printf '\nall tests passed in %ss\n' "$(( $(date +%s) - start ))"
