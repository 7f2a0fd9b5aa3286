# Sourced by the end-to-end test scripts: pass/fail counters, and the closing line that the
# suite summary adds up. Each script sets $out and $err (files shown when a check fails).
fails=0; checks=0
ok() { checks=$((checks + 1)); echo "ok: $1"; }
bad() {
    checks=$((checks + 1)); fails=$((fails + 1)); echo "FAILED: $1"
    for f in "${out:-}" "${err:-}"; do [ -f "$f" ] && tail -n 30 "$f"; done
}
finish() { echo "$((checks - fails)) passed, $fails failed"; [ "$fails" -eq 0 ]; exit $?; }
# make distcheck: the end-to-end runs of both builds already cover these scripts
skip_in_quick_check() {
    if [ -n "${MT_QUICK_CHECK:-}" ]; then echo "skipped (MT_QUICK_CHECK is set)"; exit 77; fi
}
# scratch NAME: a temporary folder $store (removed on exit) holding $out and $err
scratch() {
    store=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-$1-test.XXXXXX")
    out="$store/out"; err="$store/err"
    trap 'rm -rf "$store"' EXIT
}
# fmnist_h5: Fashion-MNIST in the dataset layout at $data (inside $store), or a failed check
fmnist_h5() {
    data="$store/fmnist.h5"
    "${top_builddir:-.}/tools/mpitrain-import" fashion-mnist --output "$data" >"$out" 2>"$err" \
        && return 0
    bad "Fashion-MNIST import (install dataset-fashion-mnist: scripts/setup.sh --example)"
    finish
}
