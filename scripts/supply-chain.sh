#!/usr/bin/env bash
# The supply chain, as deny.toml says: cargo-deny (installed into
# .cache/cargo-deny, pinned) checks every dependency's license, where it
# comes from (crates.io only), banned crates (OpenSSL) and duplicate
# versions; and security advisories from the RustSec database when it can
# be fetched (it lives on GitHub: where the network stops at the package
# registries, this says it skipped them and checks the rest).
#
#   scripts/supply-chain.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

version=0.20.2
tools="$root/.cache/cargo-deny"
if [[ "$("$tools/bin/cargo-deny" --version 2>/dev/null || true)" != "cargo-deny $version" ]]; then
    echo "==> installing cargo-deny $version into $tools"
    cargo install cargo-deny --locked --version "$version" --root "$tools" --quiet
fi
export PATH="$tools/bin:$PATH"
# Every platform's crates (a build downloads only this one's): cargo deny
# reads the whole graph's metadata, offline below.
cargo fetch --locked --quiet

if timeout 120 cargo deny fetch db >/dev/null 2>&1; then
    cargo deny --locked check
else
    echo "notice: the RustSec advisory database could not be fetched (no network to GitHub);" \
        "security advisories were NOT checked; licenses, sources and bans were"
    cargo deny --offline --locked check bans licenses sources
fi
