#!/usr/bin/env bash
# The benchmarks, in one command: installs nginx and wrk (Debian packages)
# if missing, builds the release binaries, and runs every workload against
# the simulator direct, nginx as a plain proxy, chatgate-smol and
# chatgate-tokio. Prints the tables; with --out FILE also writes them.
#
#   bench/run.sh                 # full run (about 10 minutes)
#   bench/run.sh --quick         # short run (about a minute)
#   bench/run.sh --seconds 20 --only nonstream,stream
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing ${missing[*]}"
    sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" \
        || { "${sudo[@]}" apt-get update -q && "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; }
    # The package may have started a system nginx; the benchmark runs its own.
    "${sudo[@]}" nginx -s quit 2>/dev/null || true
fi

echo "==> building release binaries"
cargo build --release --locked -p chatgate-smol -p chatgate-tokio -p chatgate-bench

exec target/release/chatgate-bench "$@"
