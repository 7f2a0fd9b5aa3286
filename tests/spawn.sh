#!/bin/sh
# Spawn mode (trainer --num-workers N, no launcher) when a process dies:
#  - a spawned rank killed (SIGKILL): the job ends by itself with status 77 (MT_EXIT_LOST),
#    naming the dead rank and its host, long before the stall timeout (600 s, the default,
#    is left in place), no process of the job is left, and the run resumes afterwards;
#  - the parent (rank 0) killed: no spawned rank or helper daemon is left, and the run
#    resumes afterwards.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
skip_in_quick_check
b="${top_builddir:-.}"
scratch spawn
fmnist_h5
limit=$((60 * ${MT_TEST_TIMEOUT_SCALE:-1}))
common="--data $data --storage-path $store/runs --steps-per-epoch 20"
# a collective that hangs (see README) ends with 76 well inside the test's timeout
resume="--stall-warn 10 --stall-timeout 40"

# every descendant of pid $1: the parent rank, its helper daemon (orted), the spawned ranks
job_pids() {
    for p in $(pgrep -P "$1"); do echo "$p"; job_pids "$p"; done
}
alive() { [ -d "/proc/$1" ] && ! grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null; }
# waits up to $limit seconds until none of the pids $* runs; prints those left
left_over() {
    left=$*
    for _ in $(seq 1 $((limit * 10))); do
        left=""
        for p in "$@"; do alive "$p" && left="$left $p"; done
        [ -z "$left" ] && break
        sleep 0.1
    done
    echo "$left"
}
await_checkpoint() {
    for _ in $(seq 1 $((limit * 20))); do
        [ -d "$store/runs/$1/checkpoint_000001" ] && return 0
        sleep 0.05
    done
    return 1
}

for victim in child parent; do
    name=kill-$victim
    timeout -k 5 $((limit * 2)) "$b/tools/trainer" --num-workers 2 $common --epochs 500 \
        --name $name >"$out" 2>"$err" &
    job=$!
    await_checkpoint $name
    parent=$(pgrep -P $job)
    pids=$(job_pids $job)
    ranks=$(for p in $pids; do [ "$(cat /proc/$p/comm 2>/dev/null)" = trainer ] && echo "$p"; done)
    if [ $victim = child ]; then
        target=$(for p in $ranks; do [ "$p" != "$parent" ] && echo "$p"; done | tail -n 1)
    else
        target=$parent
    fi
    [ -n "$target" ] && kill -9 "$target"
    wait $job
    rc=$?
    # shellcheck disable=SC2086
    left=$(left_over $pids)
    if [ $victim = child ]; then
        if [ -n "$target" ] && [ $rc -eq 77 ] && [ -z "$left" ] \
            && grep -q "mpitrain: rank [0-9] (host [^)]*): rank 1 (host [^,]*, pid $target) has died; .*ending it with status 77" "$err"; then
            ok "spawn mode: a spawned rank killed ends the job with 77, naming it, nothing left"
        else bad "spawn mode: spawned rank killed (pid '$target', exit $rc, want 77; left:$left)"; fi
    else
        if [ -n "$target" ] && [ -z "$left" ]; then
            ok "spawn mode: the parent killed leaves no spawned rank or daemon (exit $rc)"
        else bad "spawn mode: parent killed (pid '$target', exit $rc; left:$left)"; fi
    fi
    # shellcheck disable=SC2086
    [ -n "$left" ] && kill -9 $left 2>/dev/null
    timeout -k 5 $((limit * 2)) "$b/tools/trainer" --num-workers 2 $common $resume --epochs 6 \
        --name $name >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 0 ] && grep -q "resumed from .*checkpoint_00000" "$out"; then
        ok "spawn mode: the run resumes after the $victim was killed"
    else bad "spawn mode: resume after the $victim was killed (exit $rc)"; fi
done
finish
