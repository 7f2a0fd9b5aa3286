#!/bin/sh
# Asynchronous checkpoint commits (--checkpoint-async, MT_CHECKPOINT_ASYNC) end to end, at
# 2 ranks, each job held by the test hook inside a commit's thread until the test acts:
#  - SIGKILL of rank 0 while its thread is inside the commit of checkpoint 1 (the training
#    function has returned; the end of fit waits for the commit): nothing committed is
#    lost, checkpoint_000000 stays the latest and restores, no checkpoint_000001;
#  - SIGTERM to mpitrain-run while the commit of checkpoint 1 is held and training goes
#    on: the job waits for it, commits the checkpoint that ends the run and exits 75
#    (preempted) with both committed; the rerun resumes from the last and completes;
#  - MT_CHECKPOINT_ASYNC=1 with a full training run: the same metrics as synchronous
#    commits, every checkpoint committed.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
probe="$b/tests/ckpt_probe"
scratch async
fmnist_h5
limit=$((240 * ${MT_TEST_TIMEOUT_SCALE:-1}))
pid_of_pause() { sed -n 's/.*test hook: pid \([0-9]*\) pausing.*/\1/p' "$err" | head -n 1; }

# SIGKILL of rank 0 inside the asynchronous commit of the second checkpoint
name=crash
: >"$err" # emptied before the job starts: the pid read is this job's
MT_STORAGE_PATH="$store" MT_CHECKPOINT_ASYNC=1 MT_TEST_COMMIT_PAUSE=$limit MT_TEST_COMMIT_PAUSE_AT=1 \
    "$run" 2 -x MT_STORAGE_PATH -x MT_CHECKPOINT_ASYNC -x MT_TEST_COMMIT_PAUSE \
    -x MT_TEST_COMMIT_PAUSE_AT "$probe" twice "$name" 100 >"$out" 2>"$err" &
job=$!
pid=""
while kill -0 $job 2>/dev/null && [ -z "$pid" ]; do
    pid=$(pid_of_pause)
    [ -z "$pid" ] && sleep 0.05
done
[ -n "$pid" ] && kill -9 "$pid"
wait $job
latest=$(sed -n 's/.*"latest": *"\([a-z_0-9]*\)".*/\1/p' "$store/$name/run.json")
if [ -n "$pid" ] && [ -d "$store/$name/checkpoint_000000" ] && [ ! -d "$store/$name/checkpoint_000001" ] \
    && [ "$latest" = checkpoint_000000 ] && grep -q '"async_commit": true' "$store/$name/params.json"; then
    ok "SIGKILL of rank 0 inside an asynchronous commit: checkpoint_000000 kept as the latest, no checkpoint_000001"
else bad "state after SIGKILL in an asynchronous commit (pid '$pid', latest '$latest')"; ls -la "$store/$name"; fi
MT_STORAGE_PATH="$store" "$run" 2 -x MT_STORAGE_PATH "$probe" load "$name" 100 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c 'checkpoint_000000: ok$' "$out")" -eq 2 ] \
    && ! ls -d "$store/$name"/.checkpoint_*.tmp >/dev/null 2>&1; then
    ok "the rerun restores every rank's rows from checkpoint_000000; the half-written one is removed"
else bad "resume after SIGKILL in an asynchronous commit (exit $rc)"; cat "$out" "$err"; fi

# SIGTERM while the asynchronous commit of checkpoint 1 is held
common="--data $data --storage-path $store/runs --steps-per-epoch 30 --checkpoint-async"
name=term
go="$store/go.$name"
: >"$err"
MT_TEST_COMMIT_PAUSE=$limit MT_TEST_COMMIT_PAUSE_AT=1 MT_TEST_COMMIT_RESUME_FILE="$go" \
    "$b/tools/mpitrain-run" -- mpirun --oversubscribe -np 2 \
    -x MT_TEST_COMMIT_PAUSE -x MT_TEST_COMMIT_PAUSE_AT -x MT_TEST_COMMIT_RESUME_FILE \
    "$b/tools/trainer" $common --epochs 60 --name $name >"$out" 2>"$err" &
sup=$!
pid=""
while kill -0 $sup 2>/dev/null && [ -z "$pid" ]; do
    pid=$(pid_of_pause)
    [ -z "$pid" ] && sleep 0.05
done
held=$([ -d "$store/runs/$name/checkpoint_000001" ] && echo published || echo held)
kill -TERM $sup
: >"$go"
wait $sup
rc=$?
run_json="$store/runs/$name/run.json"
status=$(sed -n 's/.*"status": *"\([a-z]*\)".*/\1/p' "$run_json")
done_its=$(sed -n 's/.*"training_iteration": *\([0-9]*\).*/\1/p' "$run_json" | head -n 1)
latest=$(sed -n 's/.*"latest": *"checkpoint_\([0-9]*\)".*/\1/p' "$run_json")
if [ $rc -eq 75 ] && [ -n "$pid" ] && [ "$held" = held ] && [ "$status" = preempted ] \
    && grep -q '"checkpoint_000001"' "$run_json" && [ -n "$latest" ] && [ "$latest" -ge 2 ]; then
    ok "SIGTERM while an asynchronous commit is held: it is committed, then the stop's checkpoint, exit 75"
else bad "SIGTERM during an asynchronous commit (exit $rc, held '$held', status '$status', latest '$latest')"; tail -5 "$err"; fi
"$run" 2 "$b/tools/trainer" $common --epochs $((${done_its:-0} + 2)) --steps-per-epoch 1 \
    --name $name >"$out" 2>>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "resumed from .*/checkpoint_0*$latest " "$out"; then
    ok "the rerun resumes from the stop's checkpoint and completes"
else bad "rerun after SIGTERM (exit $rc)"; tail -5 "$out"; fi

# a whole run with MT_CHECKPOINT_ASYNC=1 ends with the metrics of synchronous commits
last_line() { tail -n 1 "$store/runs/$1/result.json" | tr ',' '\n' | grep -E '"(epoch|train_loss|test_acc|training_iteration)":' | tr '\n' ' '; }
common="--data $data --storage-path $store/runs --steps-per-epoch 20 --epochs 3"
"$run" 2 "$b/tools/trainer" $common --name sync >"$out" 2>"$err"
MT_CHECKPOINT_ASYNC=1 "$run" 2 -x MT_CHECKPOINT_ASYNC "$b/tools/trainer" $common --name async >"$out" 2>>"$err"
rc=$?
s=$(last_line sync); a=$(last_line async)
if [ $rc -eq 0 ] && [ -n "$a" ] && [ "$s" = "$a" ] && [ -d "$store/runs/async/checkpoint_000002" ] \
    && grep -q '"async_commit": true' "$store/runs/async/params.json"; then
    ok "MT_CHECKPOINT_ASYNC=1: the same final metrics as synchronous commits, every checkpoint committed"
else bad "a run with MT_CHECKPOINT_ASYNC=1 (exit $rc)"; echo "  sync:  $s"; echo "  async: $a"; fi

finish
