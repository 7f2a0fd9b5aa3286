#!/bin/sh
# scripts/build.sh DIR [CONFIGURE-OPTIONS...]: generate configure if needed, then
# configure (once per DIR and option set) and build out of tree in DIR.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
dir=$1; shift
[ -x "$top/configure" ] || (cd "$top" && autoreconf -fi >/dev/null)
mkdir -p "$dir"
cd "$dir"
opts="$*"
if [ ! -f Makefile ] || [ "$(cat .mt-configure-opts 2>/dev/null)" != "$opts" ]; then
    "$top/configure" -q "$@"
    echo "$opts" >.mt-configure-opts
fi
make -j"$(nproc)" >/dev/null
