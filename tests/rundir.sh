#!/bin/sh
# The run directory end to end (ckpt_probe report, 2 ranks):
#  - ownership: a second job with the same storage_path and name, started while the first
#    holds it (paused inside a commit), is refused on every rank naming the holder, and
#    the first completes with all its rows; after SIGKILL of the holder the lock is free
#    and a rerun resumes and completes;
#  - a finished run keeps no error.txt of an earlier attempt, and no .tmp files;
#  - torn tails: result.json and progress.csv cut mid-line by a crash are repaired before
#    the next append; rows written after the last checkpoint are superseded, not repeated.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
probe="$b/tests/ckpt_probe"
check="$b/tests/jsonl_check"
scratch rundir
export MT_STORAGE_PATH="$store"

# iterations in result.json, one line: "1 2 3 ..."
iters() { sed -n 's/.*"training_iteration":\([0-9]*\).*/\1/p' "$store/$1/result.json" | tr '\n' ' '; }
# training_iteration column of progress.csv (header names it), one line
csv_iters() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "training_iteration") c = i; next }
             { printf "%s ", $c }' "$store/$1/progress.csv"
}
status_of() { sed -n 's/.*"status": *"\([a-z]*\)".*/\1/p' "$store/$1/run.json"; }
upto() { seq 1 "$1" | tr '\n' ' '; }
no_tmp() { [ -z "$(find "$store/$1" -name '*.tmp')" ]; }
# pid of the process that paused in a commit (from its stderr), waiting for it
paused_pid() {
    for _ in $(seq 1 600); do
        p=$(sed -n 's/.*test hook: pid \([0-9]*\) pausing.*/\1/p' "$1" | tail -n 1)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.1
    done
    return 1
}

# --- a second job while the first holds the run
name=owned
rm -f "$store/go"
: >"$store/err1" # emptied before the job starts: no pid of an earlier job is read
MT_TEST_COMMIT_PAUSE=600 MT_TEST_COMMIT_PAUSE_AT=2 MT_TEST_COMMIT_RESUME_FILE="$store/go" \
    "$run" 2 -x MT_TEST_COMMIT_PAUSE -x MT_TEST_COMMIT_PAUSE_AT -x MT_TEST_COMMIT_RESUME_FILE \
    "$probe" report "$name" 10 >"$store/out1" 2>"$store/err1" &
first=$!
holder=$(paused_pid "$store/err1")
"$run" 2 "$probe" report "$name" 10 >"$out" 2>"$err"
rc=$?
refused=$(grep -c "ckpt_probe: rank [01]: .*/$name is in use by another job (pid $holder on host " "$err")
attempts=$(sed -n 's/.*"attempts": *\([0-9]*\).*/\1/p' "$store/$name/run.json")
if [ $rc -ne 0 ] && [ -n "$holder" ] && [ "$refused" -eq 2 ] && ! grep -q "rank 0 failed" "$err" \
    && [ "$attempts" = 1 ]; then
    ok "a second job with the same name is refused on every rank, naming the holder (pid $holder)"
else bad "second job while the first holds the run (exit $rc, holder '$holder', $refused ranks refused, attempts '$attempts')"; fi
touch "$store/go"
wait $first
rc=$?
if [ $rc -eq 0 ] && [ "$(iters $name)" = "$(upto 10)" ] && [ "$(csv_iters $name)" = "$(upto 10)" ] \
    && [ "$(status_of $name)" = finished ] && [ ! -e "$store/$name/error.txt" ] && no_tmp $name; then
    ok "the holder completes with all its rows (1..10 in result.json and progress.csv), no .tmp"
else bad "the holder after the refusal (exit $rc, rows '$(iters $name)', csv '$(csv_iters $name)')"; cat "$store/err1"; fi

# --- SIGKILL of the holder: the lock goes with it, a rerun resumes
name=killed
: >"$store/err1"
MT_TEST_COMMIT_PAUSE=600 MT_TEST_COMMIT_PAUSE_AT=2 \
    "$run" 2 -x MT_TEST_COMMIT_PAUSE -x MT_TEST_COMMIT_PAUSE_AT \
    "$probe" report "$name" 10 >"$store/out1" 2>"$store/err1" &
first=$!
holder=$(paused_pid "$store/err1")
[ -n "$holder" ] && kill -9 "$holder"
wait $first
"$run" 2 "$probe" report "$name" 10 >"$out" 2>"$err"
rc=$?
failures=$(sed -n 's/.*"failures": *\([0-9]*\).*/\1/p' "$store/$name/run.json")
if [ $rc -eq 0 ] && [ -n "$holder" ] && [ "$(iters $name)" = "$(upto 10)" ] \
    && [ "$(csv_iters $name)" = "$(upto 10)" ] && [ "$(status_of $name)" = finished ] \
    && [ "$failures" = 1 ] && no_tmp $name; then
    ok "after SIGKILL of the holder the run is free: the rerun resumes and completes (rows 1..10 once)"
else bad "rerun after SIGKILL of the holder (exit $rc, rows '$(iters $name)', failures '$failures')"; fi

# --- an earlier attempt's error.txt does not outlive the run's success
name=errtxt
MT_PROBE_FAIL_AT=4 "$run" 2 -x MT_PROBE_FAIL_AT "$probe" report "$name" 6 >"$out" 2>"$err"
had=$([ -e "$store/$name/error.txt" ] && echo yes)
"$run" 2 "$probe" report "$name" 6 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$had" = yes ] && [ ! -e "$store/$name/error.txt" ] && [ "$(status_of $name)" = finished ]; then
    ok "a run that failed once and then finished keeps no error.txt"
else bad "stale error.txt (exit $rc, error.txt after the failure: '$had')"; ls -la "$store/$name"; fi

# --- a checkpoint folder run.json never recorded (its commit failed after the rename) is
# in the way of the next commit of that number: removed at start
name=orphan
MT_PROBE_FAIL_AT=2 "$run" 2 -x MT_PROBE_FAIL_AT "$probe" report "$name" 4 >"$out" 2>"$err"
mkdir -p "$store/$name/checkpoint_000002" && echo junk >"$store/$name/checkpoint_000002/checkpoint.h5"
"$run" 2 "$probe" report "$name" 4 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(iters $name)" = "$(upto 4)" ] && [ "$(status_of $name)" = finished ] \
    && [ "$(head -c 4 "$store/$name/checkpoint_000002/checkpoint.h5")" != junk ]; then
    ok "an unrecorded checkpoint folder in the way of the next commit is removed at start"
else bad "unrecorded checkpoint folder (exit $rc, rows '$(iters $name)')"; fi

# --- torn tails: a crash cut the last line of result.json and progress.csv
name=torn
MT_PROBE_FAIL_AT=6 "$run" 2 -x MT_PROBE_FAIL_AT "$probe" report "$name" 10 >"$out" 2>"$err"
f="$store/$name/result.json"
head -c $(($(wc -c <"$f") - 9)) "$f" >"$f.cut" && mv "$f.cut" "$f"
f="$store/$name/progress.csv"
head -c $(($(wc -c <"$f") - 5)) "$f" >"$f.cut" && mv "$f.cut" "$f"
sed -i 's/"status": *"failed"/"status": "running"/' "$store/$name/run.json" # as if it crashed
"$run" 2 "$probe" report "$name" 10 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(iters $name)" = "$(upto 10)" ] && [ "$(csv_iters $name)" = "$(upto 10)" ] \
    && "$check" "$store/$name/result.json" >/dev/null 2>&1 && no_tmp $name; then
    ok "torn last lines of result.json and progress.csv are cut: rows 1..10 once in both"
else bad "torn tails (exit $rc, rows '$(iters $name)', csv '$(csv_iters $name)')"; cat "$store/$name/result.json"; fi

# --- rows after the last checkpoint (checkpoint every 3rd report, crash after report 8):
# the resume restarts at iteration 7 (after checkpoint k=5); rows 7, 8 move aside and are
# written again, each once; run.json agrees with the last row
name=ahead
MT_PROBE_CKPT_EVERY=3 MT_PROBE_FAIL_AT=8 "$run" 2 -x MT_PROBE_CKPT_EVERY -x MT_PROBE_FAIL_AT \
    "$probe" report "$name" 10 >"$out" 2>"$err"
before=$(iters $name)
MT_PROBE_CKPT_EVERY=3 "$run" 2 -x MT_PROBE_CKPT_EVERY "$probe" report "$name" 10 >"$out" 2>"$err"
rc=$?
last=$(sed -n 's/^  "training_iteration": *\([0-9]*\).*/\1/p' "$store/$name/run.json")
moved=$(sed -n 's/.*"training_iteration":\([0-9]*\).*/\1/p' "$store/$name/result.superseded.json" 2>/dev/null | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$before" = "$(upto 8)" ] && [ "$(iters $name)" = "$(upto 10)" ] \
    && [ "$(csv_iters $name)" = "$(upto 10)" ] && [ "$last" = 10 ] && [ "$moved" = "7 8 " ]; then
    ok "rows after the last checkpoint: superseded (7 8), redone once; result.json, progress.csv and run.json agree"
else bad "rows after the last checkpoint (exit $rc, before '$before', rows '$(iters $name)', moved '$moved', run.json '$last')"; fi

finish
