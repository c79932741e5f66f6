#!/usr/bin/env bash
# Release binaries with their dependency list embedded: cargo-auditable
# (installed into .cache/cargo-auditable, pinned) builds chatgate-smol and
# chatgate-tokio in release mode with the resolved dependency tree,
# compressed, in a `.dep-v0` section of each binary. Scanners read it from
# the shipped file alone (`cargo audit bin`, Trivy, Syft, grype), so a
# vulnerable crate in a deployed binary can be found without its source.
#
#   scripts/release.sh            # -> target/release/chatgate-smol, chatgate-tokio
#
# Checks that both binaries carry the section before it says done.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

version=0.7.7
tools="$root/.cache/cargo-auditable"
if [[ "$("$tools/bin/cargo-auditable" --version 2>/dev/null || true)" != *"$version"* ]]; then
    echo "==> installing cargo-auditable $version into $tools"
    cargo install cargo-auditable --locked --version "$version" --root "$tools"
fi
export PATH="$tools/bin:$PATH"

echo "==> building the release binaries with their dependency list"
cargo auditable build --release --locked -p chatgate-smol -p chatgate-tokio

for bin in chatgate-smol chatgate-tokio; do
    file="target/release/$bin"
    size="$(objdump -h "$file" | awk '$2 == ".dep-v0" {print $3}')"
    if [[ -z "$size" ]]; then
        echo "release.sh: $file has no .dep-v0 section" >&2
        exit 1
    fi
    echo "==> $file: dependency list embedded (.dep-v0, $((16#$size)) bytes compressed)"
done
