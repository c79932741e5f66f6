#!/usr/bin/env bash
# The benchmarks, in one command: installs nginx and wrk (Debian packages)
# if missing, builds the release binaries, and runs every workload against
# the simulator direct, nginx as a plain proxy, chatgate-smol and
# chatgate-tokio, then the lean comparison (a static nginx upstream, nginx
# with one worker and no access log against chatgate with one worker
# thread, and Portkey's gateway and LiteLLM's proxy as optional rows).
# Prints the tables; with --out FILE also writes them.
#
#   bench/run.sh                 # full run (about 40 minutes after the build)
#   bench/run.sh --quick         # short run (about a minute)
#   bench/run.sh --seconds 20 --only nonstream,stream
#   bench/run.sh --only responses,messages,gemini --api-tokens 1200,800
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# Debian's packages, installed without starting their services (the
# benchmark runs its own nginx).
scripts/install-package.sh wrk wrk
scripts/install-package.sh nginx nginx
scripts/install-package.sh redis-server redis-server
scripts/install-package.sh redis-sentinel redis-sentinel

# The peers of the lean comparison (Portkey's gateway, LiteLLM's proxy),
# pinned; skipped with a notice when they cannot be installed, or when
# CHATGATE_BENCH_PEERS=off.
if [ "${CHATGATE_BENCH_PEERS:-}" != off ]; then
  export CHATGATE_BENCH_PEERS="${CHATGATE_BENCH_PEERS:-$root/.cache/bench-peers}"
  bench/install-peers.sh "$CHATGATE_BENCH_PEERS"
else
  unset CHATGATE_BENCH_PEERS
fi

echo "==> building release binaries"
cargo build --release --locked -p chatgate-smol -p chatgate-tokio -p chatgate-bench

exec target/release/chatgate-bench "$@"
