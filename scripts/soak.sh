#!/usr/bin/env bash
# Long soak: a mixed load at a fixed rate through both binaries at once
# (default 10 minutes at 40 requests/s each), then each ledger reconciled
# against what the clients saw and what the simulator reported.
# Usage: scripts/soak.sh [SECONDS [RATE]]   (from any directory)
set -euo pipefail
cd "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/.."
seconds="${1:-600}"
rate="${2:-40}"
if ! [[ "$seconds" =~ ^[0-9]+$ && "$rate" =~ ^[0-9]+$ ]] || ((seconds < 20 || rate == 0)); then
    echo "usage: $0 [SECONDS (at least 20) [RATE]]" >&2
    exit 2
fi
warmup=$((seconds / 10))
echo "==> building release binaries"
cargo build --release --bins -p chatgate-smol -p chatgate-tokio -p chatgate-tests
pids=()
for bin in chatgate-smol chatgate-tokio; do
    echo "==> $bin: ${seconds}s at ${rate}/s (warm-up ${warmup}s)"
    target/release/chatgate-soak --bin "$bin" --seconds "$seconds" --rate "$rate" \
        --warmup "$warmup" >"target/soak-$bin.md" 2>"target/soak-$bin.log" &
    pids+=("$!")
done
status=0
for p in "${pids[@]}"; do
    wait "$p" || status=1
done
cat target/soak-chatgate-smol.md target/soak-chatgate-tokio.md
exit "$status"
