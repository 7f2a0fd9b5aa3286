# Sourced by benchmarks/python_bench.sh and benchmarks/torch_bench.sh, whose arguments it
# reads ([BUILD_DIR] [NP]), with bench set to the benchmark's name: top (the source tree),
# b (the build, default build-plain), np (default 2), py (MT_PYTHON, default Debian's
# /usr/bin/python3), tmp (a private folder removed at exit), and the environment the
# ranks need (Open MPI as root and oversubscribed, one BLAS thread, the build's package).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
b=$(cd "${1:-$top/build-plain}" && pwd)
np=${2:-2}
py=${MT_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-$bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1 PYTHONPATH="$b/python"
