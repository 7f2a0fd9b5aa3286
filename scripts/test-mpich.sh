#!/bin/sh
# scripts/test-mpich.sh [DIR]: the MPICH leg of the tests. Builds against MPICH out of tree
# in DIR (default build-mpich; configure --with-mpi=mpich --enable-werror --without-python
# (Debian's h5py and mpi4py are Open MPI's: python.sh is Open MPI only), HDF5 from
# libhdf5-mpich-dev) and runs there the unit tests (tests/unit.sh, tests/symbols.sh) and
# every CUnit MPI suite at 2 ranks, launched by MPICH's mpiexec (tests/mpirun.sh). The
# scripts that need Open MPI skip under MPICH, saying why (tests/lib.sh; docs/clusters.md).
# Needs Debian's mpich, libmpich-dev and libhdf5-mpich-dev (scripts/setup.sh --mpich);
# exits 77 (skipped) without them. Prints the tests' summary and the seconds it took.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$top/build-mpich}
start=$(date +%s)
for p in mpicc.mpich mpirun.mpich; do
    command -v $p >/dev/null 2>&1 || {
        echo "test-mpich: skipped: no $p (install MPICH: sh scripts/setup.sh --mpich)"; exit 77; }
done
pkg-config --exists hdf5-mpich 2>/dev/null || command -v h5pcc.mpich >/dev/null 2>&1 || {
    echo "test-mpich: skipped: no parallel HDF5 for MPICH (sh scripts/setup.sh --mpich)"; exit 77; }
sh "$top/scripts/build.sh" "$dir" --with-mpi=mpich --enable-werror --without-python
suites=$(sed -n 's/.*\(tests\/test_mpi_[a-z]*-np2\.mpi\).*/\1/p' "$top/Makefile.am" | sort -u | tr '\n' ' ')
[ -n "$suites" ] || { echo "test-mpich: no 2-rank suites found in Makefile.am" >&2; exit 1; }
rc=0
make -C "$dir" -j"$(nproc)" check MT_TEST_TIER=check TESTS="tests/unit.sh tests/symbols.sh $suites" \
    >"$dir/test-mpich.log" 2>&1 || rc=$?
grep -E '^(PASS|FAIL|ERROR|SKIP|XPASS):|^# (TOTAL|PASS|SKIP|FAIL|ERROR)' "$dir/test-mpich.log" || true
for t in $(sed -n 's/^\(FAIL\|ERROR\): //p' "$dir/test-mpich.log"); do
    echo "--- $dir/${t%.*}.log"; tail -n 20 "$dir/${t%.*}.log"
done
echo "test-mpich: $(grep -c '^PASS:' "$dir/test-mpich.log") passed, exit $rc, $(( $(date +%s) - start )) s (build and tests, $dir)"
exit $rc
