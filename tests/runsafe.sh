#!/bin/sh
# Nothing a user's command does may lose a run:
#  - every program that accepts a run name and does not train (mpitrain-info,
#    mpitrain-bench) refuses a name that exists (by --name, by MT_NAME), naming the run,
#    whatever the run's state (finished, failed and resumable), and leaves every file of
#    it as it was; given only a storage path, each call is a new run named by its time;
#  - --overwrite with --resume-from-checkpoint inside the same run is refused before
#    anything is deleted (the trainer and trainable-example);
#  - a symbolic link in every position of a run file (run.lock, run.json and its
#    temporary file, params.json, result.json, progress.csv, result.superseded.json,
#    error.txt, a checkpoint folder and its temporary folder, trace/ and
#    trace/rank_R.json), a hard link, and a FIFO: never written through or truncated; the
#    files' own positions are an error naming the file (at 2 ranks, rank 1's trace file:
#    every rank returns the error through the agreement), a temporary's position is
#    cleared (the link goes, its target stays);
#  - a trainable's checkpoint file copied over the latest (stamped with where it belongs,
#    or as written before that) is skipped with a warning and the next older one used:
#    the rerun finishes with every iteration once (tests/test_mpi_input's
#    checkpoints_where_they_belong covers the function form, another run's checkpoint, a
#    linked checkpoint folder and old checkpoints without the keys).
#
# Two automake tests share this script, so that make -j2 runs them side by side (under the
# sanitizers this is the suite's longest test): tests/runsafe.sh points 1 and 3,
# tests/runsafe_links.sh (MT_RUNSAFE_PART=links) point 2.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
part=${MT_RUNSAFE_PART:-programs}
case "$part" in programs | links) ;; *) echo "MT_RUNSAFE_PART '$part': programs or links"; exit 99 ;; esac
ex="$b/tools/trainable-example"
info="$b/tools/mpitrain-info"
bench="$b/benchmarks/mpitrain-bench"
scratch runsafe-$part
unset MT_STORAGE_PATH MT_NAME MT_TRACE
export HOME="$store/home" TMPDIR="$store/tmp"
mkdir -p "$HOME" "$TMPDIR"
runs="$store/runs"
common="--storage-path $runs --iterations 3 --checkpoint-frequency 1 --verbose 0"
# snap NAME: every file of the run with its checksum (what "left as it was" compares)
snap() { (cd "$runs/$1" && find . -print | sort | while read -r f; do
    if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"
    elif [ -f "$f" ]; then echo "$f $(cksum <"$f")"; else echo "$f/"; fi; done); }

if [ "$part" = programs ]; then
# ---------------------------------------------------------------- point 1: the programs
"$run" 1 "$ex" $common --name done >"$out" 2>"$err" || bad "a finished run to protect"
"$run" 1 "$ex" $common --name broken --fail-rank 0 --fail-iteration 2 >"$out" 2>"$err"
grep -q '"status": "failed"' "$runs/broken/run.json" || bad "a failed, resumable run to protect"
for victim in done broken; do
    before=$(snap $victim)
    for how in name env; do
        if [ $how = name ]; then set -- --storage-path "$runs" --name $victim; else set -- --storage-path "$runs"; fi
        for prog in info bench; do
            if [ $prog = info ]; then cmd="$info"; else cmd="$bench --quick --suite report"; fi
            # shellcheck disable=SC2086
            if [ $how = env ]; then MT_NAME=$victim "$run" 2 $cmd "$@" >"$out" 2>"$err"
            else "$run" 2 $cmd "$@" >"$out" 2>"$err"; fi
            rc=$?
            if [ $rc -ne 0 ] && grep -q "run '$victim' exists already ($runs/$victim holds" "$err" \
                && [ "$(snap $victim)" = "$before" ]; then
                ok "$(basename ${cmd%% *}) given a $(cat "$runs/$victim/run.json" | sed -n 's/.*"status": "\([a-z]*\)".*/\1/p') run's name ($how): refused, naming it; every file as it was"
            else bad "$(basename ${cmd%% *}) --name $victim ($how): exit $rc, or the run changed"; fi
        done
    done
done
# no name, a storage path: each call is a new run named by its time (-2, -3 ... within one
# second), never refused by the last one, which stays as it was
"$run" 1 "$info" --storage-path "$store/kept" >"$out" 2>"$err"
first=$(ls -d "$store/kept"/mpitrain-info_* 2>/dev/null)
sum=$(cksum <"$first/run.json" 2>/dev/null)
"$run" 1 "$info" --storage-path "$store/kept" >"$out" 2>"$err"
rc1=$?
"$run" 1 "$info" --storage-path "$store/kept" >"$out" 2>"$err"
rc=$?
if [ $rc1 -eq 0 ] && [ $rc -eq 0 ] && [ -n "$first" ] \
    && [ "$(ls -d "$store/kept"/mpitrain-info_* | wc -l)" -eq 3 ] \
    && [ "$(cksum <"$first/run.json")" = "$sum" ]; then
    ok "mpitrain-info --storage-path three times: three runs, each named by its time, the first as it was"
else bad "mpitrain-info --storage-path three times (exits $rc1, $rc; runs: $(ls "$store/kept" | tr '\n' ' '))"; fi
# a folder that holds anything is not created into (no run.lock left in it)
mkdir -p "$runs/mine" && echo notes >"$runs/mine/notes.txt"
"$run" 1 "$info" --storage-path "$runs" --name mine >"$out" 2>"$err"
rc=$?
if [ $rc -ne 0 ] && grep -q "holds notes.txt" "$err" && [ "$(ls -A "$runs/mine")" = notes.txt ]; then
    ok "mpitrain-info --name of a folder holding a file: refused, nothing created in it"
else bad "mpitrain-info into a folder holding a file (exit $rc): $(ls -A "$runs/mine" | tr '\n' ' ')"; fi

# --overwrite with --resume-from-checkpoint inside the same run: refused, nothing deleted
before=$(snap done)
"$run" 1 "$ex" $common --name done --overwrite --resume-from-checkpoint "$runs/done/checkpoint_000002" >"$out" 2>"$err"
rc=$?
if [ $rc -ne 0 ] && grep -q "is inside $runs/done, the run that run.overwrite (--overwrite) would clear" "$err" \
    && [ "$(snap done)" = "$before" ]; then
    ok "--overwrite with --resume-from-checkpoint inside the run: refused before anything is deleted"
else bad "--overwrite with --resume-from-checkpoint inside the run (exit $rc)"; fi
# through a link from outside the run to its checkpoint: the same
ln -s "$runs/done/checkpoint_000002" "$store/outside-link"
"$run" 1 "$ex" $common --name done --overwrite --resume-from-checkpoint "$store/outside-link" >"$out" 2>"$err"
rc=$?
if [ $rc -ne 0 ] && grep -q "would clear" "$err" && [ "$(snap done)" = "$before" ]; then
    ok "--overwrite with --resume-from-checkpoint through a link into the run: refused"
else bad "--overwrite with --resume-from-checkpoint through a link (exit $rc)"; fi
# a copy outside the run: the run is replaced, and starts from it
cp -r "$runs/done/checkpoint_000002" "$store/copy"
"$run" 1 "$ex" $common --name done --overwrite --resume-from-checkpoint "$store/copy" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q '"status": "finished"' "$runs/done/run.json"; then
    ok "--overwrite with --resume-from-checkpoint outside the run: replaced, started from it"
else bad "--overwrite with --resume-from-checkpoint outside the run (exit $rc)"; fi

fi

if [ "$part" = links ]; then
# ---------------------------------------------------------------- point 2: links
echo "the victim's own text" >"$store/victim"
mkdir -p "$store/victim-dir" && echo keep >"$store/victim-dir/file"
victim_ok() { [ "$(cat "$store/victim")" = "the victim's own text" ] && [ "$(cat "$store/victim-dir/file")" = keep ] \
    && [ "$(ls -A "$store/victim-dir")" = file ]; }
n=0
# linked FILE MODE: a new run whose FILE is a link to the victim (MODE error: refused naming
# FILE; MODE clear: the run finishes and the link is gone); the victim unchanged either way
linked() {
    n=$((n + 1)); name=link$n
    mkdir -p "$runs/$name/$(dirname "$1")"
    case "$1" in *checkpoint_* | trace) target="$store/victim-dir" ;; *) target="$store/victim" ;; esac
    ln -s "$target" "$runs/$name/$1"
    shift_args=""
    case "$1" in trace*) shift_args="--trace" ;; esac
    # shellcheck disable=SC2086
    "$run" 1 "$ex" $common --name $name $shift_args >"$out" 2>"$err"
    rc=$?
    if [ "$2" = error ]; then
        if [ $rc -ne 0 ] && grep -q "$runs/$name/$1 is a symbolic link" "$err" && victim_ok; then
            ok "a link at $1: refused, naming it; its target unchanged"
        else bad "a link at $1 (exit $rc; victim: $(cat "$store/victim"))"; fi
    else
        if [ $rc -eq 0 ] && [ ! -L "$runs/$name/$1" ] && victim_ok; then
            ok "a link at $1 (no run file there yet): removed, the run goes on, its target unchanged"
        else bad "a link at $1 (exit $rc; victim: $(cat "$store/victim"))"; fi
    fi
    echo "the victim's own text" >"$store/victim"
}
for f in run.lock run.json params.json result.json progress.csv result.superseded.json trace trace/rank_0.json; do
    linked $f error
done
for f in .run.json.tmp .params.json.tmp .progress.csv.tmp .checkpoint_000000.tmp checkpoint_000000 checkpoint_000001 error.txt; do
    linked $f clear
done
# error.txt of a failed run is written: through no link
mkdir -p "$runs/failing" && ln -s "$store/victim" "$runs/failing/error.txt"
"$run" 1 "$ex" $common --name failing --fail-rank 0 --fail-iteration 2 >"$out" 2>"$err"
rc=$?
if [ $rc -ne 0 ] && grep -q "$runs/failing/error.txt is a symbolic link" "$err" && victim_ok; then
    ok "a link at error.txt of a failing run: named, never written through"
else bad "a link at error.txt of a failing run (exit $rc)"; fi
# a resumed run's result.json replaced by a link: named at the resume
"$run" 1 "$ex" $common --name resumed --fail-rank 0 --fail-iteration 2 >"$out" 2>"$err"
mv "$runs/resumed/result.json" "$store/victim" && ln -s "$store/victim" "$runs/resumed/result.json"
cp "$store/victim" "$store/victim.before"
"$run" 1 "$ex" $common --name resumed >"$out" 2>"$err"
rc=$?
if [ $rc -ne 0 ] && grep -q "$runs/resumed/result.json is a symbolic link" "$err" && cmp -s "$store/victim" "$store/victim.before"; then
    ok "a resumed run whose result.json is a link: refused naming it, the target neither cut nor appended to"
else bad "a resumed run whose result.json is a link (exit $rc)"; fi
echo "the victim's own text" >"$store/victim"
# a hard link (a second name of a file outside the run) and a FIFO: refused, nothing hangs
mkdir -p "$runs/hard" && ln "$store/victim" "$runs/hard/result.json"
"$run" 1 "$ex" $common --name hard >"$out" 2>"$err"
rc=$?
if [ $rc -ne 0 ] && grep -q "$runs/hard/result.json has 2 names (a hard link)" "$err" && victim_ok; then
    ok "a hard link at result.json: refused naming it, the file unchanged"
else bad "a hard link at result.json (exit $rc)"; fi
mkdir -p "$runs/fifo" && mkfifo "$runs/fifo/progress.csv"
"$run" 1 "$ex" $common --name fifo >"$out" 2>"$err"
rc=$?
if [ $rc -ne 0 ] && grep -q "$runs/fifo/progress.csv is a FIFO" "$err"; then
    ok "a FIFO at progress.csv: refused naming it (no open that blocks)"
else bad "a FIFO at progress.csv (exit $rc)"; fi
# 2 ranks, rank 1's trace file a link: every rank fails through the agreement, rank 1 named
mkdir -p "$runs/trace2/trace" && ln -s "$store/victim" "$runs/trace2/trace/rank_1.json"
"$run" 2 "$ex" $common --name trace2 --trace >"$out" 2>"$err"
rc=$?
if [ $rc -ne 0 ] && grep -q "rank 1.*$runs/trace2/trace/rank_1.json is a symbolic link" "$err" && victim_ok \
    && grep -q '"status": "failed"' "$runs/trace2/run.json"; then
    ok "2 ranks, a link at rank 1's trace file: the run fails on every rank naming it, the target unchanged"
else bad "2 ranks, a link at trace/rank_1.json (exit $rc)"; fi
fi

if [ "$part" = programs ]; then
# ---------------------------------------------------------------- point 3: the trainable form
# a checkpoint file copied over the latest (with the keys a commit stamps, and as written
# before them: only the trainable's own count): skipped with a warning, the next older one
# loaded, every iteration once and the same final loss as a run never interrupted; the
# rerun is not refused
its() { tr ',{}' '\n\n\n' <"$runs/$1/result.json" | sed -n 's/^ *"training_iteration": *\([0-9]*\)$/\1/p' | tr '\n' ' '; }
loss() { tail -n 1 "$runs/$1/result.json" | tr ',{}' '\n\n\n' | sed -n 's/^ *"loss": *\([^ ]*\)$/\1/p'; }
six="--storage-path $runs --iterations 6 --checkpoint-frequency 1 --num-to-keep 0 --verbose 0"
"$run" 1 "$ex" $six --name tclean >"$out" 2>"$err" || bad "a clean trainable run"
for how in stamped unstamped; do
    name=tswap-$how
    if [ $how = unstamped ]; then MT_TEST_FAIL_AT=commit-unstamped:0 "$run" 1 "$ex" $six --name $name --fail-rank 0 --fail-iteration 4 >"$out" 2>"$err"
    else "$run" 1 "$ex" $six --name $name --fail-rank 0 --fail-iteration 4 >"$out" 2>"$err"; fi
    cp "$runs/$name/checkpoint_000000/checkpoint.h5" "$runs/$name/checkpoint_000002/checkpoint.h5"
    "$run" 1 "$ex" $six --name $name >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 0 ] && grep -q "skipping $runs/$name/checkpoint_000002: .*copied over another" "$err" \
        && [ "$(its $name)" = "1 2 3 4 5 6 " ] && [ -n "$(loss $name)" ] && [ "$(loss $name)" = "$(loss tclean)" ]; then
        ok "trainable, a checkpoint copied over the latest ($how): skipped, the next older loaded, iterations 1..6 once, the clean run's loss"
    else bad "trainable, a checkpoint copied over the latest ($how; exit $rc, iterations $(its $name), loss $(loss $name) vs $(loss tclean))"; fi
done

# reading: mt_result_load (mpitrain-show) names a link at run.json, never reads through it
"$run" 1 "$ex" $common --name shown >"$out" 2>"$err"
mv "$runs/shown/run.json" "$store/run.json" && ln -s "$store/run.json" "$runs/shown/run.json"
"$b/tools/mpitrain-show" "$runs/shown" >"$out" 2>"$err"
rc=$?
if [ $rc -ne 0 ] && grep -q "$runs/shown/run.json is a symbolic link" "$err"; then
    ok "mpitrain-show of a run whose run.json is a link: refused naming it"
else bad "mpitrain-show of a run whose run.json is a link (exit $rc)"; fi
fi
finish
