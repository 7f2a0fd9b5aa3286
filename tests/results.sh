#!/bin/sh
# Results and checkpoints end to end with the example trainer: a new run started from
# another run's checkpoint with --resume-from-checkpoint continues from its epoch and
# counts its own iterations; a path that is not a checkpoint stops the job on every rank
# before training, naming the path; the run's history reads back through mpitrain-show.
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

# a run folder is not a checkpoint: every rank stops before training, the path named
"$run" 2 "$b/tools/trainer" $common --name bad --epochs 1 --resume-from-checkpoint "$store/runs/src" \
    >"$out" 2>"$err"
rc=$?
if [ $rc -eq 1 ] && grep -q "run.resume_from_checkpoint: $store/runs/src is not a checkpoint" "$out" "$err" \
    && [ ! -s "$store/runs/bad/result.json" ]; then
    ok "--resume-from-checkpoint with a path that is not a checkpoint stops the job before training, naming it"
else bad "--resume-from-checkpoint with a bad path (exit $rc)"; fi

finish
