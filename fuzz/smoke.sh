#!/usr/bin/env bash
# Short fuzzing pass for CI: every target for about 10 seconds.
# Usage: fuzz/smoke.sh   (from any directory)
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
fuzz_all 10
