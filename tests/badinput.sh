#!/bin/sh
# Hostile input from outside, end to end: names from a run directory never reach gnuplot
# or a shell as code (mpitrain-show --plot), numbers from flags and the environment are
# read strictly, and the importer refuses files whose headers lie.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
b=$(cd "${top_builddir:-.}" && pwd)
scratch badinput

# ---------------------------------------------------------------- mpitrain-show --plot
# A run directory whose own name and metric keys are gnuplot and shell code: quotes,
# backslashes (one at the very end), newlines, system(), backquotes, $( ), @macros.
# Nothing may run; the plot is still drawn.
(
    cd "$store" || exit 1
    run="run'\$(touch M1)\`touch M2\`\"; system('touch M3') \\"
    mkdir -p "$run"
    printf '%s\n' '{"status": "finished", "attempts": 1, "failures": 0,' \
        '"next_checkpoint_index": 0, "training_iteration": 3, "time_total_s": 1.0,' \
        '"checkpoints": []}' >"$run/run.json"
    hostile='"x'"'"'; system('"'"'touch M4'"'"'); print '"'"'": %d, "q\\"\\\\`touch M5`": %d, "$(touch M6) @x": 2, "end\\\\": %d'
    for it in 1 2; do
        printf "{\"training_iteration\": %d, \"a\\\\nb\\\\\\\\\": 1.5, $hostile}\n" $it $it $it $it
    done >"$run/result.json"
    printf "{\"training_iteration\": 3, $hostile}\n" 3 3 3 >>"$run/result.json"
    "$b/tools/mpitrain-show" "$run" --plot "p'\$(touch M7)\`touch M8\`.png"
) >"$out" 2>"$err"
rc=$?
if ls "$store"/M* >/dev/null 2>&1; then bad "mpitrain-show --plot ran code from names: $(ls "$store" | tr '\n' ' ')"
elif [ $rc -ne 0 ] || [ ! -s "$store/p'\$(touch M7)\`touch M8\`.png" ] || ! grep -q "wrote .*5 metrics over 3 reports" "$out"
then bad "mpitrain-show --plot with hostile names did not draw the plot (exit $rc)"
else ok "mpitrain-show --plot: hostile run and metric names are drawn as text, nothing runs"; fi
if grep -q "$(printf '\033')" "$out"; then bad "mpitrain-show printed a control character"; fi

finish
