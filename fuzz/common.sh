# Shared by smoke.sh and run.sh; sourced, not run.
# Sets FUZZ_DIR, REPO and TARGETS, puts cargo-fuzz on PATH; installs cargo-fuzz into
# <repo>/.cache/cargo-fuzz when it is missing; copies the seeds into the
# corpus directories.

FUZZ_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$FUZZ_DIR/.." && pwd)"
TARGETS=(sse_framer request_head chunked response_head validate exchange completion resp responses_request responses_events messages_request messages_events gemini_request gemini_events stored reasoning splice)

if ! command -v rustup >/dev/null 2>&1; then
    echo "rustup is required (with a nightly toolchain: rustup toolchain install nightly)" >&2
    exit 1
fi
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "a nightly toolchain is required: rustup toolchain install nightly" >&2
    exit 1
fi

CARGO_FUZZ_ROOT="$REPO/.cache/cargo-fuzz"
if [[ ! -x "$CARGO_FUZZ_ROOT/bin/cargo-fuzz" ]]; then
    echo "==> installing cargo-fuzz into $CARGO_FUZZ_ROOT"
    cargo install cargo-fuzz --locked --root "$CARGO_FUZZ_ROOT"
fi
# `cargo +nightly fuzz` finds the subcommand on PATH.
export PATH="$CARGO_FUZZ_ROOT/bin:$PATH"

# Seeds are committed under seeds/<target>/; the corpus directories are
# generated (and ignored by git). Copying never overwrites what a previous
# run found.
seed_corpora() {
    local t seed
    for t in "${TARGETS[@]}"; do
        mkdir -p "$FUZZ_DIR/corpus/$t"
        for seed in "$FUZZ_DIR/seeds/$t"/*; do
            [[ -f "$seed" ]] || continue
            [[ -e "$FUZZ_DIR/corpus/$t/${seed##*/}" ]] || cp "$seed" "$FUZZ_DIR/corpus/$t/"
        done
    done
}

# fuzz_all SECONDS [JOBS]: builds every target, then runs each for SECONDS,
# JOBS targets at a time (default 1); fails when any target finds something
# (libFuzzer exits non-zero and saves the input under artifacts/<target>/).
# Each run's output is kept in logs/<target>.log; the final statistics
# (executions, coverage) are printed when it ends.
fuzz_all() {
    local seconds="$1" jobs="${2:-1}" t status=0
    local -a failed=() running=() names=()
    cd "$FUZZ_DIR"
    seed_corpora
    mkdir -p logs
    echo "==> building all targets"
    cargo +nightly fuzz build
    run_one() {
        local t="$1" start=$SECONDS rc=0
        # -print_final_stats reports the number of executions.
        cargo +nightly fuzz run "$t" "corpus/$t" -- \
            -max_total_time="$seconds" -print_final_stats=1 >"logs/$t.log" 2>&1 || rc=$?
        echo "==> $t done in $((SECONDS - start))s (exit $rc):" \
            "$(grep -E '^stat::number_of_executed_units' "logs/$t.log" | tr -s ' ')"
        if ((rc != 0)); then
            tail -n 60 "logs/$t.log" >&2
        fi
        return "$rc"
    }
    for t in "${TARGETS[@]}"; do
        echo "==> $t for ${seconds}s"
        run_one "$t" &
        running+=("$!")
        names+=("$t")
        if ((${#running[@]} >= jobs)); then
            wait "${running[0]}" || { failed+=("${names[0]}"); status=1; }
            running=("${running[@]:1}")
            names=("${names[@]:1}")
        fi
    done
    for i in "${!running[@]}"; do
        wait "${running[$i]}" || { failed+=("${names[$i]}"); status=1; }
    done
    if ((status != 0)); then
        echo "==> findings in: ${failed[*]} (inputs under $FUZZ_DIR/artifacts/, logs under $FUZZ_DIR/logs/)" >&2
    else
        echo "==> no findings"
    fi
    return "$status"
}
