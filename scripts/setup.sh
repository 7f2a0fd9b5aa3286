#!/bin/sh
# scripts/setup.sh [--example] [--slurm] [--bench] [--fuzz]: install what mpitrain needs from Debian's
# package archive, only what is missing (idempotent; needs root or sudo on Debian 12).
#   base:      compilers and libraries to build and test (Open MPI, parallel HDF5,
#              CUnit, jansson, OpenBLAS, autotools; iproute2 for the emulated cluster)
#   --example: the Fashion-MNIST data set and gnuplot, for the example job
#   --slurm:   slurm-wlm and munge (the Slurm tests; for a one-node Slurm on this machine,
#              where the sbatch lines of docs/clusters.md work: scripts/slurm/local.sh up)
#   --bench:   PyTorch (python3-torch), the DDP baseline of the benchmarks (ddp_mlp.py,
#              cluster_bench.sh); the tests do not need it
#   --fuzz:    AFL++, for fuzz/run.sh (not needed by the build or the tests)
set -eu
pkgs="build-essential openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools libcunit1-dev
      libjansson-dev zlib1g-dev libisal-dev libopenblas-dev autoconf automake libtool pkg-config iproute2"
for arg in "$@"; do
    case "$arg" in
    --example) pkgs="$pkgs dataset-fashion-mnist gnuplot-nox" ;;
    --slurm) pkgs="$pkgs slurm-wlm munge" ;;
    --bench) pkgs="$pkgs python3-torch" ;;
    --fuzz) pkgs="$pkgs afl++" ;;
    -h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
    esac
done
missing=""
for p in $pkgs; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
    [ "$status" = "installed" ] || missing="$missing $p"
done
offer() { # what --slurm installs does not configure a Slurm: say how to get one
    case " $* " in *" --slurm "*)
        echo "setup: a one-node Slurm on this machine (root): sh scripts/slurm/local.sh up" ;;
    esac
}
if [ -z "$missing" ]; then
    echo "setup: all packages present"
    offer "$@"
    exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "setup: installing$missing"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
echo "setup: done"
offer "$@"
