#!/bin/sh
# The programs are honest about themselves:
#  - each --help lists only the options the program takes, and the defaults it shows are the
#    ones a run without options uses (read back from params.json and result.json): trainer,
#    trainable-example, mpitrain-info, mpitrain-bench, mpitrain-run;
#  - mpitrain-info and mpitrain-bench leave no run folder in the default storage path and
#    no file in the temporary folder, unless given --storage-path or --name;
#  - mpitrain-bench's JSON lines carry date, host, version, ranks and mode, and budget_met
#    where a budget applies; --fail-on-miss turns a missed budget into exit status 3 (an
#    impossible and a certain report budget through --budget-report-us: no timing judged);
#  - mpitrain-show names a missing --metric, prints dates and plain numbers, and its plot
#    has y labels, the per-rank band, the kept and best checkpoints, --log, and leaves
#    constant columns out; a run resumed after a failure has iterations_since_restore
#    starting again at 1, and mpitrain-show names and marks where it resumed.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
scratch tools
fmnist_h5
unset MT_STORAGE_PATH MT_NAME
export HOME="$store/home" TMPDIR="$store/tmp"
mkdir -p "$HOME" "$TMPDIR"
help="$store/help"
# the default an option's help line shows: "  --opt ARG   text (default: X)"
help_default() { sed -n "s/^  --$1\( [^ ]*\)\{0,1\}  .*(default: \(.*\))$/\2/p" "$help" | head -n 1; }
# a key of params.json (one key a line), without quotes
param() { sed -n "s/^ *\"$2\": *\"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$1" | head -n 1; }
# every library option the help shows against the run's params.json; prints the mismatches
compare() { # compare PARAMS NP
    for opt in name storage-path num-workers cpus-per-worker max-failures num-to-keep \
        checkpoint-score-attribute checkpoint-score-order checkpoint-frequency \
        checkpoint-at-end stall-warn stall-timeout verbose; do
        shown=$(help_default $opt)
        [ -n "$shown" ] || continue
        # a folder made at run time ("a temporary folder, ...") is checked by what is left
        [ $opt = storage-path ] && case "$shown" in "~/"* | /*) ;; *) continue ;; esac
        case $opt in
        name) key=name ;; storage-path) key=storage_path ;; num-workers) key=num_workers ;;
        cpus-per-worker) key=cpus_per_worker ;; max-failures) key=max_failures ;;
        num-to-keep) key=num_to_keep ;; checkpoint-score-attribute) key=score_attribute ;;
        checkpoint-score-order) key=score_order ;; checkpoint-frequency) key=frequency ;;
        checkpoint-at-end) key=at_end ;; stall-warn) key=stall_warn_s ;;
        stall-timeout) key=stall_timeout_s ;; verbose) key=verbose ;;
        esac
        used=$(param "$1" $key)
        case "$shown" in
        "~/"*) shown="$HOME/${shown#\~/}" ;;
        "the job's ranks") shown=$2 ;; "no check") shown=0 ;; "none: newest wins") shown=null ;;
        *"_<date>_<time>") # PROG_YYYY-MM-DD_HH-MM-SS, maybe with -N after it
            case "$used" in "${shown%_<date>_<time>}"_[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]_[0-9][0-9]-[0-9][0-9]-[0-9][0-9]*) shown=$used ;; esac ;;
        off) shown=false ;; on) shown=true ;;
        esac
        [ "$key" = verbose ] && [ "$used" = -1 ] && used=0
        case "$used" in *.0) used=${used%.0} ;; esac
        [ "$shown" = "$used" ] || echo "--$opt: help says '$shown', the run used '$used'"
    done
}
rows() { wc -l <"$1" | tr -d ' '; }

# trainer: its library defaults (name, retention, score, frequency) and its own (epochs, lr)
"$b/tools/trainer" --help >"$help" 2>"$err"
"$run" 1 "$b/tools/trainer" --data "$data" --steps-per-epoch 1 >"$out" 2>"$err"
rc=$?
d="$HOME/mpitrain_results/$(help_default name)"
epochs=$(sed -n 's/^  --epochs N  *default \([0-9]*\)$/\1/p' "$help")
lr=$(sed -n 's/^  --lr X .*, default \([0-9.]*\)$/\1/p' "$help")
lr_used=$(head -n 1 "$d/result.json" 2>/dev/null | sed -n 's/.*"lr":\([0-9.e-]*\).*/\1/p')
diff=$(compare "$d/params.json" 1)
if [ $rc -eq 0 ] && [ -z "$diff" ] && [ "$(help_default name)" = fashion-mnist ] \
    && [ "$(help_default num-to-keep)" = 2 ] && [ "$(help_default checkpoint-score-attribute)" = test_acc ] \
    && [ -n "$epochs" ] && [ "$(rows "$d/result.json")" = "$epochs" ] \
    && awk "BEGIN { exit !($lr_used == $lr) }"; then
    ok "trainer --help: every default it shows is what a run without options used (name, storage, retention, score, $epochs epochs, lr $lr)"
else bad "trainer --help against its run (exit $rc, lr '$lr' vs '$lr_used', epochs '$epochs')"; echo "$diff"; fi

# trainer: the fusion flags. The defaults --help shows (auto, none) are what a 2-rank run
# without them used (auto on one host: shm; each report names the algorithm and the wire
# format), the flags reach the fusion, and a bad value is refused naming the flag
"$b/tools/trainer" --help >"$help" 2>"$err"
fused() { head -n 1 "$HOME/mpitrain_results/$1/result.json" 2>/dev/null | grep -o "\"$2\":\"[a-z0-9]*\"" | sed 's/.*:"\(.*\)"$/\1/'; }
algo_default=$(sed -n 's/^ *how gradients are averaged; default \([a-z]*\) .*/\1/p' "$help")
comp_default=$(sed -n 's/^ *fp32; default \([a-z0-9]*\) .*/\1/p' "$help")
"$run" 2 "$b/tools/trainer" --data "$data" --steps-per-epoch 1 --epochs 1 --name fusion-defaults >"$out" 2>"$err"
rc1=$?
"$run" 2 "$b/tools/trainer" --data "$data" --steps-per-epoch 1 --epochs 1 --name fusion-flags \
    --fusion-algo flat --fusion-compression bf16 >>"$out" 2>>"$err"
rc2=$?
if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$algo_default" = auto ] && [ "$comp_default" = none ] \
    && [ "$(fused fusion-defaults fusion_algo)" = shm ] && [ "$(fused fusion-defaults fusion_compression)" = none ] \
    && [ "$(fused fusion-flags fusion_algo)" = mpi ] && [ "$(fused fusion-flags fusion_compression)" = bf16 ]; then
    ok "trainer --fusion-algo/--fusion-compression: defaults $algo_default/$comp_default ran as shm/none; flat/bf16 ran as mpi/bf16"
else bad "trainer fusion flags (exits $rc1 $rc2, help '$algo_default' '$comp_default', ran '$(fused fusion-defaults fusion_algo)' '$(fused fusion-flags fusion_algo)' '$(fused fusion-flags fusion_compression)')"; fi
"$run" 2 "$b/tools/trainer" --data "$data" --fusion-compression fp8 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 2 ] && grep -q "trainer: --fusion-compression: 'fp8' is not one of none, fp16, bf16" "$err" \
    && [ "$(grep -c "is not one of" "$err")" -eq 1 ]; then
    ok "trainer --fusion-compression fp8: refused once, naming the flag and the choices (exit 2)"
else bad "trainer --fusion-compression fp8 (exit $rc)"; fi

# trainable-example
"$b/tools/trainable-example" --help >"$help" 2>"$err"
"$run" 2 "$b/tools/trainable-example" >"$out" 2>"$err"
rc=$?
d="$HOME/mpitrain_results/$(help_default name)"
its=$(sed -n 's/^  --iterations N .*; default \([0-9]*\)$/\1/p' "$help")
diff=$(compare "$d/params.json" 2)
if [ $rc -eq 0 ] && [ -z "$diff" ] && [ "$(help_default name)" = linear-regression ] \
    && [ -n "$its" ] && [ "$(rows "$d/result.json")" = "$its" ]; then
    ok "trainable-example --help: its defaults are what a run without options used ($its iterations)"
else bad "trainable-example --help against its run (exit $rc, iterations '$its')"; echo "$diff"; fi

# lists_only PROGRAM OPTIONS: PROGRAM --help lists the options OPTIONS (sorted) and no other
lists_only() {
    "$b/$1" --help >"$help" 2>"$err"
    opts=$(sed -n 's/^  \(--[a-z-]*\).*/\1/p' "$help" | sort | tr '\n' ' ')
    if [ "$opts" = "$2 " ]; then ok "${1##*/} --help lists only its options"
    else bad "${1##*/} --help lists: $opts"; fi
}

# mpitrain-info: only its options; nothing written unless asked
lists_only tools/mpitrain-info "--cpus-per-worker --help --name --num-workers --stale-shm --storage-path"
rm -rf "$HOME/mpitrain_results"
"$run" 2 "$b/tools/mpitrain-info" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "^rank 1/2: .* host $(hostname) cpu-list " "$out" \
    && [ ! -e "$HOME/mpitrain_results" ] && [ -z "$(ls -A "$TMPDIR")" ]; then
    ok "mpitrain-info writes no run folder and leaves no temporary file"
else bad "mpitrain-info wrote something (exit $rc): $(ls -A "$HOME" "$TMPDIR" | tr '\n' ' ')"; fi
"$run" 2 "$b/tools/mpitrain-info" --storage-path "$store/kept" >"$out" 2>"$err"
rc=$?
kept=$(ls -d "$store/kept"/mpitrain-info_* 2>/dev/null | head -n 1)
diff=$(compare "$kept/params.json" 2)
if [ $rc -eq 0 ] && [ -n "$kept" ] && [ -f "$kept/run.json" ] && [ -z "$diff" ]; then
    ok "mpitrain-info --storage-path keeps its run there, with the defaults its help shows"
else bad "mpitrain-info --storage-path (exit $rc)"; echo "$diff"; fi
# the environment mpirun gives one rank only: every rank takes rank 0's choice (no storage
# path: a temporary folder), never a collective of its own
"$run" 2 sh -c '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && export MT_STORAGE_PATH="$0"; exec "$1"' \
    "$store/only1" "$b/tools/mpitrain-info" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ ! -e "$store/only1" ] && [ -z "$(ls -A "$TMPDIR")" ]; then
    ok "MT_STORAGE_PATH on rank 1 only: mpitrain-info takes rank 0's choice on both ranks"
else bad "MT_STORAGE_PATH on rank 1 only (exit $rc)"; cat "$err"; fi
"$run" 2 "$b/tools/mpitrain-info" --num-to-keep 2 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 2 ] && grep -q "mpitrain-info: unknown option '--num-to-keep' (see --help)" "$err"; then
    ok "mpitrain-info refuses a library option it does not take (exit 2)"
else bad "mpitrain-info --num-to-keep (exit $rc)"; fi

# mpitrain-bench: only its options; JSON fields; nothing left behind; --fail-on-miss
lists_only benchmarks/mpitrain-bench \
    "--budget-report-us --fail-on-miss --help --json --name --quick --sizes --storage-path --tmpdir --trace"
rm -rf "$HOME/mpitrain_results"
"$run" 2 "$b/benchmarks/mpitrain-bench" --quick --suite shard,report,checkpoint --json "$store/b.jsonl" \
    >"$out" 2>"$err"
rc=$?
version=$(sed -n 's/^Version: //p' "$b/mpitrain.pc")
if [ $rc -eq 0 ] && "$b/tests/jsonl_check" "$store/b.jsonl" shard report checkpoint >>"$out" 2>>"$err" \
    && [ "$(grep -c "\"host\": \"$(hostname)\", \"version\": \"$version\", \"ranks\": 2, \"mode\": \"quick\"" "$store/b.jsonl")" -eq "$(rows "$store/b.jsonl")" ] \
    && grep -q "^== checkpoint: sharded checkpoint commit of 16 to 256 MiB .*(2 ranks, quick)$" "$out" \
    && grep -q "^== shard: a 256 MiB dataset's shards" "$out" \
    && [ ! -e "$HOME/mpitrain_results" ] && [ -z "$(ls -A "$TMPDIR")" ]; then
    ok "mpitrain-bench --quick: JSON lines with date, host, version $version, ranks, mode and budget_met; titles as run; no run folder, no file left"
else bad "mpitrain-bench --quick (exit $rc): left $(ls -A "$HOME" "$TMPDIR" | tr '\n' ' ')"; fi
for case in "1e12 --fail-on-miss 0 true" "0 --fail-on-miss 3 false" "0 --quick 0 false"; do
    set -- $case
    "$run" 2 "$b/benchmarks/mpitrain-bench" --quick --suite report --json "$store/r.jsonl" \
        --budget-report-us "$1" "$2" >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq "$3" ] && grep -q "\"budget_met\": $4}" "$store/r.jsonl" \
        && { [ "$4" = true ] || grep -q "mpitrain-bench: 1 figure missed its budget" "$err"; }; then
        ok "mpitrain-bench --budget-report-us $1 $2: budget_met $4, exit $3"
    else bad "mpitrain-bench --budget-report-us $1 $2 (exit $rc, want $3)"; fi
done
"$run" 2 "$b/benchmarks/mpitrain-bench" --quick --suite report --num-to-keep 3 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 2 ] && grep -q "unknown option '--num-to-keep'" "$err"; then
    ok "mpitrain-bench refuses a library option it does not take (exit 2)"
else bad "mpitrain-bench --num-to-keep (exit $rc)"; fi

# mpitrain-show: a missing --metric named, dates, plain numbers; the plot's script (through a
# stand-in gnuplot that keeps it): y labels, the per-rank band, kept and best checkpoints
# marked, --log, constant columns left out
"$run" 2 "$b/tools/trainer" --data "$data" --storage-path "$store/runs" --name show --epochs 3 \
    --steps-per-epoch 4 --num-to-keep 1 >"$out" 2>"$err"
sed 's/^{/{"constant":7,/' "$store/runs/show/result.json" >"$store/r" && mv "$store/r" "$store/runs/show/result.json"
"$b/tools/mpitrain-show" "$store/runs/show" --plot "$store/x.png" --metric test_acc --metric nope >"$out" 2>"$err"
rc=$?
if [ $rc -eq 1 ] && grep -q "mpitrain-show: --metric nope: no report of .* has a number of that name; its numeric metrics: .*test_acc" "$err" \
    && [ ! -e "$store/x.png" ]; then
    ok "mpitrain-show --metric with a key no report has: named, with the keys there are"
else bad "mpitrain-show --metric nope (exit $rc)"; fi
"$b/tools/mpitrain-show" "$store/runs/show" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -Eq "^  timestamp +20[0-9]{2}-[01][0-9]-[0-3][0-9] [0-9:]{8}\.[0-9]{3} UTC$" "$out" \
    && ! grep -q "e+" "$out"; then
    ok "mpitrain-show: the timestamp as a date, no number in exponent form"
else bad "mpitrain-show dates and numbers (exit $rc)"; fi
mkdir -p "$store/bin"
cat >"$store/bin/gnuplot" <<'GP'
#!/bin/sh
cat >"$GP_SCRIPT"
png=$(sed -n "s/^set output '\(.*\)'$/\1/p" "$GP_SCRIPT")
printf '\211PNG' >"$png"
GP
chmod +x "$store/bin/gnuplot"
GP_SCRIPT="$store/gp" PATH="$store/bin:$PATH" "$b/tools/mpitrain-show" "$store/runs/show" \
    --plot "$store/s.png" --log >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "set ylabel 'test_acc'" "$store/gp" && grep -q "set ylabel 'train_loss'" "$store/gp" \
    && grep -q "filledcurves.*title 'ranks min-max'" "$store/gp" && grep -q "title 'kept checkpoint'" "$store/gp" \
    && grep -q "title 'best checkpoint'" "$store/gp" && grep -q "^set logscale y" "$store/gp" \
    && ! grep -q "'constant'" "$store/gp" && grep -q "constant ones left out" "$out"; then
    ok "mpitrain-show --plot: y labels, the per-rank band, kept and best checkpoints, --log, constant columns left out"
else bad "mpitrain-show --plot script (exit $rc)"; cat "$store/gp"; fi
plain_gp=$(grep -c "resumed here" "$store/gp")

# a run that failed after its 4th report and was run again: rows 1-4 of the first attempt,
# 5-6 of the second (iterations_since_restore 1 2 3 4 1 2); mpitrain-show names the
# resume point and the plot marks it (and only where there is one)
MT_STORAGE_PATH="$store/runs" MT_PROBE_FAIL_AT=4 "$run" 2 -x MT_STORAGE_PATH -x MT_PROBE_FAIL_AT \
    "$b/tests/ckpt_probe" report resumed 6 >"$out" 2>"$err"
MT_STORAGE_PATH="$store/runs" "$run" 2 -x MT_STORAGE_PATH "$b/tests/ckpt_probe" report resumed 6 \
    >"$out" 2>"$err"
rc=$?
since=$(sed -n 's/.*"iterations_since_restore": *\([0-9]*\).*/\1/p' "$store/runs/resumed/result.json" | tr '\n' ' ')
"$b/tools/mpitrain-show" "$store/runs/resumed" >"$out" 2>"$err"
GP_SCRIPT="$store/gp" PATH="$store/bin:$PATH" "$b/tools/mpitrain-show" "$store/runs/resumed" \
    --plot "$store/r.png" >/dev/null 2>&1
if [ $rc -eq 0 ] && [ "$since" = "1 2 3 4 1 2 " ] && grep -q "^resumed    at iteration 5$" "$out" \
    && grep -q "title 'resumed here'" "$store/gp" && [ "$plain_gp" = 0 ]; then
    ok "iterations_since_restore restarts at 1 on a resume; mpitrain-show names and marks iteration 5"
else bad "resume points (exit $rc, iterations_since_restore '$since', plain plot marks $plain_gp)"; cat "$out"; fi

# mpitrain-run: the retries its help states
"$b/tools/mpitrain-run" --help >"$help" 2>"$err"
n=$(sed -n 's/^times (default \([0-9]*\);.*/\1/p' "$help")
"$b/tools/mpitrain-run" --quiet -- sh -c "echo x >>'$store/attempts'; exit 1" >"$out" 2>"$err"
rc=$?
if [ $rc -ne 0 ] && [ -n "$n" ] && [ "$(rows "$store/attempts")" -eq $((n + 1)) ]; then
    ok "mpitrain-run --help: default $n retries, as it does"
else bad "mpitrain-run retries (exit $rc, help says '$n', attempts $(rows "$store/attempts"))"; fi

finish
