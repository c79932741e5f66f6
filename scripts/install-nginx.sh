#!/usr/bin/env bash
# Installs nginx from the Debian package archive, for the end-to-end tests
# that put a real nginx TLS terminator in front of the simulator
# (tests/tests/nginx.rs). Does nothing when nginx is already installed.
#
#   scripts/install-nginx.sh        (as root, or with sudo available)
#
# The package's service is not started: the tests run their own nginx as a
# child process with a generated configuration.
set -euo pipefail

find_nginx() {
    command -v nginx 2>/dev/null || { [ -x /usr/sbin/nginx ] && echo /usr/sbin/nginx; } || true
}

if [ -n "$(find_nginx)" ]; then
    echo "nginx is installed: $(find_nginx)"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "install-nginx.sh: apt-get not found; install nginx with this system's package manager" >&2
    exit 1
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        as_root=(sudo --preserve-env=DEBIAN_FRONTEND)
    else
        echo "install-nginx.sh: installing packages needs root; run it as root" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive

# Keep the package's postinst from starting an nginx service on port 80 (the
# usual policy-rc.d guard), unless the system already has a policy of its own.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    trap '"${as_root[@]}" rm -f "$policy"' EXIT
    printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null
    "${as_root[@]}" chmod 755 "$policy"
fi

install() {
    "${as_root[@]}" apt-get install -y -q --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold nginx
}

# Update the package lists only when they do not offer nginx, or when the
# install fails with the lists we have (they may be stale).
if ! apt-cache policy nginx 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    "${as_root[@]}" apt-get update -q
    install
elif ! install; then
    "${as_root[@]}" apt-get update -q
    install
fi

if [ -z "$(find_nginx)" ]; then
    echo "install-nginx.sh: nginx was installed but is not on PATH or in /usr/sbin" >&2
    exit 1
fi
echo "nginx installed: $(find_nginx) ($("$(find_nginx)" -v 2>&1))"
