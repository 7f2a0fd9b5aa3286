#!/bin/sh
# Only mt_ names leave the shared library (internal mt__ names and helpers stay hidden).
# In a sanitizer build, every program carries the runtime defaults of common/sanopts.c.
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
if [ -n "${MT_SANITIZED:-}" ]; then
    missing=""; n=0
    for f in "${top_builddir:-.}"/tools/* "${top_builddir:-.}"/benchmarks/* "${top_builddir:-.}"/tests/* \
        "${top_builddir:-.}"/fuzz/*; do
        [ -f "$f" ] && [ -x "$f" ] || continue
        case "$f" in *.sh | *.la | *.lo | *.o) continue ;; esac
        elf=$f # a libtool wrapper script runs the real program from .libs/
        [ "$(head -c 4 "$f" | tail -c 3)" = ELF ] || elf="$(dirname "$f")/.libs/$(basename "$f")"
        [ "$(head -c 4 "$elf" 2>/dev/null | tail -c 3)" = ELF ] || continue
        n=$((n + 1))
        nm --defined-only "$elf" 2>/dev/null | grep -q ' __asan_default_options$' || missing="$missing $f"
    done
    echo "sanitizer build: $n programs checked for common/sanopts.c"
    if [ -n "$missing" ] || [ "$n" -eq 0 ]; then
        echo "FAILED: programs linked without \$(MT_SANOPTS) (see common/sanopts.c):$missing"
        echo "0 passed, 1 failed"; exit 1
    fi
fi
echo "1 passed, 0 failed"
