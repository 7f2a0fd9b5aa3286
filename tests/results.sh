#!/bin/sh
# Results and checkpoints end to end with the example trainer: a new run started from
# another run's checkpoint with --resume-from-checkpoint continues from its epoch and
# counts its own iterations; a run directory means its latest checkpoint; a path that is
# neither stops the job on every rank before training, naming the path, and leaves no run
# folder; mpitrain-show elides a long list of checkpoints.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
scratch results
fmnist_h5
common="--data $data --storage-path $store/runs --steps-per-epoch 20 --checkpoint-frequency 1"

"$run" 2 "$b/tools/trainer" $common --name src --epochs 2 >"$out" 2>"$err"
rc1=$?
from="$store/runs/src/checkpoint_000001"
"$run" 2 "$b/tools/trainer" $common --name dst --epochs 3 --resume-from-checkpoint "$from" \
    >"$out" 2>"$err"
rc2=$?
rows=$(wc -l <"$store/runs/dst/result.json" 2>/dev/null)
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && grep -q "resumed from .*src/checkpoint_000001 (epoch 2 done)" "$out" \
    && [ "$rows" = 1 ] && grep -q '"training_iteration": *1[,}]' "$store/runs/dst/result.json" \
    && grep -q "\"resume_from_checkpoint\": \"$from\"" "$store/runs/dst/params.json"; then
    ok "--resume-from-checkpoint: a new run starts from another run's checkpoint (epoch 2 done, its own iteration 1)"
else bad "--resume-from-checkpoint (exits $rc1, $rc2, rows '$rows')"; fi

# a run folder means its latest checkpoint (src's latest: checkpoint_000001, epoch 2 done)
"$run" 2 "$b/tools/trainer" $common --name from-run --epochs 3 --resume-from-checkpoint "$store/runs/src" \
    >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "resumed from .*src/checkpoint_000001 (epoch 2 done)" "$out"; then
    ok "--resume-from-checkpoint with a run directory starts from that run's latest checkpoint"
else bad "--resume-from-checkpoint with a run directory (exit $rc)"; cat "$out" "$err"; fi

# a folder that is neither: every rank stops before training, the path named, and the new
# run leaves no folder behind (mpitrain-show would reject a stub)
mkdir -p "$store/not-a-checkpoint"
"$run" 2 "$b/tools/trainer" $common --name bad --epochs 1 --resume-from-checkpoint "$store/not-a-checkpoint" \
    >"$out" 2>"$err"
rc=$?
if [ $rc -eq 1 ] && grep -q "run.resume_from_checkpoint: $store/not-a-checkpoint is not a checkpoint" "$out" "$err" \
    && [ ! -e "$store/runs/bad" ]; then
    ok "--resume-from-checkpoint with a path that is not a checkpoint stops the job before training, naming it, and leaves no run folder"
else bad "--resume-from-checkpoint with a bad path (exit $rc; $(ls "$store/runs/bad" 2>/dev/null | tr '\n' ' '))"; fi

# mpitrain-show lists 10 of many kept checkpoints and the latest, and says how many it left
# out; --all lists every one
"$run" 1 "$b/tools/trainer" $common --name many --epochs 15 --steps-per-epoch 2 --num-to-keep 0 >"$out" 2>"$err"
"$b/tools/mpitrain-show" "$store/runs/many" >"$out" 2>"$err"
shown=$(grep -c '^  checkpoint_0000' "$out")
"$b/tools/mpitrain-show" "$store/runs/many" --all >"$store/all.txt" 2>>"$err"
all=$(grep -c '^  checkpoint_0000' "$store/all.txt")
# (best first by test_acc: the latest is listed too, among the first 10 or after them)
if { [ "$shown" = 10 ] || [ "$shown" = 11 ]; } && [ "$all" = 15 ] \
    && grep -q "^  \.\.\. $((15 - shown)) more not listed (--all lists every one)" "$out" \
    && grep -q 'checkpoint_000014 .*(latest)' "$out"; then
    ok "mpitrain-show elides a long list of checkpoints ($shown of 15 with the latest); --all lists all 15"
else bad "mpitrain-show's checkpoint list (shown $shown, --all $all)"; cat "$out"; fi

finish
