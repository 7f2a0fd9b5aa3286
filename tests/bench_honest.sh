#!/bin/sh
# mpitrain-bench gives a figure or a verdict only from a measurement (never a timing
# judged here):
#  - --sizes is checked after its unit against the bound (2G, 1025M, 1048577K refused,
#    naming the value; 1G accepted in full mode), and every size must be one a selected
#    suite measures in that mode (3, and 1G with --quick, refused listing the sizes
#    there are; --sizes with neither the allreduce nor the checkpoint suite refused);
#  - a JSON file that cannot be written (/dev/full) is a non-zero exit naming it, at 1 and
#    2 ranks, with the figures still printed; one in a run directory is refused, unwritten;
#    standard output that cannot be written is exit 1 too;
#  - (root) a full folder: the checkpoint suite's commit and raw write, and the shard
#    suite's dataset file, fail with a non-zero exit naming the file, and no "budget:"
#    verdict and no JSON figure of that suite is printed.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
bench="$b/benchmarks/mpitrain-bench"
scratch bench-honest
unset MT_STORAGE_PATH MT_NAME
export TMPDIR="$store/tmp"
mkdir -p "$TMPDIR"

# --sizes: the unit, then the bound; then sizes a suite measures
for s in 2G 1025M 1048577K; do
    "$bench" --quick --suite allreduce,checkpoint --sizes "$s" >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 2 ] && grep -q -- "--sizes: $s is more than 1 GiB" "$err"; then
        ok "--sizes $s: refused after its unit (more than 1 GiB), naming it"
    else bad "--sizes $s (exit $rc)"; fi
done
"$bench" --quick --suite allreduce,checkpoint --sizes 3 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--sizes: 3 bytes is no size the selected suites measure with --quick (they measure 4,16,64,.*,256M)" "$err"; then
    ok "--sizes 3: no suite measures it: refused, listing the sizes there are"
else bad "--sizes 3 (exit $rc)"; fi
"$bench" --quick --suite checkpoint --sizes 1G >"$out" 2>"$err"
rc=$?
if [ $rc -eq 2 ] && grep -q "1073741824 bytes is no size the selected suites measure with --quick (they measure 16M,64M,256M)" "$err"; then
    ok "--sizes 1G with --quick: the quick checkpoint suite stops at 256 MiB: refused"
else bad "--sizes 1G --quick (exit $rc)"; fi
"$bench" --quick --suite report --sizes 16 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--sizes applies to the allreduce and checkpoint suites, and none of them is selected" "$err"; then
    ok "--sizes with neither suite that takes it: refused"
else bad "--sizes with the report suite only (exit $rc)"; fi

# an output file that cannot be written: a failure, not exit 0
for np in 1 2; do
    "$run" $np "$bench" --quick --suite allreduce --sizes 4 --json /dev/full >"$out" 2>"$err"
    rc=$?
    if [ $rc -eq 1 ] && grep -q "cannot write /dev/full: No space left on device" "$err" && grep -q "^ *4 " "$out"; then
        ok "$np rank(s): --json /dev/full: exit 1 naming the file (the figures still printed)"
    else bad "$np rank(s): --json /dev/full (exit $rc)"; fi
done

# standard output that cannot be written: the table is lost, a failure
"$bench" --quick --suite allreduce --sizes 4 >/dev/full 2>"$err"
rc=$?
if [ $rc -eq 1 ] && grep -q "cannot write the figures to standard output: No space left on device" "$err"; then
    ok "standard output /dev/full: exit 1 naming it"
else bad "standard output /dev/full (exit $rc)"; cat "$err"; fi

# --json into a run directory: refused, the run's file untouched
mkdir -p "$store/arun" && echo '{"status": "finished"}' >"$store/arun/run.json" && echo row >"$store/arun/result.json"
"$run" 1 "$bench" --quick --suite allreduce --sizes 4 --json "$store/arun/result.json" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--json $store/arun/result.json: $store/arun is a run directory" "$err" \
    && [ "$(cat "$store/arun/result.json")" = row ]; then
    ok "--json into a run directory: refused naming it, the run's file untouched"
else bad "--json into a run directory (exit $rc)"; fi

# a full folder: no figure, no verdict, a non-zero exit
if [ "$(id -u)" -ne 0 ]; then echo "skipped: mounting a tmpfs needs root"; finish; fi
disk="$store/disk"
mkdir -p "$disk"
if ! mount -t tmpfs -o size=4m tmpfs "$disk"; then echo "skipped: cannot mount a tmpfs here"; finish; fi
trap 'umount "$disk" 2>/dev/null; rm -rf "$store"' EXIT
"$run" 1 "$bench" --quick --suite checkpoint --sizes 16M --tmpdir "$disk" --json "$store/ck.jsonl" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 1 ] && grep -q "No space left on device" "$err" && grep -q "$disk/" "$err" \
    && ! grep -q "budget:" "$out" && ! grep -q '"suite": "checkpoint"' "$store/ck.jsonl"; then
    ok "checkpoint suite into a full folder: exit 1 naming the file, no figure, no verdict"
else bad "checkpoint suite into a full folder (exit $rc)"; fi
"$run" 1 "$bench" --quick --suite shard --tmpdir "$disk" --json "$store/sh.jsonl" >"$out" 2>"$err"
rc=$?
if [ $rc -eq 1 ] && grep -q "cannot write $disk/.*mpitrain-bench-shard-.*h5" "$err" \
    && ! grep -q "budget:" "$out" && ! grep -q '"suite": "shard"' "$store/sh.jsonl"; then
    ok "shard suite with its dataset in a full folder: exit 1 naming the file, no figure, no verdict"
else bad "shard suite into a full folder (exit $rc)"; fi
finish
