#!/bin/sh
# Spawn mode (trainer --num-workers N, no launcher) when a process dies:
#  - a spawned rank killed (SIGKILL): the job ends by itself with status 77 (MT_EXIT_LOST),
#    naming the dead rank and its host, long before the stall timeout (600 s, the default,
#    is left in place), no process of the job is left, and the run resumes afterwards;
#  - the parent (rank 0) killed: no spawned rank or helper daemon is left, and the run
#    resumes afterwards;
#  - a rank that dies where no fit's stall watchdog runs (MT_TEST_FAIL_AT=die-SITE:rank makes
#    it kill itself there): in mt_init before MPI_Init, before the merge, at the start and the
#    end of fit, in mt_finalize before and after MPI_Comm_disconnect; at 2 and 3 workers the
#    job ends with 77 naming the dead rank, and nothing is left (these hung until the test's
#    timeout before spawn mode's lifeline);
#  - the parent dying in mt_finalize leaves nothing; a spawned rank that hangs before it
#    joins the job, or any rank stopped in mt_finalize once every rank is there, ends it
#    with 76 at the stall timeout instead of leaving the others waiting;
#  - 3 workers with small fusion buckets (the fusion's thread reducing while the caller
#    computes, many shared-memory barriers) finish, with mpirun -np 3's numbers;
#  - "nothing left" in each case counts the job's shared memory too: no segment in
#    /dev/shm named by one of the job's pids (only the test's own jobs are judged, never
#    what other jobs on the machine left there).
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
scratch spawn
fmnist_h5
limit=$((60 * ${MT_TEST_TIMEOUT_SCALE:-1}))
common="--data $data --storage-path $store/runs --steps-per-epoch 20"
# a collective that hangs (see README) ends with 76 well inside the test's timeout
resume="--stall-warn 10 --stall-timeout 40"

# make check: one case of each behaviour (a rank dying in fit at 2 workers, a spawned rank
# killed and the run resumed); the full tier: every moment at 2 and 3 workers, the
# finalize and joining stalls, fusion at 3 workers, the parent killed
full=1
tier full || full=""
last_field() { # last_field RUN KEY: KEY's value in the last line of result.json
    tail -n 1 "$store/runs/$1/result.json" | tr ',{}' '\n\n\n' | sed -n "s/^ *\"$2\": *//p"
}
# each job runs through run_seen (tests/lib.sh): its processes (the parent rank, its
# helper daemon (orted), the spawned ranks) are the pids whose shared memory the test
# judges, and no other
[ -n "$full" ] && {
MT_FUSION_BYTES=65536 "${top_srcdir:-.}/tests/mpirun.sh" 3 "$b/tools/trainer" $common --epochs 2 \
    --name fused-mpirun >"$out" 2>"$err"
run_seen $((limit * 2)) env MT_FUSION_BYTES=65536 "$b/tools/trainer" --num-workers 3 $common \
    $resume --epochs 2 --name fused-spawn
# shellcheck disable=SC2086
shm=$(shm_of $seen)
l1=$(last_field fused-mpirun train_loss); l2=$(last_field fused-spawn train_loss)
if [ $rc -eq 0 ] && [ -n "$l1" ] && [ "$l1" = "$l2" ] && [ -z "$shm" ]; then
    ok "spawn mode, 3 workers, 64 KiB fusion buckets: finishes with mpirun -np 3's train_loss ($l2), no shared memory left"
else bad "spawn mode, 3 workers, 64 KiB buckets (exit $rc, loss '$l1' vs '$l2'; left: $shm)"; fi
}

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

# run_dying NP SITE NAME [ARGS...]: the job with MT_TEST_FAIL_AT=SITE (run_seen); then
# $left: its processes still running, and $shm: the shared memory any of them left (a
# job that ends by itself removes its own; the next job's start would remove what a
# killed one left, so each job is judged before the next starts)
run_dying() {
    np=$1; site=$2; name=$3; shift 3
    run_seen "$limit" env MT_TEST_FAIL_AT="$site" "$b/tools/trainer" --num-workers "$np" \
        $common --epochs 1 --name "$name" "$@"
    # shellcheck disable=SC2086
    left=$(left_over $seen)
    # shellcheck disable=SC2086
    shm=$(shm_of $seen | tr '\n' ' ')
}
n=0
nps="2 3" moments="init merge fit-begin fit-end finalize disconnected" victims="child parent"
[ -n "$full" ] || { nps=2 moments=fit-begin victims=child; }
for np in $nps; do
    for moment in $moments; do
        n=$((n + 1))
        victim=$((1 + n % (np - 1))) # at 3 workers, rank 1 or rank 2 by turns
        run_dying $np die-$moment:$victim die-$moment-$np
        if [ $rc -eq 77 ] && [ -z "$left$shm" ] \
            && grep -q "has died; the job cannot go on without it: ending it with status 77" "$err"; then
            ok "spawn mode, $np workers: rank $victim dying at $moment ends the job with 77, nothing left"
        else bad "spawn mode, $np workers: rank $victim dying at $moment (exit $rc, want 77; left:$left $shm)"; fi
        # shellcheck disable=SC2086
        [ -n "$left" ] && kill -9 $left 2>/dev/null
    done
done
[ -n "$full" ] && for np in 2 3; do
    run_dying $np die-finalize:0 parent-finalize-$np
    if [ $rc -eq 137 ] && [ -z "$left$shm" ]; then
        ok "spawn mode, $np workers: the parent dying in mt_finalize leaves nothing"
    else bad "spawn mode, $np workers: parent dying in mt_finalize (exit $rc; left:$left $shm)"; fi
    # shellcheck disable=SC2086
    [ -n "$left" ] && kill -9 $left 2>/dev/null
done
# a rank stopped in mt_finalize once every rank is there: 76 at the stall timeout; a
# stopped parent is killed by the rank that ends the job. The stall timeout is also the
# spawned ranks' time to join: 12 s, as 8 s was once too short for 2 spawned ranks to
# start on a loaded 2-core machine ("1 of them had reached mt_init")
[ -n "$full" ] && for victim in 1 0; do
    run_dying 3 stop-finalize:$victim stopped-finalize-$victim --stall-warn 2 --stall-timeout 12
    want=76; [ $victim -eq 0 ] && want=137
    if [ $rc -eq $want ] && [ -z "$left$shm" ] && grep -q "mt_finalize has waited 12 s for the other ranks" "$err"; then
        ok "spawn mode, 3 workers: rank $victim stopped in mt_finalize ends the job (exit $rc), nothing left"
    else bad "spawn mode, 3 workers: rank $victim stopped in mt_finalize (exit $rc, want $want; left:$left $shm)"; fi
    # shellcheck disable=SC2086
    [ -n "$left" ] && kill -9 $left 2>/dev/null
done
# rank 0 busy after fit for longer than the stall timeout while the others wait in
# mt_finalize: not a stall (the wait counts from when the last rank arrived)
[ -n "$full" ] && {
export MT_TEST_PAUSE_S=20
run_dying 3 slow-finalize:0 slow-finalize --stall-warn 2 --stall-timeout 12
unset MT_TEST_PAUSE_S
if [ $rc -eq 0 ] && [ -z "$left$shm" ] && ! grep -q "mt_finalize has waited" "$err"; then
    ok "spawn mode, 3 workers: rank 0 working 20 s after fit (stall timeout 12 s) while the others wait in mt_finalize: the job ends with 0"
else bad "spawn mode, 3 workers: rank 0 slow before mt_finalize (exit $rc, want 0; left:$left $shm)"; tail -n 5 "$err"; fi
# shellcheck disable=SC2086
[ -n "$left" ] && kill -9 $left 2>/dev/null
run_dying 2 stop-init:1 stopped-child --stall-warn 2 --stall-timeout 8
if [ $rc -eq 76 ] && [ -z "$left$shm" ] && grep -q "1 of the 1 spawned ranks did not join the job within 8 s (failure.stall_timeout_s; 0 of them had reached mt_init, and MPI_Comm_spawn had not returned)" "$err"; then
    ok "spawn mode: a spawned rank that hangs before it joins ends the job with 76, naming how far the spawn got, nothing left"
else bad "spawn mode: spawned rank stopped before joining (exit $rc, want 76; left:$left $shm)"; fi
# shellcheck disable=SC2086
[ -n "$left" ] && kill -9 $left 2>/dev/null
}

for victim in $victims; do
    name=kill-$victim
    timeout -k 5 $((limit * 2)) "$b/tools/trainer" --num-workers 2 $common --epochs 500 \
        --name $name >"$out" 2>"$err" &
    job=$!
    await_checkpoint $name
    parent=$(pgrep -P $job)
    pids=$(descendants $job)
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
    # shellcheck disable=SC2086
    shm=$(shm_of $pids | tr '\n' ' ')
    if [ $victim = child ]; then
        if [ -n "$target" ] && [ $rc -eq 77 ] && [ -z "$left$shm" ] \
            && grep -q "mpitrain: rank [0-9] (host [^)]*): rank 1 (host [^,]*, pid $target) has died; .*ending it with status 77" "$err"; then
            ok "spawn mode: a spawned rank killed ends the job with 77, naming it, nothing left"
        else bad "spawn mode: spawned rank killed (pid '$target', exit $rc, want 77; left:$left $shm)"; fi
    else
        if [ -n "$target" ] && [ -z "$left$shm" ]; then
            ok "spawn mode: the parent killed leaves no spawned rank or daemon (exit $rc)"
        else bad "spawn mode: parent killed (pid '$target', exit $rc; left:$left $shm)"; fi
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
