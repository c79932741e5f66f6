#!/usr/bin/env bash
# The translators alone, in user-space instructions (callgrind): what one
# stream's answer costs to translate into each client API's events, and
# what a coding agent's long conversation costs to translate into a chat
# request (the workloads are described in core/examples/translate_cost.rs).
# Each workload runs 5 and 25 times; the difference over 20 is one run's
# instructions (start-up and the first run's allocations cancel).
#
#   bench/translate-cost.sh                 # every workload
#   bench/translate-cost.sh messages req-messages
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
command -v valgrind >/dev/null || scripts/install-package.sh valgrind valgrind
cargo build --release --locked -p chatgate-core --example translate_cost >&2
bin="${CARGO_TARGET_DIR:-$root/target}/release/examples/translate_cost"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(responses messages gemini req-responses req-messages req-gemini)
count() {
  valgrind --tool=callgrind --callgrind-out-file="$work/out" "$bin" "$1" "$2" 2>&1 >/dev/null |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}
echo "| workload | instructions per run |"
echo "|---|---|"
for w in "${workloads[@]}"; do
  a=$(count "$w" 5)
  b=$(count "$w" 25)
  echo "| $w | $(( (b - a) / 20 )) |"
done
