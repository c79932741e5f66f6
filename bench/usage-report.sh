#!/usr/bin/env bash
# How fast `usage` reads a large ledger, and in how much memory: builds the
# release binaries, writes a ledger of about 1 GB into a temporary
# directory (removed afterwards), runs
# `chatgate-smol usage --ledger FILE --by month --format csv` on it, and
# prints the time, the peak resident memory and whether the report's totals
# equal an independent sum of the file's lines (OPERATIONS.md quotes it).
#
#   bench/usage-report.sh                    # 1 GB, chatgate-smol
#   bench/usage-report.sh --mb 256 --bin chatgate-tokio --dir /var/tmp
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

echo "==> building release binaries"
cargo build --release --locked -p chatgate-smol -p chatgate-tokio \
    -p chatgate-tests --bin chatgate-smol --bin chatgate-tokio --bin chatgate-usage-bench

exec "${CARGO_TARGET_DIR:-target}/release/chatgate-usage-bench" "$@"
