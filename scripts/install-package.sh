#!/usr/bin/env bash
# Installs a Debian package for the tests when its program is missing:
# nginx (a real TLS terminator in front of the simulator, tests/tests/nginx.rs),
# redis-server and redis-sentinel (shared rate limits, one server, behind
# Sentinels, or as a cluster) and postgresql (the shared ledger). Does
# nothing when the program is already installed.
#
#   scripts/install-package.sh PACKAGE PROGRAM    (as root, or with sudo available)
#
# curl runs the README's examples (tests/tests/readme_curl.rs); chromium
# and chromium-driver drive the console in a headless browser
# (tests/tests/console.rs).
#
# The package's service is not started: the tests run their own servers as
# child processes with generated configurations.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 PACKAGE PROGRAM" >&2
    exit 2
fi
package="$1"
program="$2"

# PROGRAM is a command name, or an absolute path pattern for a program that
# is not on PATH (the PostgreSQL server lives in /usr/lib/postgresql/N/bin).
find_program() {
    if [[ "$program" == /* ]]; then
        compgen -G "$program" | head -n 1 || true
        return
    fi
    command -v "$program" 2>/dev/null || { [ -x "/usr/sbin/$program" ] && echo "/usr/sbin/$program"; } || true
}

if [ -n "$(find_program)" ]; then
    echo "$package is installed: $(find_program)"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-package.sh: apt-get not found; install $package with this system's package manager" >&2
    exit 1
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        as_root=(sudo --preserve-env=DEBIAN_FRONTEND)
    else
        echo "install-package.sh: installing packages needs root; run it as root" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive

# Keep the package's postinst from starting its service (nginx on port 80,
# redis-server on 6379; the usual policy-rc.d guard), unless the system
# already has a policy of its own.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    trap '"${as_root[@]}" rm -f "$policy"' EXIT
    printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null
    "${as_root[@]}" chmod 755 "$policy"
fi

install() {
    "${as_root[@]}" apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$package"
}

# Update the package lists only when they do not offer the package, or when the
# install fails with the lists we have (they may be stale).
if ! apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    "${as_root[@]}" apt-get update -q
    install
elif ! install; then
    "${as_root[@]}" apt-get update -q
    install
fi

if [ -z "$(find_program)" ]; then
    echo "install-package.sh: $package was installed but $program is not on PATH or in /usr/sbin" >&2
    exit 1
fi
echo "$package installed: $(find_program)"
