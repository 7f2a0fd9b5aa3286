#!/bin/sh
# Fault injection end to end, at 2 and 4 ranks, with the example trainer:
#  - a rank fails in epoch k: the retry resumes and the final metrics equal an
#    uninterrupted run with the same seed;
#  - SIGKILL of a rank (rank 0, paused inside a checkpoint commit) under mpitrain-run: the
#    job reruns, resumes from the checkpoint before and completes, no committed checkpoint
#    lost, none half-written left;
#  - SIGTERM mid-run: a checkpoint, the preempted status (75), and a rerun resumes and
#    completes two more epochs; SIGUSR1 to mpirun itself (no supervisor) likewise;
#  - max_failures exhausted: the error in error.txt and a non-zero exit.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
scratch fault
fmnist_h5
common="--data $data --storage-path $store/runs --steps-per-epoch 30 --epochs 4"
# the metrics of the last report that do not depend on timing
last_line() { tail -n 1 "$store/runs/$1/result.json" | tr ',' '\n' | grep -E '"(epoch|train_loss|test_acc|lr|training_iteration)":' | tr '\n' ' '; }
limit=$((240 * ${MT_TEST_TIMEOUT_SCALE:-1}))

# make check: 2 ranks (SIGTERM); the full tier: 4 ranks (SIGUSR1) as well
nps="2 4"
tier full || nps=2
for np in $nps; do
    "$run" "$np" "$b/tools/trainer" $common --name clean-$np >"$out" 2>"$err"
    "$run" "$np" "$b/tools/trainer" $common --name retry-$np --max-failures 1 --fail-rank 1 \
        --fail-epoch 2 >"$out" 2>"$err"
    rc=$?
    a=$(last_line clean-$np); r=$(last_line retry-$np)
    if [ $rc -eq 0 ] && grep -q "attempt 0 failed: rank 1: " "$err" && [ -n "$a" ] && [ "$a" = "$r" ]; then
        ok "$np ranks: rank 1 fails in epoch 2, the retry resumes and ends with the same metrics"
    else bad "$np ranks: retry after a failure (exit $rc)"; echo "  clean: $a"; echo "  retry: $r"; fi

    # SIGKILL of rank 0 while it is paused inside the commit of checkpoint 1 (the job waits
    # for the test there, three epochs before the end); the rerun does not pause
    name=kill-$np
    go="$store/go.$name"
    : >"$err" # emptied before the job starts: the pid read is this job's
    MT_TEST_COMMIT_PAUSE=$limit MT_TEST_COMMIT_PAUSE_AT=1 MT_TEST_COMMIT_RESUME_FILE="$go" \
        timeout -k 5 $limit "$b/tools/mpitrain-run" --max-failures 2 -- mpirun --oversubscribe \
        -np "$np" -x MT_TEST_COMMIT_PAUSE -x MT_TEST_COMMIT_PAUSE_AT -x MT_TEST_COMMIT_RESUME_FILE \
        "$b/tools/trainer" $common --name $name >"$out" 2>"$err" &
    sup=$!
    victim=""
    while kill -0 $sup 2>/dev/null && [ -z "$victim" ]; do
        victim=$(sed -n 's/.*test hook: pid \([0-9]*\) pausing.*/\1/p' "$err" | head -n 1)
        [ -z "$victim" ] && sleep 0.05
    done
    [ -n "$victim" ] && kill -9 "$victim"
    : >"$go"
    wait $sup
    rc=$?
    status=$(sed -n 's/.*"status": *"\([a-z]*\)".*/\1/p' "$store/runs/$name/run.json")
    its=$(sed -n 's/.*"training_iteration": *\([0-9]*\).*/\1/p' "$store/runs/$name/result.json" | tr '\n' ' ')
    if [ $rc -eq 0 ] && [ -n "$victim" ] && grep -q "rerunning" "$err" && [ "$status" = finished ] \
        && [ "$its" = "1 2 3 4 " ] && [ "$(grep -c "resumed from .*/checkpoint_000000 " "$out")" -eq 1 ] \
        && [ -d "$store/runs/$name/checkpoint_000003" ] && ! ls -d "$store/runs/$name"/.checkpoint_* >/dev/null 2>&1; then
        ok "$np ranks: SIGKILL of rank 0 inside a commit under mpitrain-run: rerun, resumed from checkpoint 0, finished (iterations $its)"
    else bad "$np ranks: SIGKILL under mpitrain-run (exit $rc, victim '$victim', status '$status', iterations '$its')"; fi

    # SIGTERM (2 ranks) or SIGUSR1 (4 ranks) to the supervisor mid-run: the job is asked to
    # stop; it checkpoints, exits 75, and a rerun completes
    sig=TERM; [ "$np" -eq 4 ] && sig=USR1
    name=term-$np
    "$b/tools/mpitrain-run" -- mpirun --oversubscribe -np "$np" "$b/tools/trainer" $common \
        --epochs 60 --name $name >"$out" 2>"$err" &
    sup=$!
    for _ in $(seq 1 600); do
        [ -d "$store/runs/$name/checkpoint_000000" ] && break
        sleep 0.05
    done
    kill -$sig $sup
    wait $sup
    rc=$?
    status=$(sed -n 's/.*"status": *"\([a-z]*\)".*/\1/p' "$store/runs/$name/run.json")
    # the rerun resumes and completes two more epochs (not the 60, which only keep the first
    # run going until the signal)
    done_its=$(sed -n 's/.*"training_iteration": *\([0-9]*\).*/\1/p' "$store/runs/$name/run.json" \
        | head -n 1)
    "$run" "$np" "$b/tools/trainer" $common --epochs $((${done_its:-0} + 2)) --steps-per-epoch 1 \
        --name $name >"$out" 2>>"$err"
    rc2=$?
    if [ $rc -eq 75 ] && [ "$status" = preempted ] && [ $rc2 -eq 0 ] && grep -q "resumed from" "$out" \
        && [ "$(grep -c . "$store/runs/$name/result.json")" -eq $((${done_its:-0} + 2)) ]; then
        ok "$np ranks: SIG$sig to mpitrain-run mid-run: checkpoint, exit 75 (preempted), the rerun resumes and completes"
    else bad "$np ranks: preemption (exit $rc, status '$status', rerun $rc2)"; fi
done

# what docs/guide.md says to send without a supervisor: SIGUSR1 to mpirun itself (what
# `timeout --preserve-status -s USR1` sends); mpirun forwards it to the ranks and exits with
# their status, 75, and with -q Open MPI prints no notice for that expected exit
name=usr1-mpirun
mpirun -q --oversubscribe -np 2 "$b/tools/trainer" $common --epochs 60 --name $name >"$out" 2>"$err" &
mpi=$!
for _ in $(seq 1 600); do
    [ -d "$store/runs/$name/checkpoint_000000" ] && break
    sleep 0.05
done
kill -USR1 $mpi
wait $mpi
rc=$?
status=$(sed -n 's/.*"status": *"\([a-z]*\)".*/\1/p' "$store/runs/$name/run.json")
if [ $rc -eq 75 ] && [ "$status" = preempted ] && ! grep -q "non-zero" "$out" "$err"; then
    ok "SIGUSR1 to mpirun (-q): checkpoint, exit 75, run.json preempted, no Open MPI notice"
else bad "SIGUSR1 to mpirun (exit $rc, status '$status')"; cat "$err"; fi

# retries exhausted: the error, error.txt, a non-zero exit
if exits 1 "$run" 2 "$b/tools/trainer" $common --name exhausted --max-failures 0 --fail-rank 1 \
    --fail-epoch 1 && grep -q "rank 1 failed" "$store/runs/exhausted/error.txt" \
    && grep -q "trainer: failed: rank 1 failed" "$err"; then
    ok "max_failures exhausted: error.txt names the rank, the program exits 1"
else bad "max_failures exhausted (exit $rc)"; fi

finish
