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
