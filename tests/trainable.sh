#!/bin/sh
# Trainables end to end, with tools/trainable-example (linear regression written as
# setup/step/save/load/cleanup, no resume logic of its own), at 1 and 2 ranks and one case
# at 3:
#  - SIGKILL of one rank under mpitrain-run: the rerun resumes through load;
#  - SIGTERM to mpitrain-run (and SIGUSR1 to mpirun): a checkpoint, exit 75, the rerun
#    completes;
#  - a step error on one rank, retried inside fit from the latest checkpoint;
# each with result.json's training_iteration 1..N once each, the model's own iteration
# count (saved and loaded by the callbacks) equal to it on every row, and the final loss
# equal to an uninterrupted run's. Also: docs/guide.md's trainable example builds and runs, the
# example's --help and refusal of unknown options, and a user's OMP_NUM_THREADS given at
# launch is left alone (test_mpi_trainable's environment case at 3 ranks).
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier full
ex="$b/tools/trainable-example"
scratch trainable
limit=$((240 * ${MT_TEST_TIMEOUT_SCALE:-1}))
n=12
common="--storage-path $store/runs --iterations $n --checkpoint-frequency 1 --verbose 0"

# rows NAME: "iteration/model_iterations" of every result.json row
rows() {
    tr -d ' ' <"$store/runs/$1/result.json" | sed -n 's/^[^}]*"model_iterations":\([0-9][0-9]*\).*"training_iteration":\([0-9][0-9]*\).*/\2\/\1/p' \
        | tr '\n' ' '
}
want_rows=$(i=1; while [ $i -le $n ]; do printf '%d/%d ' $i $i; i=$((i + 1)); done)
# last NAME KEY: KEY's value in the last row
last() { tail -n 1 "$store/runs/$1/result.json" | tr ',{}' '\n\n\n' | sed -n "s/^ *\"$2\": *\([^ ]\)/\1/p" | head -n 1; }
status() { sed -n 's/.*"status": *"\([a-z]*\)".*/\1/p' "$store/runs/$1/run.json"; }
# rank_pid JOB R: the pid of rank R of the job started as process JOB (among its
# descendants only: other checkouts run the same runs on this machine)
rank_pid() {
    for p in $(descendants "$1"); do
        [ "$(cat /proc/$p/comm 2>/dev/null)" = trainable-examp ] || continue
        r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
        [ "$r" = "$2" ] && echo "$p" && return
    done
}
# paused ERR PID: waits until rank 0 of the job PID pauses inside a commit (its line in
# ERR); false if the job ends first
paused() {
    while kill -0 "$2" 2>/dev/null; do
        grep -q "test hook: pid [0-9]* pausing" "$1" && return 0
        sleep 0.05
    done
    return 1
}
# same NAME CLEAN: every iteration once, in order, the model's count equal, same final loss
same() {
    r=$(rows "$1"); l=$(last "$1" loss); c=$(last "$2" loss)
    [ "$r" = "$want_rows" ] && [ -n "$l" ] && [ "$l" = "$c" ] && [ "$(status "$1")" = finished ]
}
explain() { echo "  rows:  $(rows "$1")"; echo "  want:  $want_rows"; echo "  loss $(last "$1" loss) vs $(last "$2" loss), status $(status "$1")"; }

for np in 1 2 3; do
    "$run" "$np" "$ex" $common --name clean-$np >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 0 ] && [ "$(rows clean-$np)" = "$want_rows" ] && grep -q "trainable-example: done: $n iterations" "$out"; then
        ok "$np ranks: $n iterations, a checkpoint each, the model's count equals training_iteration"
    else bad "$np ranks: clean run (exit $rc)"; fi

    # SIGKILL of the last rank while rank 0 is paused inside the commit of checkpoint 2
    # (the job waits for the test there; 0 and 1 are committed); the rerun resumes from 1
    name=kill-$np
    go="$store/go.$name"
    : >"$err" # emptied before the job starts: the pause seen is this job's
    MT_TEST_COMMIT_PAUSE=$limit MT_TEST_COMMIT_PAUSE_AT=2 MT_TEST_COMMIT_RESUME_FILE="$go" \
        timeout -k 5 $limit "$b/tools/mpitrain-run" --max-failures 2 -- mpirun --oversubscribe -np "$np" \
        -x MT_TEST_COMMIT_PAUSE -x MT_TEST_COMMIT_PAUSE_AT -x MT_TEST_COMMIT_RESUME_FILE \
        "$ex" $common --name $name >"$out" 2>"$err" &
    sup=$!
    victim=""
    if paused "$err" $sup; then
        victim=$(rank_pid $sup $((np - 1)))
        [ -n "$victim" ] && kill -9 "$victim"
    fi
    # rank 0 goes on once the first attempt has ended: checkpoint 2 stays uncommitted
    while kill -0 $sup 2>/dev/null && ! grep -q "rerunning" "$err"; do sleep 0.05; done
    : >"$go"
    wait $sup
    rc=$?
    if [ $rc -eq 0 ] && [ -n "$victim" ] && grep -q "rerunning" "$err" \
        && [ "$(grep -c "resumed from .*/checkpoint_000001 " "$out")" -eq 1 ] && same $name clean-$np; then
        ok "$np ranks: SIGKILL of rank $((np - 1)) under mpitrain-run: rerun, load, iterations 1..$n once, same final loss"
    else bad "$np ranks: SIGKILL under mpitrain-run (exit $rc, victim '$victim')"; explain $name clean-$np; fi

    [ "$np" -eq 3 ] && break # one case at 3 ranks

    # preemption: SIGTERM to the supervisor (1 rank) or SIGUSR1 to mpirun (2 ranks), sent
    # while rank 0 is paused inside the commit of checkpoint 1 (the job waits for the test
    # there); the steps' delay then leaves the signal ten iterations to reach the ranks
    name=preempt-$np
    go="$store/go.$name"
    pause="MT_TEST_COMMIT_PAUSE=$limit MT_TEST_COMMIT_PAUSE_AT=1 MT_TEST_COMMIT_RESUME_FILE=$go"
    xs="-x MT_TEST_COMMIT_PAUSE -x MT_TEST_COMMIT_PAUSE_AT -x MT_TEST_COMMIT_RESUME_FILE"
    : >"$err"
    if [ "$np" -eq 1 ]; then
        env $pause timeout -k 5 $limit "$b/tools/mpitrain-run" -- mpirun --oversubscribe -np 1 $xs \
            "$ex" $common --step-delay-ms 150 --name $name >"$out" 2>"$err" &
        job=$!; sig=TERM; who=mpitrain-run
    else
        env $pause timeout -k 5 $limit mpirun --oversubscribe -np "$np" $xs "$ex" $common \
            --step-delay-ms 150 --name $name >"$out" 2>"$err" &
        job=$!; sig=USR1; who=mpirun
    fi
    to=""
    if paused "$err" $job; then
        to=$(for p in $(pgrep -P $job); do
            [ "$(cat /proc/$p/comm 2>/dev/null)" = $who ] && echo "$p"; done | head -n 1)
        [ -n "$to" ] && kill -$sig "$to"
    fi
    : >"$go"
    wait $job
    rc=$?
    st=$(status $name)
    "$run" "$np" "$ex" $common --name $name >"$out" 2>>"$err"
    rc2=$?
    if [ $rc -eq 75 ] && [ "$st" = preempted ] && [ $rc2 -eq 0 ] && grep -q "resumed from" "$out" \
        && same $name clean-$np; then
        ok "$np ranks: SIG$sig to $who: checkpoint, exit 75, the rerun loads it: iterations 1..$n once, same final loss"
    else bad "$np ranks: preemption (exit $rc, status '$st', rerun $rc2)"; explain $name clean-$np; fi

    # a step error on the last rank in iteration 5, retried inside fit through load
    name=retry-$np
    "$run" "$np" "$ex" $common --name $name --max-failures 1 --fail-rank $((np - 1)) \
        --fail-iteration 5 --verbose 1 >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 0 ] && grep -q "attempt 0 failed: rank $((np - 1)): trainable: step returned MT_EIO" "$err" \
        && same $name clean-$np; then
        ok "$np ranks: a step error on rank $((np - 1)) is retried from the checkpoint: iterations 1..$n once, same final loss"
    else bad "$np ranks: retry (exit $rc)"; explain $name clean-$np; fi
done

# a user's OMP_NUM_THREADS given at launch reaches the training function untouched, the
# other variables are set (the suite's environment case, at 3 ranks)
OMP_NUM_THREADS=5 "$run" 3 -x OMP_NUM_THREADS "$b/tests/test_mpi_trainable" environment >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "1 tests at 3 ranks, 0 failed" "$out"; then
    ok "3 ranks: OMP_NUM_THREADS=5 from the launch line is left alone; RANK ... MKL_NUM_THREADS set"
else bad "3 ranks: environment with a user's OMP_NUM_THREADS (exit $rc)"; fi

# usage
"$ex" --help >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "usage: mpirun -np N trainable-example" "$out" && grep -q -- "--checkpoint-frequency" "$out"; then
    ok "--help"; else bad "--help (exit $rc)"; fi
"$ex" --storage-path "$store/runs" --itterations 3 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 2 ] && grep -q "option '--itterations': unknown option" "$err" && [ ! -d "$store/runs/linear-regression" ]; then
    ok "an unknown option is refused before anything runs (exit 2)"; else bad "unknown option (exit $rc)"; fi

# docs/guide.md's trainable example, built against this build's library as a user would
awk '/^## A trainable class/ { f = 1; next } f && /^```c/ { g = 1; next } g && /^```/ { exit } g' \
    "${top_srcdir:-.}/docs/guide.md" >"$store/demo.c"
sanopts=""
[ -n "${MT_SAN_FLAGS:-}" ] && sanopts="${top_srcdir:-.}/common/sanopts.c"
# shellcheck disable=SC2086
if [ -s "$store/demo.c" ] && mpicc ${MT_SAN_FLAGS:-} -I"${top_srcdir:-.}/include" -o "$store/demo" \
    "$store/demo.c" $sanopts -L"$b/.libs" -lmpitrain >"$out" 2>"$err"; then
    LD_LIBRARY_PATH="$b/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MT_STORAGE_PATH="$store/runs" \
        "$run" 2 -x LD_LIBRARY_PATH -x MT_STORAGE_PATH "$store/demo" --verbose 0 >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 0 ] && grep -q "^demo-class: w = 3.00 after [0-9]* iterations" "$out" \
        && [ "$(status demo-class)" = finished ]; then
        ok "docs/guide.md's trainable example builds and converges at 2 ranks"
    else bad "docs/guide.md's trainable example (exit $rc)"; fi
    # the same argument checks as README's first example: --help trains nothing, a typo'd
    # flag is refused (exit 2) before a run folder exists
    LD_LIBRARY_PATH="$b/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MT_STORAGE_PATH="$store/runs" \
        "$run" 1 -x LD_LIBRARY_PATH -x MT_STORAGE_PATH "$store/demo" --name class-help --help >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 0 ] && grep -q "^usage: mpirun -np N demo-class" "$out" && grep -q -- "--num-workers" "$out" \
        && [ ! -e "$store/runs/class-help" ]; then
        ok "the trainable example's --help prints its usage and the library's options, and trains nothing"
    else bad "the trainable example's --help (exit $rc)"; fi
    LD_LIBRARY_PATH="$b/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MT_STORAGE_PATH="$store/runs" \
        "$run" 1 -x LD_LIBRARY_PATH -x MT_STORAGE_PATH "$store/demo" --name class-typo --itterations 5 >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 2 ] && grep -q "unknown option '--itterations'" "$err" && [ ! -e "$store/runs/class-typo" ]; then
        ok "the trainable example refuses an unknown flag (exit 2) before anything runs"
    else bad "the trainable example with an unknown flag (exit $rc)"; cat "$err"; fi
else bad "docs/guide.md's trainable example does not build"; fi

finish
