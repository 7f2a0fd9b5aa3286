#!/bin/sh
# README's training function ("## A training function"), compiled from the README as a user
# would and run at 2 ranks: --help (exit 0, the demo's own defaults), an unknown flag
# (exit 2, named, no run folder), a run to the end, a rerun of the finished run (refused
# with what to do, not as a failure of rank 0), and a stop request (SIGUSR1 to mpirun)
# whose rerun goes on after the stored epoch, each epoch in result.json once. No message
# may print "(null)".
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
scratch demo
limit=$((240 * ${MT_TEST_TIMEOUT_SCALE:-1}))
runs="$store/runs"
status() { sed -n 's/.*"status": *"\([a-z]*\)".*/\1/p' "$runs/$1/run.json" 2>/dev/null; }
# the "epoch" metric of each row of result.json (the first "epoch" of the line; per_rank has one too)
epochs_of() {
    awk 'match($0, /"epoch": *[0-9]+/) { s = substr($0, RSTART, RLENGTH); sub(/.*: */, "", s); printf "%s ", s }' \
        "$runs/$1/result.json" 2>/dev/null
}
no_null() { ! grep -q "(null)" "$out" "$err"; }

awk '/^## A training function/ { f = 1; next } f && /^```c/ { g = 1; next } g && /^```/ { exit } g' \
    "${top_srcdir:-.}/README.md" >"$store/demo.c"
sanopts=""
[ -n "${MT_SAN_FLAGS:-}" ] && sanopts="${top_srcdir:-.}/common/sanopts.c"
# shellcheck disable=SC2086
if ! [ -s "$store/demo.c" ] || ! mpicc ${MT_SAN_FLAGS:-} -I"${top_srcdir:-.}/include" \
    -o "$store/demo" "$store/demo.c" $sanopts -L"$b/.libs" -lmpitrain >"$out" 2>"$err"; then
    bad "README's demo does not build"
    finish
fi
ok "README's demo builds"
export LD_LIBRARY_PATH="$b/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MT_STORAGE_PATH="$runs"
demo() { "$run" 2 -x LD_LIBRARY_PATH -x MT_STORAGE_PATH "$store/demo" "$@"; }

# --help: exit 0, once (rank 0), the demo's option and the library's with the demo's defaults
demo --help >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c '^usage: ' "$out")" -eq 1 ] && grep -q -- "--epochs N (default 3)" "$out" \
    && grep -Eq -- "--name TEXT +experiment name.*\(default: demo\)" "$out" \
    && grep -Eq -- "--checkpoint-frequency N +.*\(default: 1\)" "$out" \
    && grep -Eq -- "--num-to-keep N +.*\(default: 0\)" "$out" && [ ! -e "$runs" ]; then
    ok "--help: usage once, with the demo's defaults (name demo, checkpoint every report); no run folder"
else bad "--help (exit $rc)"; fi

# an unknown flag, a stray argument and a bad value of the demo's own option: exit 2, named
demo --epoch 5 stray >"$out" 2>"$err"
rc=$?
if [ $rc -eq 2 ] && grep -q "demo: unknown option '--epoch' (see --help)" "$err" \
    && grep -q "unexpected argument '5' (see --help)" "$err" && grep -q "unexpected argument 'stray'" "$err" \
    && [ ! -e "$runs" ] && no_null; then
    ok "an unknown flag: exit 2, every leftover argument named, nothing written"
else bad "unknown flag (exit $rc)"; fi
demo --epochs >"$out" 2>"$err"
rc=$?
if [ $rc -eq 2 ] && grep -q "demo: option --epochs needs a value" "$err" && no_null; then
    ok "the demo's own option without its value: exit 2, named"
else bad "--epochs without a value (exit $rc)"; fi

# a run to the end
demo >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(status demo)" = finished ] && [ "$(epochs_of demo)" = "0 1 2 " ]; then
    ok "2 ranks: the demo runs its 3 epochs"
else bad "the demo's run (exit $rc, status '$(status demo)', epochs '$(epochs_of demo)')"; fi

# the same run again: refused as finished, with the way out; not "rank 0 failed"
demo >"$out" 2>"$err"
rc=$?
if [ $rc -eq 1 ] && grep -q "demo: .*run 'demo' finished already; to start a new run give another --name (run.name), or to replace this one --overwrite" "$err" \
    && ! grep -q "failed" "$err" && no_null && [ "$(epochs_of demo)" = "0 1 2 " ]; then
    ok "a finished run is refused with how to start another or overwrite it, nothing lost"
else bad "rerun of a finished run (exit $rc)"; fi
demo --overwrite --epochs 2 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(epochs_of demo)" = "0 1 " ]; then
    ok "--overwrite replaces the finished run"
else bad "--overwrite (exit $rc, epochs '$(epochs_of demo)')"; fi

# a stop request mid-run: exit 75, "preempted: ..." (never "(null)"); the rerun resumes
long="--name long --epochs 1000000 --num-to-keep 2 --verbose 0"
# shellcheck disable=SC2086
mpirun --oversubscribe -np 2 -x LD_LIBRARY_PATH -x MT_STORAGE_PATH "$store/demo" $long >"$out" 2>"$err" &
pid=$!
( trap 'kill "$s" 2>/dev/null; exit 0' TERM; sleep "$limit" & s=$!; wait "$s"; kill -9 "$pid" ) >/dev/null 2>&1 &
guard=$!
for _ in $(seq 1 1200); do
    [ "$(epochs_of long | wc -w)" -ge 3 ] && break
    sleep 0.05
done
kill -USR1 "$pid"
wait "$pid"
rc=$?
kill "$guard" 2>/dev/null
stored=$(epochs_of long | awk '{ print $NF }')
if [ $rc -eq 75 ] && [ "$(status long)" = preempted ] && [ -n "$stored" ] \
    && grep -q "demo: preempted: a stop request (SIGTERM or SIGUSR1) ended the run after a checkpoint" "$err" \
    && no_null; then
    ok "SIGUSR1 to mpirun: exit 75, status preempted, the demo prints why (after epoch $stored)"
else bad "preemption (exit $rc, status '$(status long)', stored epoch '$stored')"; cat "$err"; fi
next=$((${stored:-0} + 1)); total=$((next + 2))
demo --name long --epochs $total --verbose 0 >"$out" 2>"$err"
rc=$?
want=$(seq 0 $((total - 1)) | tr '\n' ' ')
if [ $rc -eq 0 ] && grep -q "^demo: resuming at epoch $next$" "$out" && [ "$(status long)" = finished ] \
    && [ "$(epochs_of long)" = "$want" ]; then
    ok "the rerun resumes at epoch $next (after the stored $stored) and finishes; result.json has each epoch once"
else bad "resume after preemption (exit $rc, epochs '$(epochs_of long)', want '$want')"; fi

finish
