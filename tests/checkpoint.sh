#!/bin/sh
# Checkpoints across world sizes, with a bounded rank 0, across a crash of rank 0 in the
# middle of a commit, and with damaged metadata (layout, offsets, shape, dtype, names,
# metadata, damaged HDF5 bytes, no checksum header): the damaged one is skipped with a
# warning saying what, the previous one used.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier check
probe="$b/tests/ckpt_probe"
scratch ckpt
export MT_STORAGE_PATH="$store"

# make check: one case of each (2 -> 3 ranks, 256 MiB from 2 ranks); the full tier: 4 -> 2
# and 1 GiB from 2 and 4 ranks as well
pairs='"2 3" "4 2"' mib=1024 nps="2 4"
tier full || { pairs='"2 3"' mib=256 nps=2; }
# sharded restore at another world size: saved at 2, restored at 3; saved at 4, restored at 2
eval "set -- $pairs"
for pair in "$@"; do
    set -- $pair
    name="resplit-$1-$2"
    "$run" "$1" "$probe" save "$name" 1001 >"$out" 2>"$err"
    "$run" "$2" "$probe" load "$name" 1001 >"$out" 2>"$err"
    rc=$?
    n=$(grep -c ": ok$" "$out")
    if [ $rc -eq 0 ] && [ "$n" -eq "$2" ]; then ok "sharded checkpoint saved at $1 ranks, restored at $2"
    else bad "sharded restore $1 -> $2 (exit $rc, $n ranks ok)"; fi
done

# rank 0 holds at most one buffer (64 MiB) of the others' data, plus a small constant
# (1 GiB; 256 MiB under the sanitizers, whose shadow memory makes the figure moot anyway)
[ -n "${MT_SANITIZED:-}" ] && mib=256
for np in $nps; do
    "$run" "$np" "$probe" big "big-$np" $mib >"$out" 2>"$err"
    rc=$?
    grew=$(sed -n 's/.*memory grew by \([0-9-]*\) MiB.*/\1/p' "$out")
    echo "  $(cat "$out")"
    if [ $rc -eq 0 ] && [ -n "$grew" ] && [ "$grew" -le 96 ]; then
        ok "$mib MiB from $np ranks: rank 0 grew by $grew MiB (bound: 64 MiB buffer + 32 MiB)"
    else bad "$mib MiB from $np ranks (exit $rc, grew '${grew:-?}' MiB)"; fi
    rm -rf "$store/big-$np"
done

# SIGKILL of rank 0 while it writes the second checkpoint: the first still loads
name=crash
: >"$err" # emptied before the job starts: the pid read is this job's
MT_TEST_COMMIT_PAUSE=60 MT_TEST_COMMIT_PAUSE_AT=1 \
    "$run" 2 -x MT_TEST_COMMIT_PAUSE -x MT_TEST_COMMIT_PAUSE_AT "$probe" twice "$name" 100 >"$out" 2>"$err" &
job=$!
pid=""
for _ in $(seq 1 300); do
    pid=$(sed -n 's/.*test hook: pid \([0-9]*\) pausing.*/\1/p' "$err" | tail -n 1)
    [ -n "$pid" ] && break
    sleep 0.1
done
[ -n "$pid" ] && kill -9 "$pid"
wait $job
if [ -d "$store/$name/checkpoint_000000" ] && [ ! -d "$store/$name/checkpoint_000001" ]; then
    ok "after SIGKILL in a commit: checkpoint_000000 kept, no checkpoint_000001"
else bad "state after SIGKILL in a commit"; ls -la "$store/$name"; fi
# and a checkpoint retention dropped that a crash left half removed
mkdir -p "$store/$name/.checkpoint_000007.drop" && echo x >"$store/$name/.checkpoint_000007.drop/checkpoint.h5"
"$run" 2 "$probe" load "$name" 100 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && grep -q "checkpoint_000000: ok" "$out" && [ "$(grep -c ': ok$' "$out")" -eq 2 ] \
    && ! ls -d "$store/$name"/.checkpoint_*.tmp >/dev/null 2>&1 \
    && [ ! -e "$store/$name/.checkpoint_000007.drop" ]; then
    ok "rerun resumes from checkpoint_000000; the half-written one and a dropped one are removed"
else bad "resume after the crash (exit $rc)"; fi

# damaged NP WHAT WHY: the latest of two checkpoints saved at NP ranks (a copy of the run
# saved-NP), damaged by `ckpt_probe damage FILE WHAT`: the resume at NP ranks skips it with
# a warning naming the file and WHY, and every rank gets its rows from the previous one.
# Damaged metadata (layout, offsets, shape, dtype, name, meta: through the HDF5 API; an
# array dropped or added; the format attribute gone) is found by the checks of the
# checkpoint's index; damaged bytes in the HDF5 metadata (16 bytes of the root object
# header flipped: such damage crashed libhdf5 1.10 in H5Aopen/H5Aiterate2) and an HDF5 file
# without the checksum header (every checkpoint written before it existed) are refused
# before HDF5 parses them.
damaged() {
    name="damaged-$2-$1"
    cp -a "$store/saved-$1" "$store/$name"
    h5="$store/$name/checkpoint_000001/checkpoint.h5"
    "$probe" damage "$h5" "$2" >"$out" 2>"$err" || { bad "$1 ranks: damaging $2"; return; }
    "$run" "$1" "$probe" load "$name" 600 >"$out" 2>"$err"
    rc=$?
    n=$(grep -c "checkpoint_000000: ok$" "$out")
    case $2 in bytes | bare) index="" ;; *) index="corrupt checkpoint index: .*" ;; esac
    if [ $rc -eq 0 ] && [ "$n" -eq "$1" ] \
        && grep -q "warning: skipping $store/$name/checkpoint_000001: $h5: $index$3" "$err"; then
        ok "$1 ranks: $2: skipped with a warning ($3), resumed from checkpoint_000000"
    else bad "$1 ranks: $2 (exit $rc, $n ranks ok from checkpoint_000000)"; cat "$err"; fi
}
# every case at 1 and 2 ranks; at 3 ranks (plain build) the two that decide which rows a
# rank gets
nps="1 2 3"
[ -n "${MT_SANITIZED:-}" ] && nps="1 2"
for np in $nps; do
    "$run" "$np" "$probe" twice "saved-$np" 600 >"$out" 2>"$err" # stops with an error, resumable
    [ -d "$store/saved-$np/checkpoint_000001" ] || { bad "$np ranks: saving two checkpoints"; continue; }
    for what in layout offsets shape dtype name meta drop add unformat bytes bare; do
        [ "$np" -eq 3 ] && [ "$what" != offsets ] && [ "$what" != layout ] && continue
        case $what in
        layout) why="array rows: the checksum of its layout does not match" ;;
        offsets) why="array rows: the checksum of its row offsets does not match" ;;
        shape) why="array rows: the checksum of its shape does not match" ;;
        dtype) why="array rows: the checksum of its dtype does not match" ;;
        name) why="array rows: the checksum of its name does not match" ;;
        meta) why="the checksum of its metadata does not match" ;;
        drop) why="the checksum of its list of arrays does not match" ;;
        add) why="array extra: the checksum of its name does not match" ;;
        unformat) why="its arrays carry checks but the file has no format attribute" ;;
        bytes) why="damaged: the checksum of its HDF5 metadata does not match its header" ;;
        bare) why="an HDF5 file without a checkpoint checksum header" ;;
        esac
        damaged "$np" "$what" "$why"
    done
done

# a checkpoint without the index checks (the format before them) still loads
name=legacy
cp -a "$store/saved-2" "$store/$name"
"$probe" damage "$store/$name/checkpoint_000001/checkpoint.h5" legacy >"$out" 2>"$err"
"$run" 2 "$probe" load "$name" 600 >"$out" 2>"$err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c "checkpoint_000001: ok$" "$out")" -eq 2 ] && ! grep -q skipping "$err"; then
    ok "a checkpoint without the index checks (the earlier format) still loads"
else bad "loading the earlier format (exit $rc)"; fi

finish
