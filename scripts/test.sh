#!/usr/bin/env bash
# The whole test suite, exactly as CI runs it. Installs what it needs:
# the client libraries (OpenAI Python and Node SDKs, Vercel AI SDK, into
# .cache/ and clients/node/node_modules), nginx, redis-server,
# postgresql, curl, openssl, chromium and chromium-driver (Debian packages; the tests
# start their own servers and a headless browser) and
# cargo-fuzz (into .cache/). A second run reuses them.
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

step "unit, integration, end-to-end and doc tests"
cargo test --workspace --locked

step "fuzzing smoke run"
fuzz/smoke.sh

printf '\nall tests passed in %ss\n' "$(( $(date +%s) - start ))"
