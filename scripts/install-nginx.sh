#!/usr/bin/env bash
# Installs nginx from the Debian package archive (see install-package.sh).
exec "$(dirname "${BASH_SOURCE[0]}")/install-package.sh" nginx nginx
