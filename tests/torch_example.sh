#!/bin/sh
# examples/python/fmnist_torch.py end to end (the full tier; skipped without torch): on the
# whole Fashion-MNIST file of mpitrain-import, at 2 ranks under mpirun, the MLP
# (784-256-128-10) reaches 0.88 test accuracy and the CNN 0.90 within 10 epochs (each run
# stops at the first epoch that reaches it: --target); the MLP once more with no launcher
# (spawn mode, 2 workers) to 0.80, what its first epoch reaches (spawn mode trains as
# mpirun does; the accuracy is shown above); and its argument checks (--help, bad values,
# a missing file).
# Also benchmarks/torch_bench.py runs at all (one short round, no data): its table has a
# row per model with every figure (never a timing checked).
set -u
. "${top_srcdir:-.}/tests/lib.sh"
py=${MT_PYTHON:-}
if [ -z "$py" ]; then echo "skipped: built without the Python package"; exit 77; fi
if [ -n "${MT_SANITIZED:-}" ]; then echo "skipped: a sanitizer build (python3 is not instrumented)"; exit 77; fi
"$py" -c "import torch" 2>/dev/null || { echo "skipped: no torch for $py"; exit 77; }
need_tier full
scratch torch-example
ex="${top_srcdir:-.}/examples/python/fmnist_torch.py"
PYTHONPATH="$b/python"; export PYTHONPATH
OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1; export OPENBLAS_NUM_THREADS PYTHONDONTWRITEBYTECODE
# ten epochs of the CNN at one thread a rank take minutes on a loaded machine
MT_TEST_TIMEOUT=${MT_TEST_TIMEOUT:-3600}; export MT_TEST_TIMEOUT

# the argument checks first (no data needed)
"$py" "$ex" --help >"$out" 2>"$err"
if [ $? -eq 0 ] && grep -q -- "--model {mlp,cnn}" "$out" && grep -q -- "--target" "$out"; then
    ok "--help lists the options"
else bad "--help"; fi
for case in "--epochs 0|must be > 0" "--lr x|is not a number" "--target 1.5|at most 1" \
    "--model rnn|invalid choice: 'rnn'" "--batch-size -3|must be > 0"; do
    opt=${case%%|*} text=${case#*|}
    # shellcheck disable=SC2086
    "$py" "$ex" "$store/none.h5" $opt >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 2 ] && grep -q -- "$text" "$err"; then ok "$opt is refused ($text)"
    else bad "$opt (exit $rc)"; fi
done
"$py" "$ex" "$store/none.h5" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 2 ] && grep -q "none.h5: no such file" "$err"; then ok "a missing data file is refused by name"
else bad "a missing data file (exit $rc)"; fi

"$run" 2 -x PYTHONPATH -x OPENBLAS_NUM_THREADS -x PYTHONDONTWRITEBYTECODE "$py" \
    "${top_srcdir:-.}/benchmarks/torch_bench.py" --rounds 1 --seconds 0.2 --storage-path "$store" \
    --json "$store/bench.json" >"$out" 2>"$err"
rc=$?
rows=$(grep -cE '^(mlp|cnn) +[0-9]+ +[0-9]+ +[0-9]+( +[0-9.]+ \([0-9.]+-[0-9.]+\)){3} +shm$' "$out")
if [ $rc -eq 0 ] && [ "$rows" -eq 2 ] && "$py" -c "import json, sys; r = json.load(open(sys.argv[1])); \
    assert all(r[k][w] > 0 for k in ('mlp', 'cnn') for w in ('ceiling', 'mpitrain', 'ddp', \
    'mt_ddp', 'mt_ceiling', 'ddp_ceiling'))" \
    "$store/bench.json"; then
    ok "benchmarks/torch_bench.py runs: a row per model, every figure in its JSON"
else bad "benchmarks/torch_bench.py (exit $rc, $rows rows)"; fi

fmnist_h5 all
# accuracy MODEL TARGET NAME [MPIRUN-NP]: the example to TARGET within 10 epochs
accuracy() {
    model=$1 target=$2 name=$3 np=${4:-}
    if [ -n "$np" ]; then
        "$run" "$np" -x PYTHONPATH -x OPENBLAS_NUM_THREADS -x PYTHONDONTWRITEBYTECODE "$py" "$ex" \
            "$data" --model "$model" --epochs 10 --target "$target" --storage-path "$store/runs" \
            --name "$name" >"$out" 2>"$err"
    else
        timeout -k 10 "$MT_TEST_TIMEOUT" "$py" "$ex" "$data" --model "$model" --epochs 10 \
            --target "$target" --workers 2 --storage-path "$store/runs" --name "$name" \
            >"$out" 2>"$err"
    fi
    rc=$?
    line=$(grep "^fmnist_torch: $model test accuracy" "$out" | head -n 1)
    acc=$(echo "$line" | sed -n 's/.* test accuracy \([0-9.]*\) after \([0-9]*\) epochs.*/\1/p')
    epochs=$(echo "$line" | sed -n 's/.* after \([0-9]*\) epochs.*/\1/p')
    how=${np:+"mpirun -np $np"}
    how=${how:-"no launcher, 2 workers"}
    if [ $rc -eq 0 ] && [ -n "$acc" ] && awk "BEGIN { exit !($acc >= $target) }" \
        && [ "$epochs" -le 10 ] && [ "$(grep -c "^fmnist_torch:" "$out")" -eq 1 ]; then
        ok "$model ($how) reaches $acc >= $target test accuracy in $epochs epochs"
    else bad "$model ($how): exit $rc, accuracy '${acc}' after '${epochs}' epochs (wanted >= $target in 10)"; fi
}
accuracy mlp 0.88 mlp-np2 2
accuracy cnn 0.90 cnn-np2 2
accuracy mlp 0.80 mlp-spawn
finish
