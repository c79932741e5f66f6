#!/usr/bin/env bash
# Installs the gateways a user would pick instead of chatgate, pinned, for
# the lean comparison's optional rows: Portkey's open-source gateway (npm)
# and LiteLLM's proxy (PyPI), into DIR (default .cache/bench-peers). Each
# one that cannot be installed is skipped with a notice; the benchmark then
# says it was not measured.
#
#   bench/install-peers.sh [DIR]
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/.cache/bench-peers}"
mkdir -p "$dir"

PORTKEY_VERSION=1.15.2
# litellm[proxy] 1.100.0: the newest release whose `proxy` extra installs
# from PyPI (later ones want a litellm-proxy-extras build not published).
LITELLM_VERSION=1.100.0

if [ -f "$dir/portkey/.installed-$PORTKEY_VERSION" ]; then
  :
elif command -v npm >/dev/null; then
  echo "==> installing Portkey's gateway $PORTKEY_VERSION"
  mkdir -p "$dir/portkey"
  if (cd "$dir/portkey" && npm install --no-audit --no-fund --silent \
        "@portkey-ai/gateway@$PORTKEY_VERSION" >/dev/null); then
    touch "$dir/portkey/.installed-$PORTKEY_VERSION"
  else
    echo "notice: Portkey's gateway could not be installed; its rows are skipped" >&2
  fi
else
  echo "notice: no npm; Portkey's gateway is skipped" >&2
fi

if [ -f "$dir/litellm/.installed-$LITELLM_VERSION" ]; then
  :
elif command -v python3 >/dev/null; then
  echo "==> installing LiteLLM's proxy $LITELLM_VERSION"
  if python3 -m venv "$dir/litellm" &&
     "$dir/litellm/bin/pip" install -q "litellm[proxy]==$LITELLM_VERSION"; then
    touch "$dir/litellm/.installed-$LITELLM_VERSION"
  else
    echo "notice: LiteLLM's proxy could not be installed; its rows are skipped" >&2
  fi
else
  echo "notice: no python3; LiteLLM's proxy is skipped" >&2
fi
exit 0
