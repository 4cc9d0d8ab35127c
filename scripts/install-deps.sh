#!/usr/bin/env bash
# Installs the Debian packages the build and the tests need (run as root, or with sudo).
set -euo pipefail
pkgs="build-essential clang libclang-rt-14-dev llvm libpcre2-dev libmicrohttpd-dev libcjson-dev python3-venv python3-dev cmake curl"
missing=""
for p in $pkgs; do dpkg -s "$p" > /dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
fi
echo "install-deps: ok"
