#!/usr/bin/env bash
# Long fuzzing run: every target for SECONDS (default 60).
# Usage: fuzz/run.sh [SECONDS]   (from any directory)
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds == 0)); then
    echo "usage: $0 [SECONDS]" >&2
    exit 2
fi
fuzz_all "$seconds"
