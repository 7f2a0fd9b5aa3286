# scripts/slurm/conf.sh, sourced: the pieces of a Slurm on this machine that
# scripts/slurm/local.sh (a one-node Slurm for users) and the tests (tests/slurm.sh, one
# node; tests/cluster_slurm.sh, emulated nodes) share.
# slurm_conf DIR CLUSTER HOST PORT: DIR/slurm.conf with what the Slurm tests share:
# slurmctld on HOST (Slurm's "name(address)" allowed) at PORT, slurmd at PORT + 1, both as
# root, munge, and state, spool, pid and log files in DIR (a node's with its name, %n);
# processes tracked through /proc, no task plugin, cores as the unit, requeue allowed.
# The caller appends its own settings, nodes and partition.
slurm_conf() {
    mkdir -p "$1/state"
    cat >"$1/slurm.conf" <<CONF
ClusterName=$2
SlurmctldHost=$3
SlurmctldPort=$4
SlurmdPort=$(($4 + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$1/state
SlurmdSpoolDir=$1/spool.%n
SlurmctldPidFile=$1/slurmctld.pid
SlurmdPidFile=$1/slurmd.%n.pid
SlurmctldLogFile=$1/slurmctld.log
SlurmdLogFile=$1/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
JobRequeue=1
SchedulerType=sched/backfill
CONF
}

# slurm_stopped DIR: waits until none of the daemons whose pid files are in DIR (slurm*.pid)
# runs; false after 20 s
slurm_stopped() {
    for _ in $(seq 1 200); do
        alive=""
        for f in "$1"/slurm*.pid; do [ -s "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null && alive=1; done
        [ -z "$alive" ] && return 0
        sleep 0.1
    done
    return 1
}

# munge for Slurm's authentication, started if it does not answer: its own user must own
# its folders (as root munged refuses to start). slurm_started_munge=1 when this started it.
slurm_started_munge=0
slurm_munge_start() {
    munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
    mkdir -p /run/munge /etc/munge /var/lib/munge /var/log/munge
    [ -s /etc/munge/munge.key ] || { dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null; chmod 400 /etc/munge/munge.key; }
    chown -R munge:munge /run/munge /etc/munge /var/lib/munge /var/log/munge
    runuser -u munge -- munged --force || return 1
    slurm_started_munge=1
    for _ in $(seq 1 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}
