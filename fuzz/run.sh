#!/bin/sh
# fuzz/run.sh [--minutes M] [--build-dir DIR] [--seeds] [HARNESS...]: fuzz the readers of
# hostile input with AFL++ (scripts/setup.sh --fuzz installs it).
#   HARNESS    fuzz_import (IDX gzip/plain, CSV), fuzz_ckpt (checkpoint.h5 on restore),
#              fuzz_result (mt_result_load, run.json/result.json/params.json/error.txt);
#              default: all three, one after the other (each gets the whole machine)
#   --minutes  how long each harness runs (default 10)
#   --build-dir where the afl-cc + ASan/UBSan build goes (default build-fuzz, out of tree)
#   --seeds    rewrite fuzz/seeds/ with fuzz/mkseeds first (after a format change)
# Findings land in DIR/out/HARNESS/default/{crashes,hangs}; replay one with
# `DIR/fuzz/HARNESS FILE`, and once fixed copy it to fuzz/regressions/HARNESS/, where
# `make check` (fuzz/replay.sh) replays it from then on. Prints execs, execs/s, paths,
# crashes and hangs per harness; exits 1 if any harness found a crash or a hang.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
minutes=10 dir=$top/build-fuzz seeds=0 harnesses=""
while [ $# -gt 0 ]; do
    case "$1" in
    --minutes) minutes=$2; shift ;;
    --minutes=*) minutes=${1#*=} ;;
    --build-dir) dir=$2; shift ;;
    --build-dir=*) dir=${1#*=} ;;
    --seeds) seeds=1 ;;
    fuzz_import | fuzz_ckpt | fuzz_result) harnesses="$harnesses $1" ;;
    -h | --help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$harnesses" ] || harnesses="fuzz_import fuzz_ckpt fuzz_result"
command -v afl-fuzz >/dev/null && command -v afl-cc >/dev/null || {
    echo "run.sh: AFL++ not found: scripts/setup.sh --fuzz installs it" >&2; exit 2; }
case "$dir" in /*) ;; *) dir=$(pwd)/$dir ;; esac

# The library objects and the harnesses, instrumented: mpicc drives afl-cc. Only the
# harnesses are built (and what they link).
export OMPI_CC=afl-cc AFL_QUIET=1
[ -x "$top/configure" ] || (cd "$top" && autoreconf -fi >/dev/null)
mkdir -p "$dir"
[ -f "$dir/Makefile" ] || (cd "$dir" && "$top/configure" -q --enable-sanitizers=address,undefined)
# shellcheck disable=SC2086
make -C "$dir" -s -j2 $(for h in $harnesses mkseeds; do printf 'fuzz/%s ' "$h"; done) >/dev/null
[ "$seeds" = 0 ] || "$dir/fuzz/mkseeds" "$top/fuzz/seeds"

export AFL_SKIP_CPUFREQ=1 AFL_NO_UI=1 AFL_NO_AFFINITY=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1
export AFL_SKIP_CRASHES=1 HDF5_USE_FILE_LOCKING=FALSE
mkdir -p "$dir/tmp"
export TMPDIR=$dir/tmp
found=0
summary=""
for h in $harnesses; do
    out=$dir/out/$h
    rm -rf "$out"; mkdir -p "$dir/out"
    echo "run.sh: fuzzing $h for $minutes min (findings in $out/default)"
    afl-fuzz -i "$top/fuzz/seeds/$h" -o "$out" -V $((minutes * 60)) -m none -t 5000 \
        -- "$dir/fuzz/$h" >"$dir/out/$h.log" 2>&1 || true
    stats=$out/default/fuzzer_stats
    if [ ! -f "$stats" ]; then
        echo "run.sh: $h did not start; see $dir/out/$h.log" >&2
        tail -n 20 "$dir/out/$h.log" >&2
        found=1
        continue
    fi
    get() { sed -n "s/^$1 *: *//p" "$stats"; }
    crashes=$(get saved_crashes) hangs=$(get saved_hangs)
    [ "${crashes:-0}" = 0 ] && [ "${hangs:-0}" = 0 ] || found=1
    summary="$summary$(printf '%-12s %12s %10s %8s %8s %6s %6s' "$h" "$(get execs_done)" \
        "$(get execs_per_sec)" "$(get corpus_count)" "$(get run_time)" "$crashes" "$hangs")
"
done
printf '%-12s %12s %10s %8s %8s %6s %6s\n' harness execs execs/s paths seconds crashes hangs
printf '%s' "$summary"
exit $found
