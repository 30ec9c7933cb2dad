#!/bin/sh
# Installs what building Strata needs from Debian 12's packages, skipping what
# is already there (libjs-marked: the Markdown renderer `strata serve` gives its
# chat page); with --test, also what the tests drive (headless Chromium and its
# driver from Debian, the openai, selenium and pydantic packages from PyPI).
# Runs apt-get through sudo when not root.
set -eu
PKGS="gcc clang make libpcre2-dev libutf8proc-dev libmicrohttpd-dev libcjson-dev libedit-dev libjs-marked python3 python3-pip ca-certificates"
PY=""
if [ "${1:-}" = "--test" ]; then
    PKGS="$PKGS chromium chromium-driver"
    PY="openai selenium pydantic"
elif [ -n "${1:-}" ]; then
    echo "usage: $0 [--test]" >&2
    exit 2
fi
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    echo "installing:$missing" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
for m in $PY; do
    python3 -c "import $m" 2>/dev/null && continue
    echo "installing python package: $m" >&2
    # Debian's own python refuses user installs without this flag (PEP 668)
    python3 -m pip install -q "$m" 2>/dev/null || python3 -m pip install -q --break-system-packages "$m"
done
