#!/bin/sh
# The timeline of a step (common/trace.c): a short training with --trace at 1 and 2 ranks
# writes one valid Chrome trace file per rank (tests/trace_check: format, nesting, the rank
# and host, every category); MT_TRACE=1 does the same; a run without either writes no trace
# directory; a resumed run keeps the failed attempt's trace; an unwritable trace directory
# is a warning and the run still succeeds; the tracer keeps every span of many threads
# (tests/trace_probe); mpitrain-show --timeline summarises each rank or says why it cannot.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
scratch timeline
fmnist_h5
common="--data $data --storage-path $store/runs --steps-per-epoch 3 --epochs 2 --checkpoint-frequency 1"
cats="compute data collective agree fusion_wait report checkpoint"

check_ranks() { # check_ranks RUN NP CATEGORY...: every rank's file passes trace_check
    d="$store/runs/$1/trace"; np=$2; shift 2
    [ "$(ls "$d" | grep -c '^rank_')" -eq "$np" ] || { echo "expected $np rank files in $d: $(ls "$d")" >>"$err"; return 1; }
    r=0
    while [ $r -lt "$np" ]; do
        "$b/tests/trace_check" "$d/rank_$r.json" $r "$@" >>"$out" 2>>"$err" || return 1
        r=$((r + 1))
    done
}

for np in 1 2; do
    want="$cats"; [ "$np" -gt 1 ] && want="$cats fusion" # one rank sums no bucket
    "$run" $np "$b/tools/trainer" $common --name traced-$np --trace >"$out" 2>"$err"
    rc=$?
    # shellcheck disable=SC2086
    if [ $rc -eq 0 ] && check_ranks traced-$np $np $want; then
        ok "--trace at $np rank(s): one valid trace per rank with every category ($want)"
    else bad "--trace at $np rank(s) (exit $rc)"; fi
    # the job's one file: every rank's events, each rank its own pid, as many as the rank
    # files hold (trace_check validates one rank's events at a time, so it reads the ranks
    # out of the merged file)
    j="$store/runs/traced-$np/trace/job.json"
    merged=0; r=0
    while [ $r -lt "$np" ]; do
        n_rank=$(grep -o '"pid":[0-9]*' "$store/runs/traced-$np/trace/rank_$r.json" | grep -c "\"pid\":$r\$")
        n_job=$(grep -o '"pid":[0-9]*' "$j" 2>/dev/null | grep -c "\"pid\":$r\$")
        [ "$n_rank" -gt 0 ] && [ "$n_rank" = "$n_job" ] && merged=$((merged + 1))
        r=$((r + 1))
    done
    if [ $merged -eq "$np" ] && /usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$j" 2>>"$err"; then
        ok "--trace at $np rank(s): trace/job.json holds every rank's events in one valid file"
    else bad "--trace at $np rank(s): trace/job.json ($merged of $np ranks merged)"; fi

    "$b/tools/mpitrain-show" "$store/runs/traced-$np" --timeline >"$out" 2>"$err"
    rc=$?
    r=0; each=0
    while [ $r -lt $np ]; do
        grep -q "^rank $r (.*): .* s on the training thread, 2 reports" "$out" && each=$((each + 1))
        r=$((r + 1))
    done
    if [ $rc -eq 0 ] && [ $each -eq $np ] && [ "$(grep -c '^  compute ' "$out")" -eq $np ] \
        && [ "$(grep -c '^  agreements ' "$out")" -eq $np ] && grep -q "^  checkpoint commit " "$out"; then
        ok "mpitrain-show --timeline summarises each of the $np rank(s)"
    else bad "mpitrain-show --timeline at $np rank(s) (exit $rc)"; fi
done

MT_TRACE=1 "$run" 2 "$b/tools/trainer" $common --name by-env >"$out" 2>"$err"
rc=$?
# shellcheck disable=SC2086
if [ $rc -eq 0 ] && check_ranks by-env 2 $cats; then ok "MT_TRACE=1 traces without the flag"
else bad "MT_TRACE=1 (exit $rc)"; fi

MT_TRACE=0 "$run" 2 "$b/tools/trainer" $common --name untraced >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ -f "$store/runs/untraced/run.json" ] && [ ! -e "$store/runs/untraced/trace" ]; then
    ok "tracing off (and MT_TRACE=0): no trace directory"
else bad "tracing off (exit $rc)"; fi

"$b/tools/mpitrain-show" "$store/runs/untraced" --timeline >"$out" 2>"$err"
if [ $? -eq 1 ] && grep -q "untraced/trace: no trace (run with --trace" "$err"; then
    ok "mpitrain-show --timeline on a run without a trace says so"
else bad "mpitrain-show --timeline without a trace"; fi

# a rank that died mid-run leaves a cut file: the summary names it and fails
cp -r "$store/runs/traced-2" "$store/runs/cut"
head -c 2000 "$store/runs/traced-2/trace/rank_1.json" >"$store/runs/cut/trace/rank_1.json"
"$b/tools/mpitrain-show" "$store/runs/cut" --timeline >"$out" 2>"$err"
if [ $? -eq 1 ] && grep -q "^rank 0 " "$out" && grep -q "cut/trace/rank_1.json" "$err"; then
    ok "mpitrain-show --timeline names a truncated rank file and still shows the others"
else bad "mpitrain-show --timeline on a truncated file"; fi

# the trace directory cannot be made (a file is in the way): a warning, the run goes on
mkdir -p "$store/runs/blocked" && : >"$store/runs/blocked/trace"
"$run" 2 "$b/tools/trainer" $common --name blocked --trace >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "rank 0: tracing off: cannot create .*blocked/trace/rank_0.json: Not a directory" "$err" \
    && grep -q "rank 1: tracing off" "$err" && grep -q '"status": *"finished"' "$store/runs/blocked/run.json"; then
    ok "an unwritable trace directory is a warning naming the file, rank and reason; the run finishes"
else bad "unwritable trace directory (exit $rc)"; fi

# a failed run started again resumes: the failed attempt's trace is kept beside the new one
"$run" 2 "$b/tools/trainer" $common --name again --trace --fail-rank 1 --fail-epoch 1 >"$out" 2>"$err"
rc1=$?
"$run" 2 "$b/tools/trainer" $common --name again --trace >"$out" 2>"$err"
rc2=$?
d="$store/runs/again/trace"
if [ $rc1 -eq 1 ] && [ $rc2 -eq 0 ] && [ "$(ls "$d" | grep -c '^rank_')" -eq 4 ] \
    && [ -f "$d/job.json" ] && [ -f "$d/job.1.json" ] \
    && "$b/tests/trace_check" "$d/rank_1.1.json" 1 compute data agree >>"$out" 2>>"$err" \
    && "$b/tests/trace_check" "$d/rank_1.json" 1 compute data agree report >>"$out" 2>>"$err" \
    && "$b/tools/mpitrain-show" "$store/runs/again" --timeline >"$out" 2>>"$err" \
    && grep -q "(2 ranks;" "$out"; then
    ok "a resumed run keeps the failed attempt's trace as rank_R.1.json and job.1.json; the summary reads the latest"
else bad "trace of a resumed run (exits $rc1, $rc2): $(ls "$d" | tr '\n' ' ')"; fi

# many threads at once, each recording more spans than its buffer holds
mkdir -p "$store/probe"
"$b/tests/trace_probe" "$store/probe" 8 3000 >"$out" 2>"$err"
rc=$?
f="$store/probe/trace/rank_0.json"
inner=$(grep -c '"name":"inner"' "$f" 2>/dev/null)
workers=$(grep -c '"thread_name".*"worker"' "$f" 2>/dev/null)
if [ $rc -eq 0 ] && "$b/tests/trace_check" "$f" 0 collective fusion data >>"$out" 2>>"$err" \
    && [ "$inner" -eq 24000 ] && [ "$workers" -eq 8 ]; then
    ok "8 threads x 3000 nested spans: every span kept, threads named, file valid"
else bad "trace_probe (exit $rc, $inner inner spans, $workers workers named)"; fi

"$b/tools/mpitrain-show" --help >"$out" 2>"$err" && grep -q -- "--timeline" "$out" \
    && ok "mpitrain-show --help lists --timeline" || bad "mpitrain-show --help"
finish
