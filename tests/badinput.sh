#!/bin/sh
# Hostile input from outside, end to end: names from a run directory never reach gnuplot
# or a shell as code (mpitrain-show --plot), numbers from flags and the environment are
# read strictly, and the importer refuses files whose headers lie.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
scratch badinput

# ---------------------------------------------------------------- mpitrain-show --plot
# A run directory whose own name and metric keys are gnuplot and shell code: quotes,
# backslashes (one at the very end), newlines, system(), backquotes, $( ), @macros.
# Nothing may run; the plot is still drawn (every metric varies: constant ones are left out).
(
    cd "$store" || exit 1
    run="run'\$(touch M1)\`touch M2\`\"; system('touch M3') \\"
    mkdir -p "$run"
    printf '%s\n' '{"status": "finished", "attempts": 1, "failures": 0,' \
        '"next_checkpoint_index": 0, "training_iteration": 3, "time_total_s": 1.0,' \
        '"checkpoints": []}' >"$run/run.json"
    hostile='"x'"'"'; system('"'"'touch M4'"'"'); print '"'"'": %d, "q\\"\\\\`touch M5`": %d, "$(touch M6) @x": %d, "end\\\\": %d'
    for it in 1 2; do
        printf "{\"training_iteration\": %d, \"a\\\\nb\\\\\\\\\": 1.%d, $hostile}\n" $it $it $it $it $it $it
    done >"$run/result.json"
    printf "{\"training_iteration\": 3, $hostile}\n" 3 3 3 3 >>"$run/result.json"
    "$b/tools/mpitrain-show" "$run" --plot "p'\$(touch M7)\`touch M8\`.png"
) >"$out" 2>"$err"
rc=$?
if ls "$store"/M* >/dev/null 2>&1; then bad "mpitrain-show --plot ran code from names: $(ls "$store" | tr '\n' ' ')"
elif [ $rc -ne 0 ] || [ ! -s "$store/p'\$(touch M7)\`touch M8\`.png" ] || ! grep -q "wrote .*5 metrics over 3 reports" "$out"
then bad "mpitrain-show --plot with hostile names did not draw the plot (exit $rc)"
else ok "mpitrain-show --plot: hostile run and metric names are drawn as text, nothing runs"; fi
if grep -q "$(printf '\033')" "$out"; then bad "mpitrain-show printed a control character"; fi

# ---------------------------------------------------------------- numbers from outside
# expect_fail NAME STATUS TEXT COMMAND...: exits with STATUS and says TEXT on stderr
expect_fail() {
    name=$1; want=$2; text=$3; shift 3
    "$@" >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq "$want" ] && grep -qF -- "$text" "$err"; then ok "$name"
    else bad "$name (exit $rc, want $want and '$text')"; fi
}
export MT_STORAGE_PATH="$store/runs"
t="$b/tools/trainer"
expect_fail "trainer --epochs 4294967297 is refused, not read as 1" 2 \
    "--epochs: '4294967297' is not an integer from 1 to" "$t" --epochs 4294967297 --data /nonexistent.h5
expect_fail "trainer --batch-size -1 is refused" 2 "--batch-size: '-1'" \
    "$t" --batch-size -1 --data /nonexistent.h5
expect_fail "trainer --seed 1x is refused" 2 "--seed: '1x'" "$t" --seed 1x --data /nonexistent.h5
expect_fail "--num-workers 4294967297 is refused" 2 "option --num-workers: '4294967297'" \
    "$t" --num-workers 4294967297 --data /nonexistent.h5
expect_fail "mpitrain-run --max-failures 4294967297 is refused" 2 "expected --max-failures N" \
    "$b/tools/mpitrain-run" --max-failures 4294967297 -- true
# environment knobs: one error before training, naming the variable and its value
MT_FUSION_BYTES=-1 expect_fail "MT_FUSION_BYTES=-1 is an error, not 2^64-1" 1 \
    "MT_FUSION_BYTES: '-1'" "$t" --data /nonexistent.h5 --name env1
MT_CHECKPOINT_BUFFER=64M expect_fail "MT_CHECKPOINT_BUFFER=64M is an error, not ignored" 1 \
    "MT_CHECKPOINT_BUFFER: '64M'" "$t" --data /nonexistent.h5 --name env2
MT_IO_READAHEAD=yes expect_fail "MT_IO_READAHEAD=yes is an error, not ignored" 1 \
    "MT_IO_READAHEAD: 'yes' is not 0 or 1" "$t" --data /nonexistent.h5 --name env3

# ---------------------------------------------------------------- names from users
nl='
'
expect_fail "a run name with a newline is refused naming the field" 1 \
    "run.name must not contain control characters" "$t" --data /nonexistent.h5 --name "a${nl}b"
expect_fail "a run name with '/' is refused" 1 "run.name must not contain '/'" \
    "$t" --data /nonexistent.h5 --name "../escape"
MT_NAME=.. expect_fail "MT_NAME=.. is refused" 1 "run.name must not be \"..\"" \
    "$t" --data /nonexistent.h5
if ls "$store" | grep -q escape || [ -e "$store/runs/a" ]; then bad "a refused name made a folder"
else ok "refused names made no folder"; fi

# ---------------------------------------------------------------- importer
printf '\000\000\010\003\000\001\000\000\000\001\000\000\000\001\000\000' >"$store/lie.idx"
head -c 2000 /dev/zero >>"$store/lie.idx"
expect_fail "an IDX file claiming 65536x65536x65536 in 2 KB is refused" 1 \
    "lie.idx: the header announces 65536x65536x65536 x 1 bytes" \
    "$b/tools/mpitrain-import" idx --images "$store/lie.idx" --output "$store/lie.h5"
printf '\000\000\010\001\000\000\000\000' >"$store/zero.idx"
expect_fail "a zero-row IDX file is refused" 1 "zero.idx: dimension 0 (byte 4) is 0: no rows" \
    "$b/tools/mpitrain-import" idx --images "$store/zero.idx" --output "$store/zero.h5"
printf 'a,b,label\n1,2,0\n1e300,2,1\n' >"$store/big.csv"
expect_fail "a CSV value of 1e300 (stored as f32) is refused naming line and column" 1 \
    "big.csv: line 3, column 1 (a): '1e300' is outside the float32 range" \
    "$b/tools/mpitrain-import" csv --input "$store/big.csv" --label label --output "$store/big.h5"
long=$(head -c 4100 /dev/zero | tr '\0' a)
expect_fail "mpitrain-import fashion-mnist --dir of 4100 bytes is refused, not cut short" 2 \
    "--dir: the path is too long" "$b/tools/mpitrain-import" fashion-mnist --dir "$long" \
    --output "$store/long.h5"
MT_DATA_DIR="$store/$long" expect_fail "trainer: MT_DATA_DIR too long for a path is refused" 1 \
    "MT_DATA_DIR is too long for a path" "$t" --name longdata
if [ -e "$store/lie.h5" ] || [ -e "$store/zero.h5" ] || [ -e "$store/big.h5" ]; then
    bad "a refused import wrote its output"
else ok "refused imports wrote nothing"; fi

finish
