#!/bin/sh
# scripts/slurm/local.sh up|down [DIR]: a one-node Slurm on this machine (as root), the
# set-up the tests use (scripts/slurm/conf.sh): munge, then slurmctld and slurmd with a
# slurm.conf in DIR (default /var/tmp/mpitrain-slurm), this machine's CPUs and 80% of its
# memory in one partition. `up` prints the line to export; then the sbatch lines of
# docs/clusters.md work here. `down` stops the two daemons (munge stays).
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/scripts/slurm/conf.sh"
cmd=${1:-}
dir=${2:-/var/tmp/mpitrain-slurm}
case "$cmd" in
up)
    [ "$(id -u)" -eq 0 ] || { echo "local.sh: run as root (the daemons run as root here)" >&2; exit 2; }
    for p in slurmctld slurmd sbatch munged; do
        command -v $p >/dev/null 2>&1 || { echo "local.sh: $p is not installed: sh scripts/setup.sh --slurm" >&2; exit 1; }
    done
    slurm_munge_start || { echo "local.sh: munged did not start" >&2; exit 1; }
    mkdir -p "$dir"
    chmod 755 "$dir"
    host=$(hostname)
    mem=$(awk '/MemTotal/ { printf "%d", $2 / 1024 * 0.8 }' /proc/meminfo)
    slurm_conf "$dir" mpitrain-local "$host" "${MT_SLURM_PORT:-6927}"
    cat >>"$dir/slurm.conf" <<CONF
NodeName=$host CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
    SLURM_CONF="$dir/slurm.conf"
    export SLURM_CONF
    slurmctld
    slurmd
    for _ in $(seq 1 100); do
        sinfo -h -o %t 2>/dev/null | grep -q idle && break
        sleep 0.2
    done
    if ! sinfo -h -o %t 2>/dev/null | grep -q idle; then
        echo "local.sh: the node did not come up; the logs are $dir/slurm*.log" >&2
        exit 1
    fi
    echo "local.sh: Slurm is up on $host (one node, $(nproc) CPUs); for sbatch, srun and sinfo:"
    echo "export SLURM_CONF=$dir/slurm.conf"
    ;;
down)
    SLURM_CONF="$dir/slurm.conf"
    export SLURM_CONF
    [ -f "$SLURM_CONF" ] || { echo "local.sh: no Slurm set up in $dir" >&2; exit 1; }
    scontrol shutdown >/dev/null 2>&1 || true
    slurm_stopped "$dir" || true
    echo "local.sh: Slurm in $dir stopped"
    ;;
*)
    sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'
    [ "$cmd" = -h ] || [ "$cmd" = --help ] || exit 2
    ;;
esac
