#!/bin/sh
# The example job end to end: a short run (2 epochs on a subset) at 1, 2 and 4 ranks
# learns and writes the run directory; a failed run resumes from its checkpoint; spawn
# mode gives the same numbers as mpirun; mpitrain-show (and --plot) reads the run;
# mpitrain-bench --quick runs every suite and writes valid JSON lines.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
scratch trainer
fmnist_h5
common="--data $data --storage-path $store/runs --steps-per-epoch 40 --checkpoint-frequency 1"
last_field() { # last_field RUN KEY: KEY's value in the last line of result.json
    tail -n 1 "$store/runs/$1/result.json" | tr ',{}' '\n\n\n' | sed -n "s/^ *\"$2\": *//p"
}

# make check: 2 ranks; the full tier: 1 and 4 ranks as well, spawn mode at 4 too
short_nps="1 2 4" spawn_nps="2 4"
tier full || { short_nps=2 spawn_nps=2; }
for np in $short_nps; do
    "$run" "$np" "$b/tools/trainer" $common --name short-$np --epochs 2 >"$out" 2>"$err"
    rc=$?
    acc=$(last_field short-$np test_acc)
    d="$store/runs/short-$np"
    if [ $rc -eq 0 ] && [ -f "$d/run.json" ] && [ -f "$d/params.json" ] && [ -f "$d/progress.csv" ] \
        && [ -d "$d/checkpoint_000001" ] && [ "$(wc -l <"$d/result.json")" -eq 2 ] \
        && awk "BEGIN { exit !($acc > 0.5) }" && grep -q "trainer: done: final test accuracy" "$out"; then
        ok "short run at $np ranks learns (test accuracy $acc, chance is 0.1) and writes its run directory"
    else bad "short run at $np ranks (exit $rc, accuracy '$acc')"; fi
done

# data the model cannot read: a clear error naming the file, column and value, exit 1,
# never a crash or a run that trains on garbage (h5py writes the files)
if [ -n "${MT_PYTHON:-}" ] && "$MT_PYTHON" -c "import h5py" 2>/dev/null; then
    "$MT_PYTHON" - "$store" <<'PY'
import sys, h5py, numpy as np
def mk(name, x, y):
    with h5py.File(f"{sys.argv[1]}/{name}.h5", "w") as f:
        for g in ("train", "test"):
            f[g + "/x"], f[g + "/y"] = x, y
img = np.zeros((1000, 28, 28), np.uint8)
mk("narrow", np.zeros((1000, 10), np.uint8), np.zeros(1000, np.uint8))
mk("floatx", img.astype(np.float32), np.zeros(1000, np.uint8))
mk("label200", img, np.full(1000, 200, np.uint8))
mk("negative", img, np.full(1000, -100000, np.int32))
mk("floaty", img, np.zeros(1000, np.float32))
mk("tiny", img[:100], np.zeros(100, np.uint8))
PY
    for c in "narrow|/train/x: the model reads rows of 28 x 28 = 784 uint8 pixels" \
             "floatx|and x is float32" "label200|label 200 in a batch" \
             "negative|label -100000 in a batch" "floaty|/train/y: labels are one integer a row" \
             "tiny|/train: 50 rows a rank, fewer than one batch of 64"; do
        f=${c%%|*} want=${c#*|}
        "$run" 2 "$b/tools/trainer" --data "$store/$f.h5" --storage-path "$store/runs" \
            --name bad-$f --epochs 1 >"$out" 2>"$err"
        rc=$?
        if [ $rc -eq 1 ] && cat "$out" "$err" | grep -qF -- "$want"; then
            ok "trainer refuses $f.h5 with a clear error (\"$want\")"
        else bad "trainer on $f.h5 (exit $rc, want 1 and \"$want\")"; fi
    done
fi

# a failure in epoch 1 (no retries), then the same command resumes from epoch 0's checkpoint
"$run" 2 "$b/tools/trainer" $common --name resume --epochs 3 --fail-rank 1 --fail-epoch 1 >"$out" 2>"$err"
rc1=$?
"$run" 2 "$b/tools/trainer" $common --name resume --epochs 3 >"$out" 2>"$err"
rc2=$?
if [ $rc1 -eq 1 ] && [ $rc2 -eq 0 ] && grep -q "resumed from .*checkpoint_000000 (epoch 1 done)" "$out" \
    && [ "$(wc -l <"$store/runs/resume/result.json")" -eq 3 ]; then
    ok "a failed run resumes from its checkpoint and completes (3 reports, none repeated)"
else bad "resume (exits $rc1, $rc2)"; fi

# the same job in spawn mode: no launcher, the same numbers
for np in $spawn_nps; do
    "$run" $np "$b/tools/trainer" $common --name by-mpirun-$np --epochs 2 >"$out" 2>"$err"
    timeout -k 5 $((120 * ${MT_TEST_TIMEOUT_SCALE:-1})) "$b/tools/trainer" --num-workers $np $common \
        --name by-spawn-$np --epochs 2 >"$out" 2>"$err"
    rc=$?
    l1=$(last_field by-mpirun-$np train_loss); l2=$(last_field by-spawn-$np train_loss)
    if [ $rc -eq 0 ] && [ -n "$l1" ] && [ "$l1" = "$l2" ]; then
        ok "spawn mode (--num-workers $np) matches mpirun -np $np (train_loss $l2)"
    else bad "spawn mode at $np (exit $rc, loss '$l1' vs '$l2')"; fi
done

# README's "Running the example" block as written (HOME is the scratch folder; each trainer
# line gets the subset and 1 epoch), without this suite's oversubscription setting: the
# block's own flags must be enough on a 2-core machine. Its first run name is example.sh's.
awk '/^## Running the example/ { f = 1; next } f && /^```sh/ { g = 1; next } g && /^```/ { exit } g' \
    "${top_srcdir:-.}/README.md" | sed -e 's/ *#.*$//' -e "s|build-plain/|$(cd "$b" && pwd)/|g" \
    -e "/tools\/trainer /s|\$| --data $data --steps-per-epoch 10 --epochs 1 --verbose 0|" >"$store/readme.sh"
mkdir -p "$store/runs/fashion-mnist-np2"
cp -r "$store/runs/short-2/." "$store/runs/fashion-mnist-np2/"
ln -s "$store/runs" "$store/mpitrain_results"
(unset OMPI_MCA_rmaps_base_oversubscribe; HOME=$store; export HOME; cd "$store" || exit 1
 timeout -k 5 $((240 * ${MT_TEST_TIMEOUT_SCALE:-1})) sh -eu "$store/readme.sh") >"$out" 2>"$err"
rc=$?
example_np=$(sed -n 's/^np=\${1:-\([0-9]*\)}$/\1/p' "${top_srcdir:-.}/scripts/example.sh")
if [ $rc -eq 0 ] && [ "$(grep -c "trainer " "$store/readme.sh")" -eq 2 ] && [ -s "$store/curves.png" ] \
    && [ "$(last_field np4 training_iteration)" = 1 ] && [ "$(last_field spawn4 training_iteration)" = 1 ] \
    && grep -q -- '--name "fashion-mnist-np$np"' "${top_srcdir:-.}/scripts/example.sh" && [ "$example_np" = 2 ] \
    && grep -q "^status     finished" "$out"; then
    ok "README's 'Running the example' commands run as written on this machine (4 ranks, spawn, show)"
else bad "README's 'Running the example' block (exit $rc)"; cat "$store/readme.sh"; fi
rm -f "$store/curves.png"

# mpitrain-show and its plot
"$b/tools/mpitrain-show" "$store/runs/short-2" --plot "$store/curves.png" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "^status     finished" "$out" && grep -q "test_acc" "$out" \
    && [ -s "$store/curves.png" ] && [ "$(head -c 4 "$store/curves.png" | od -An -c | tr -d ' ')" = "211PNG" ]; then
    ok "mpitrain-show prints the run and --plot draws a PNG"
else bad "mpitrain-show (exit $rc)"; fi
"$b/tools/mpitrain-show" "$store" >"$out" 2>"$err"
if [ $? -ne 0 ] && grep -q "is not a run directory" "$err"; then ok "mpitrain-show refuses a folder that is not a run"
else bad "mpitrain-show on a non-run folder"; fi

# the benchmark suite, quickly, at 2 ranks
"$run" 2 "$b/benchmarks/mpitrain-bench" --quick --json "$store/bench.jsonl" --tmpdir "$store" \
    --storage-path "$store/runs" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && "$b/tests/jsonl_check" "$store/bench.jsonl" allreduce fusion overlap shard \
    report checkpoint train >>"$out" 2>>"$err"; then
    ok "mpitrain-bench --quick runs every suite and writes valid JSON lines"
else bad "mpitrain-bench --quick (exit $rc)"; fi

for prog in trainer mpitrain-run mpitrain-show mpitrain-info mpitrain-import; do
    "$b/tools/$prog" --help >"$out" 2>"$err" && grep -qi "usage" "$out" || { bad "$prog --help"; continue; }
done
"$b/benchmarks/mpitrain-bench" --help >"$out" 2>"$err" && grep -q "usage" "$out" && ok "--help on every program" || bad "mpitrain-bench --help"

finish
