#!/bin/sh
# A full disk under the run directory (a small tmpfs as storage_path; needs root to mount,
# skipped otherwise), ckpt_probe report at 2 ranks:
#  - a checkpoint that does not fit: every rank's error names the file and "No space left
#    on device"; run.json still points at the previous complete checkpoint, result.json's
#    rows are intact, no .tmp is left, and a rerun resumes from it and completes;
#  - a report row that does not fit: the same error for result.json, no partial line, the
#    earlier rows intact.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
probe="$b/tests/ckpt_probe"
check="$b/tests/jsonl_check"
if [ "$(id -u)" -ne 0 ]; then echo "skipped: mounting a tmpfs needs root"; exit 77; fi
store=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-fulldisk-test.XXXXXX")
disk="$store/disk"; out="$store/out"; err="$store/err"
mkdir -p "$disk"
trap 'umount "$disk" 2>/dev/null; rm -rf "$store"' EXIT
if ! mount -t tmpfs -o size=8m tmpfs "$disk"; then
    echo "skipped: cannot mount a tmpfs here"; rm -rf "$store"; trap - EXIT; exit 77
fi
export MT_STORAGE_PATH="$disk"

iters() { sed -n 's/.*"training_iteration":\([0-9]*\).*/\1/p' "$disk/$1/result.json" | tr '\n' ' '; }
latest() { sed -n 's/.*"latest": *"\([a-z0-9_]*\)".*/\1/p' "$disk/$1/run.json"; }
no_tmp() { [ -z "$(find "$disk/$1" -name '*.tmp')" ]; }
ends_with_newline() { [ "$(tail -c 1 "$1" | od -An -c | tr -d ' ')" = '\n' ]; }

# --- a checkpoint of 32 MiB on an 8 MiB disk, at the third report
name=ckfull
MT_PROBE_BIG_AT=3 MT_PROBE_BIG_MIB=32 "$run" 2 -x MT_PROBE_BIG_AT -x MT_PROBE_BIG_MIB \
    "$probe" report "$name" 5 >"$out" 2>"$err"
rc=$?
n=$(grep -c "ckpt_probe: rank [01]: .*$disk/$name/.checkpoint_000002.tmp/checkpoint.h5.*No space left on device" "$err")
if [ $rc -ne 0 ] && [ "$n" -eq 2 ]; then
    ok "a checkpoint that does not fit: every rank's error names checkpoint.h5 and 'No space left on device'"
else bad "checkpoint on a full disk (exit $rc, $n ranks name the file and the reason)"; fi
if [ "$(latest $name)" = checkpoint_000001 ] && [ -f "$disk/$name/checkpoint_000001/checkpoint.h5" ] \
    && [ "$(iters $name)" = "1 2 " ] && "$check" "$disk/$name/result.json" >/dev/null 2>&1 \
    && no_tmp $name && [ ! -e "$disk/$name/checkpoint_000002" ]; then
    ok "nothing committed is lost: run.json points at checkpoint_000001, rows 1 2 intact, no .tmp"
else bad "state after the full disk (latest '$(latest $name)', rows '$(iters $name)')"; ls -la "$disk/$name"; fi
"$run" 2 "$probe" report "$name" 5 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(iters $name)" = "1 2 3 4 5 " ]; then
    ok "with room again, the rerun resumes from checkpoint_000001 and completes (rows 1..5)"
else bad "rerun after the full disk (exit $rc, rows '$(iters $name)')"; fi
rm -rf "${disk:?}/$name"

# --- a report row that does not fit: fill the disk to 64 KiB from full first
name=rowfull
avail=$(df -k --output=avail "$disk" | tail -n 1)
dd if=/dev/zero of="$disk/filler" bs=1k count=$((avail - 64)) 2>/dev/null
MT_PROBE_CKPT_EVERY=0 MT_PROBE_BIG_AT=3 MT_PROBE_BIG_KIB=512 \
    "$run" 2 -x MT_PROBE_CKPT_EVERY -x MT_PROBE_BIG_AT -x MT_PROBE_BIG_KIB \
    "$probe" report "$name" 5 >"$out" 2>"$err"
rc=$?
n=$(grep -c "ckpt_probe: rank [01]: .*$disk/$name/result.json: write failed: No space left on device" "$err")
if [ $rc -ne 0 ] && [ "$n" -eq 2 ] && [ "$(iters $name)" = "1 2 " ] \
    && ends_with_newline "$disk/$name/result.json" && "$check" "$disk/$name/result.json" >/dev/null 2>&1 \
    && no_tmp $name; then
    ok "a row that does not fit: every rank names result.json and 'No space left on device'; rows 1 2 intact, no partial line"
else bad "report row on a full disk (exit $rc, $n ranks, rows '$(iters $name)')"; cat "$disk/$name/result.json" | cut -c 1-200; fi

finish
