#!/bin/sh
# The Python package (python/): its pytest files with the interpreter configure chose
# (MT_PYTHON: Debian's, never a python3 without numpy that comes first on PATH), the build
# tree as the package (PYTHONPATH=$b/python):
#  - python/tests/test_api.py on every rank at once under mpirun at 1, 2, 3 and 4 ranks (make
#    check: 2), and as one process with no launcher: every API point, configs, collectives (mismatches
#    included), checkpoints, retries, an exception on one rank, data, torch, 10,000 calls
#    with flat memory;
#  - python/tests/test_torch.py likewise (skipped without torch): prepare_model's gradients
#    against DDP's (gloo), the models DDP users have, no_sync, mismatched models, a rank
#    failing mid-backward, a model outliving fit, prepare_data_loader; with no launcher a
#    state_dict checkpoint written at 2 ranks and restored at 1 and 3;
#  - python/tests/test_launch.py once: spawn mode, a killed worker, SIGTERM / Ctrl-C /
#    SIGUSR1 stops (exit 75) and their resumes.
# Each run has a timeout; pytest's summary line of each is printed, its counts added to
# this script's closing line (the suite summary adds those up).
set -u
. "${top_srcdir:-.}/tests/lib.sh"
py=${MT_PYTHON:-}
if [ -z "$py" ]; then echo "skipped: built without the Python package (configure found no Python 3 with numpy)"; exit 77; fi
if [ -n "${MT_SANITIZED:-}" ]; then
    # a sanitizer build: the runtime preloaded into the interpreter (tests/python_sanitized.sh)
    exec sh "${top_srcdir:-.}/tests/python_sanitized.sh"
fi
need_tier check
scratch python
src=$(cd "${top_srcdir:-.}/python/tests" && pwd)
PYTHONPATH="$b/python"; export PYTHONPATH
OPENBLAS_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1; export OPENBLAS_NUM_THREADS PYTHONDONTWRITEBYTECODE
limit=$((600 * ${MT_TEST_TIMEOUT_SCALE:-1}))
MT_PYTEST_DATA="$store/data.h5"; MT_PYTEST_STORE="$store/runs"; export MT_PYTEST_DATA MT_PYTEST_STORE
mkdir -p "$MT_PYTEST_STORE"
if ! "$py" "$src/make_data.py" "$MT_PYTEST_DATA" >"$out" 2>"$err"; then bad "the test data file (h5py)"; finish; fi

# pytest_counts LOG: "P F" from pytest's summary line in LOG (errors count as failures)
pytest_counts() {
    line=$(grep -E '^=+ .*(passed|failed|error|skipped).* in [0-9.]+s' "$1" | tail -n 1)
    p=$(echo "$line" | sed -n 's/.* \([0-9][0-9]*\) passed.*/\1/p')
    f=$(echo "$line" | sed -n 's/.* \([0-9][0-9]*\) failed.*/\1/p')
    e=$(echo "$line" | sed -n 's/.* \([0-9][0-9]*\) error.*/\1/p')
    echo "${p:-0} $((${f:-0} + ${e:-0}))"
}
# record WHAT LOG RC: pytest's summary line, its counts into this script's
record() {
    what=$1 log=$2 rc=$3
    line=$(grep -E '^=+ .* in [0-9.]+s' "$log" | tail -n 1)
    echo "$what: ${line:-no pytest summary (exit $rc)}"
    set -- $(pytest_counts "$log")
    checks=$((checks + $1 + $2)); fails=$((fails + $2))
    if [ "$rc" -ne 0 ] && [ "$2" -eq 0 ]; then
        out=$log err=""; bad "$what: exit $rc"
    elif [ "$2" -ne 0 ]; then
        grep -E '^(FAILED|ERROR) ' "$log" | head -n 20
        sed -n '/^=* FAILURES =*$/,/^=* short test summary/p' "$log" | tail -n 60
    fi
}
opts="-p no:cacheprovider -o console_output_style=classic -rfE"

# make check: 2 ranks and no launcher; check-full: 1, 2, 3 and 4 ranks too
nps="2"
tier full && nps="1 2 3 4"
for np in $nps; do
    # every rank runs pytest; each writes its own log
    timeout -k 10 "$limit" mpirun --oversubscribe -np "$np" -x PYTHONPATH -x OPENBLAS_NUM_THREADS -x PYTHONDONTWRITEBYTECODE \
        -x MT_PYTEST_DATA -x MT_PYTEST_STORE -x MT_PYTEST_MODE="np$np" \
        sh -c "cd '$store' && exec '$py' -m pytest $opts --basetemp='$store/tmp-np$np-'\$OMPI_COMM_WORLD_RANK \
            '$src/test_api.py' '$src/test_torch.py' '$src/test_torch_fusion.py' >'$store/np$np.'\$OMPI_COMM_WORLD_RANK 2>&1"
    rc=$?
    [ $rc -eq 124 ] && echo "TIMEOUT: pytest at $np ranks did not finish in ${limit}s"
    for r in $(seq 0 $((np - 1))); do record "test_api.py, test_torch*.py, mpirun -np $np, rank $r" "$store/np$np.$r" $rc; done
done
# no launcher: one process (a singleton MPI job), then the launch tests
(cd "$store" && MT_PYTEST_MODE=plain timeout -k 10 "$limit" "$py" -m pytest $opts \
    --basetemp="$store/tmp-plain" "$src/test_api.py" "$src/test_torch.py" "$src/test_torch_fusion.py" \
    "$src/test_launch.py") \
    >"$store/plain" 2>&1
rc=$?
[ $rc -eq 124 ] && echo "TIMEOUT: pytest without a launcher did not finish in ${limit}s"
record "test_api.py, test_torch*.py, test_launch.py, no launcher" "$store/plain" $rc
finish
