#!/usr/bin/env bash
# Long fuzzing run: every target for SECONDS (default 60), JOBS targets at a
# time (default 1; one core each).
# Usage: fuzz/run.sh [SECONDS [JOBS]]   (from any directory)
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
seconds="${1:-60}"
jobs="${2:-1}"
if ! [[ "$seconds" =~ ^[0-9]+$ && "$jobs" =~ ^[0-9]+$ ]] || ((seconds == 0 || jobs == 0)); then
    echo "usage: $0 [SECONDS [JOBS]]" >&2
    exit 2
fi
fuzz_all "$seconds" "$jobs"
