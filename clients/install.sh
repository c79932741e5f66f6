#!/usr/bin/env bash
# Installs the client libraries that tests/tests/clients.rs drives:
#   - the OpenAI Python SDK into a venv at .cache/clients/venv, from
#     clients/python/requirements.txt (exact pins);
#   - the OpenAI Node SDK and the Vercel AI SDK into clients/node/node_modules,
#     with `npm ci` from clients/node/package-lock.json;
#   - Codex CLI into clients/codex/node_modules, with `npm ci` from
#     clients/codex/package-lock.json (tests/tests/responses.rs);
#   - Claude Code into clients/claude/node_modules, the same way
#     (tests/tests/messages.rs);
#   - Gemini CLI into clients/gemini/node_modules, the same way
#     (tests/tests/gemini.rs);
#   - node-oidc-provider into clients/oidc/node_modules, the same way
#     (tests/tests/sso.rs: a real OpenID provider to sign in against).
# Needs python3 (3.10 or newer, with venv) and node (20 or newer) with npm,
# and access to PyPI and the npm registry. Safe to run again: each half is
# skipped while its lock file (and interpreter) are unchanged.
#
#   clients/install.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${PYTHON:-python3}"

say() { printf 'clients/install.sh: %s\n' "$*"; }
die() { say "$*" >&2; exit 1; }
hash_of() { sha256sum "$1" | cut -d' ' -f1; }

command -v "$python" >/dev/null || die "$python not found: install Python 3.10 or newer"
command -v node >/dev/null || die "node not found: install Node.js 20 or newer"
command -v npm >/dev/null || die "npm not found: install npm"
"$python" -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' \
    || die "$python must be Python 3.10 or newer with the venv module"

# A Python venv with pinned requirements: LABEL VENV REQUIREMENTS.
venv_pinned() {
    local label="$1" venv="$2" req="$3" stamp want
    stamp="$venv/.installed"
    want="$(hash_of "$req") $("$python" -c 'import sys; print(sys.version)' | head -n1) $venv"
    if [[ -x "$venv/bin/python" && -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        say "$label: up to date"
    else
        say "$label: creating $venv"
        rm -rf "$venv"
        mkdir -p "$(dirname "$venv")"
        "$python" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
            --no-cache-dir -r "$req"
        printf '%s\n' "$want" >"$stamp"
    fi
}
# The OpenAI and Anthropic SDKs, LangChain, the trace receiver.
venv_pinned python "$root/.cache/clients/venv" "$root/clients/python/requirements.txt"
# The OpenAI Agents SDK, in a venv of its own: it pins websockets below
# the version the first venv's SDKs take.
venv_pinned agents "$root/.cache/clients/venv-agents" "$root/clients/python/agents-requirements.txt"

# An npm directory, exactly as its package-lock.json records: LABEL DIR.
npm_locked() {
    local label="$1" dir="$2" stamp want
    stamp="$dir/node_modules/.installed"
    want="$(hash_of "$dir/package-lock.json") $(node --version)"
    if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
        say "$label: up to date"
    else
        say "$label: npm ci"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
        printf '%s\n' "$want" >"$stamp"
    fi
}
# The Node SDKs; Codex CLI and Claude Code (native binaries in npm packages);
# Gemini CLI (one bundled script).
npm_locked node "$root/clients/node"
npm_locked codex "$root/clients/codex"
npm_locked claude "$root/clients/claude"
npm_locked gemini "$root/clients/gemini"
# A real OpenID provider for the single sign-on tests (tests/tests/sso.rs).
npm_locked oidc-provider "$root/clients/oidc"
say "done"
