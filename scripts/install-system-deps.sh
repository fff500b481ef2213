#!/usr/bin/env bash
# Install the Debian packages sdnmpi needs, only those that are missing.
# Idempotent: a second run installs nothing and does not touch apt's lists.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
list="$here/apt-packages.txt"
mapfile -t wanted < <(grep -Ev '^\s*(#|$)' "$list" || true)
missing=()
for pkg in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "sdnmpi: missing system packages: ${missing[*]} (run as root, or install them)" >&2
    exit 1
fi
echo "sdnmpi: installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
