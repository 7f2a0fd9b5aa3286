#!/bin/sh
# Only mt_ names leave the shared library (internal mt__ names and helpers stay hidden).
so="${top_builddir:-.}/.libs/libmpitrain.so"
[ -f "$so" ] || { echo "FAILED: $so not built"; exit 1; }
syms=$(nm -D --defined-only "$so" | awk '$2 ~ /^[TDBRVW]$/ { print $3 }')
n=$(printf '%s\n' "$syms" | grep -c .)
stray=$(printf '%s\n' "$syms" | grep -v '^mt_[a-z0-9]' || true)
echo "libmpitrain.so exports $n symbols"
if [ -n "$stray" ]; then
    echo "FAILED: exported names without the mt_ prefix (or internal mt__ names):"
    printf '  %s\n' $stray
    echo "0 passed, 1 failed"
    exit 1
fi
for want in mt_init mt_trainer_fit mt_allreduce mt_last_error mt_config_from_args; do
    printf '%s\n' "$syms" | grep -qx "$want" || { echo "FAILED: $want not exported"; echo "0 passed, 1 failed"; exit 1; }
done
echo "1 passed, 0 failed"
