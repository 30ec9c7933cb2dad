#!/bin/sh
# Installs what building and testing Strata needs from Debian 12's packages,
# skipping what is already there. Runs apt-get through sudo when not root.
set -eu
PKGS="gcc clang make libpcre2-dev libutf8proc-dev python3 python3-pip ca-certificates"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "installing:$missing" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
