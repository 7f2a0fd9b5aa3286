#!/bin/sh
# scripts/setup.sh [--example] [--slurm] [--bench] [--fuzz] [--mpich]: install what mpitrain needs from Debian's
# package archive, only what is missing (idempotent; needs root or sudo on Debian 12).
#   base:      compilers and libraries to build and test (Open MPI, parallel HDF5,
#              CUnit, jansson, OpenBLAS, autotools; iproute2 for the emulated cluster;
#              Debian's python3 with numpy, its headers, pytest, pandas, h5py and torch for
#              the Python package and its tests)
#   --example: the Fashion-MNIST data set and gnuplot, for the example job
#   --slurm:   slurm-wlm and munge (the Slurm tests; for a one-node Slurm on this machine,
#              where the sbatch lines of docs/clusters.md work: scripts/slurm/local.sh up)
#   --bench:   PyTorch (python3-torch, in base too), the DDP baseline of the benchmarks (ddp_mlp.py,
#              cluster_bench.sh); the tests do not need it
#   --fuzz:    AFL++, for fuzz/run.sh (not needed by the build or the tests)
#   --mpich:   MPICH and its parallel HDF5 (mpich libmpich-dev libhdf5-mpich-dev), for a
#              build with ./configure --with-mpi=mpich (scripts/test-mpich.sh). Open MPI
#              stays the system's MPI: Debian's alternatives that MPICH also provides (mpi:
#              mpicc and its kin, mpirun, h5pcc, hdf5.pc, the MPI headers) are pinned to
#              their Open MPI choice before the install and checked after it, so mpicc,
#              mpirun and pkg-config hdf5 still mean Open MPI for every other build here
set -eu
pkgs="build-essential openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools libcunit1-dev
      libjansson-dev zlib1g-dev libisal-dev libopenblas-dev autoconf automake libtool pkg-config iproute2
      python3-numpy python3-dev python3-pytest python3-pandas python3-h5py python3-torch"
for arg in "$@"; do
    case "$arg" in
    --example) pkgs="$pkgs dataset-fashion-mnist gnuplot-nox" ;;
    --slurm) pkgs="$pkgs slurm-wlm munge" ;;
    --bench) pkgs="$pkgs python3-torch" ;;
    --fuzz) pkgs="$pkgs afl++" ;;
    --mpich) pkgs="$pkgs mpich libmpich-dev libhdf5-mpich-dev"; mpich=yes ;;
    -h | --help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (see --help)" >&2; exit 2 ;;
    esac
done
# The alternatives MPICH's packages add choices to: each is pinned (manual mode) to its
# Open MPI value, which MPICH's lower priority would not take anyway in auto mode, but a
# group left in auto mode with a broken or missing Open MPI choice would switch.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -dumpmachine)
alternatives="mpi mpirun h5pcc hdf5.pc mpi-$arch"
pin_openmpi() { # pin_openmpi [check]: each group set to its current value, or (check) fixed
    for a in $alternatives; do
        cur=$(update-alternatives --query "$a" 2>/dev/null | sed -n 's/^Value: //p')
        [ -n "$cur" ] || continue
        case "$cur" in
        *mpich*)
            # hdf5.pc's Open MPI choice is hdf5-mpi.pc, which follows the mpi group
            want=$(update-alternatives --list "$a" | grep -E 'openmpi|hdf5-mpi\.pc' | sort | head -n 1)
            [ -n "$want" ] || { echo "setup: $a points at $cur and has no Open MPI choice" >&2; exit 1; }
            echo "setup: $a pointed at $cur; set back to $want"
            $sudo update-alternatives --set "$a" "$want" >/dev/null ;;
        *) [ "${1:-}" = check ] || $sudo update-alternatives --set "$a" "$cur" >/dev/null ;;
        esac
    done
    if [ "${1:-}" = check ]; then
        mpicc -showme >/dev/null 2>&1 || { echo "setup: mpicc is not Open MPI's after the install (mpicc -showme failed)" >&2; exit 1; }
        echo "setup: Open MPI is still the default (mpicc -showme: $(mpicc -showme | cut -c1-60)...)"
    fi
}
mpich=${mpich:-}
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
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
    [ -z "$mpich" ] || pin_openmpi check
    offer "$@"
    exit 0
fi
echo "setup: installing$missing"
[ -z "$mpich" ] || pin_openmpi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
[ -z "$mpich" ] || pin_openmpi check
echo "setup: done"
offer "$@"
