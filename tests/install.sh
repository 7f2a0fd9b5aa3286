#!/bin/sh
# Install into a temporary prefix and build a client the way users do:
#   mpicc client.c $(pkg-config --cflags --libs mpitrain)
# then run it under mpirun at 2 ranks.
set -eu
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
${MAKE:-make} -C "${top_builddir:-.}" install DESTDIR="$tmp/root" >"$tmp/install.log" 2>&1 || {
    cat "$tmp/install.log"; echo "FAILED: make install"; exit 1; }
pc=$(find "$tmp/root" -name mpitrain.pc | head -n 1)
[ -n "$pc" ] || { echo "FAILED: mpitrain.pc not installed"; exit 1; }
pcdir=$(dirname "$pc")
prefix_in_pc=$(sed -n 's/^prefix=//p' "$pc")
root_prefix="$tmp/root$prefix_in_pc"
# the client is README's example, so the manual cannot drift from what builds
awk '/^## A training function/ { f = 1; next } f && /^```c/ { g = 1; next } g && /^```/ { exit } g' \
    "${top_srcdir:-.}/README.md" >"$tmp/client.c"
[ -s "$tmp/client.c" ] || { echo "FAILED: no C example in README.md"; exit 1; }
flags=$(PKG_CONFIG_PATH="$pcdir" pkg-config --define-prefix --cflags --libs mpitrain)
echo "mpicc client.c $flags"
# a sanitizer build's client gets the sanitizer defaults every program of the build has
sanopts=""
[ -n "${MT_SAN_FLAGS:-}" ] && sanopts="${top_srcdir:-.}/common/sanopts.c"
# shellcheck disable=SC2086
mpicc ${MT_SAN_FLAGS:-} -o "$tmp/client" "$tmp/client.c" $sanopts $flags
out=$(LD_LIBRARY_PATH="$root_prefix/lib" MT_STORAGE_PATH="$tmp/results" \
      "${top_srcdir:-.}/tests/mpirun.sh" 2 -x LD_LIBRARY_PATH -x MT_STORAGE_PATH "$tmp/client")
echo "$out"
if echo "$out" | grep -q "iter 3 .*loss=0.2917  \[checkpoint_000002\]" \
    && grep -q '"status": "finished"' "$tmp/results/demo/run.json"; then
    echo "1 passed, 0 failed"
else
    echo "FAILED: unexpected output"; echo "0 passed, 1 failed"; exit 1
fi
