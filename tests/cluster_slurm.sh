#!/bin/sh
# Slurm across emulated nodes (tests/cluster.sh, 2 nodes): one slurmd per node (its own host
# name, address and private TmpFS for PMIx), one slurmctld on the head (its own host name),
# its own munged; everything stopped at the end.
#  - scripts/slurm/train.sbatch with `sbatch -N 2 --ntasks-per-node=2` launches through
#    srun --mpi=pmix: mpitrain-info sees 4 ranks on 2 hosts with node ranks 0 and 1;
#  - the trainer under the same script, sent SIGUSR1 as Slurm does before preemption,
#    checkpoints, requeues itself, resumes on both nodes and completes, every iteration once.
# Plain build only: the sanitized build runs the same code paths in tests/cluster_mpi.sh.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
. "${top_srcdir:-.}/tests/cluster-lib.sh"
cluster_plain_only "Slurm across nodes runs"
src=$(cd "${top_srcdir:-.}" && pwd)
for p in slurmctld slurmd sbatch munged; do
    command -v $p >/dev/null 2>&1 || { bad "$p not installed (scripts/setup.sh --slurm)"; finish; }
done
scratch cluster-slurm
chmod 755 "$store"
cluster_up s 4 2
tmp=$store
state=/run/mpitrain-cluster/$cname
slurm_down() {
    "$cl" -n "$cname" run scontrol shutdown >/dev/null 2>&1
    slurm_stopped "$tmp"
    cluster_down # the slurmd processes with their nodes; slurmctld and munged by MT_CLUSTER_RUN
}
trap slurm_down EXIT

# a munged of this test's own, on its own socket (tests/slurm.sh may start and stop the
# machine's at the same time); a socket is a file, reachable from every node
if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
fi
chown munge:munge /etc/munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p "$tmp/munge" && chown munge:munge "$tmp/munge" && chmod 700 "$tmp/munge"
if ! MT_CLUSTER_RUN=$cname runuser -u munge -- munged --force --socket="$tmp/munge/socket" \
    --pid-file="$tmp/munge/pid" --log-file="$tmp/munge/log" --seed-file="$tmp/munge/seed"; then
    bad "munged did not start"; cat "$tmp/munge/log" 2>/dev/null; finish
fi
mkdir -p "$tmp/state" "$tmp/nodetmp" "$tmp/tmp.${cname}1" "$tmp/tmp.${cname}2"
# PMIx makes a per-step folder under TmpFS: the nodes share one file system, so each gets a
# private folder mounted at the same path (TmpFS) in its own mount namespace
# slurmctld listens on the head's every address: its port is this cluster subnet's own
slurm_conf "$tmp" mpitrain-nodes "${cname}head($cnet.254)" $((20000 + ${csubnet#*.} * 10))
cat >>"$tmp/slurm.conf" <<CONF
AuthInfo=socket=$tmp/munge/socket
TmpFS=$tmp/nodetmp
NodeName=${cname}1 NodeAddr=$cnet.1 CPUs=2 RealMemory=2000 State=UNKNOWN
NodeName=${cname}2 NodeAddr=$cnet.2 CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=nodes Nodes=${cname}[1-2] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
echo "PMIxCliTmpDirBase=$tmp/nodetmp" >"$tmp/mpi.conf"
export SLURM_CONF="$tmp/slurm.conf"
MT_CLUSTER_RUN=$cname unshare --uts --mount --propagation private sh -c \
    'hostname "$1" && mount --bind "$2" /etc/hosts && exec slurmctld' sh "${cname}head" "$state/hosts"
for k in 1 2; do
    "$cl" exec "$cname$k" sh -c 'mount --bind "$1" "$2" && exec slurmd -N "$3"' sh \
        "$tmp/tmp.$cname$k" "$tmp/nodetmp" "$cname$k"
done
sl() { "$cl" -n "$cname" run "$@"; }
for _ in $(seq 1 150); do
    [ "$(sl sinfo -h -N -o %t 2>/dev/null | grep -c idle)" -eq 2 ] && break
    sleep 0.2
done
if [ "$(sl sinfo -h -N -o %t 2>/dev/null | grep -c idle)" -ne 2 ]; then
    bad "Slurm did not bring up both nodes"; sl sinfo -N 2>&1; tail -n 20 "$tmp"/slurm*.log; finish
fi
echo "slurm is up: $(sl sinfo -h -N -o '%N %t' | tr '\n' ' ')"
limit=$((300 * ${MT_TEST_TIMEOUT_SCALE:-1}))

# where the ranks sit: 2 nodes x 2 tasks through srun --mpi=pmix
jid=$(MT_TRAINER="$b/tools/mpitrain-info" timeout $limit "$cl" -n "$cname" run sbatch --parsable --wait \
    -N 2 --ntasks-per-node=2 --output="$tmp/job-info.out" "$src/scripts/slurm/train.sbatch" \
    --storage-path "$tmp/runs" 2>"$err")
rc=$?
cp "$tmp/job-info.out" "$out" 2>/dev/null
if [ $rc -eq 0 ] && grep -q "^rank 0/4: local 0/2 node 0 .* host ${cname}1 " "$out" \
    && grep -q "^rank 1/4: local 1/2 node 0 .* host ${cname}1 " "$out" \
    && grep -q "^rank 2/4: local 0/2 node 1 .* host ${cname}2 " "$out" \
    && grep -q "^rank 3/4: local 1/2 node 1 .* host ${cname}2 " "$out"; then
    ok "sbatch -N 2 --ntasks-per-node=2, srun --mpi=pmix: 4 ranks, node ranks 0 and 1 on ${cname}1 and ${cname}2"
else bad "sbatch -N 2 with mpitrain-info (exit $rc, job '$jid')"; fi

# train, be preempted (SIGUSR1), requeue, resume, complete. The job waits for the test:
# rank 0 pauses inside the commit of checkpoint 1 until the batch script has passed the
# signal on to srun, so the job stops with epochs to spare, whatever the machine's load
fmnist_h5
epochs=8
go="$tmp/go"
jout="$tmp/job-requeue.out"
jid=$(MT_TEST_COMMIT_PAUSE=$limit MT_TEST_COMMIT_PAUSE_AT=1 MT_TEST_COMMIT_RESUME_FILE="$go" \
    MT_TRAINER="$b/tools/trainer" "$cl" -n "$cname" run sbatch --parsable -N 2 --ntasks-per-node=2 \
    --output="$jout" "$src/scripts/slurm/train.sbatch" --data "$data" \
    --storage-path "$tmp/runs" --steps-per-epoch 10 --epochs $epochs 2>"$err")
d="$tmp/runs/mpitrain-$jid"
slurm_log "$jid" "$jout" "test hook: pid [0-9]* pausing" sl
sl scancel --signal=USR1 --batch "$jid"
slurm_log "$jid" "$jout" "SIGUSR1: asking the job to checkpoint and stop" sl
: >"$go"
state_=""; ended=0; pending=0
for _ in $(seq 1 $((limit * 5))); do
    state_=$(sl scontrol show job "$jid" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    [ "$state_" = COMPLETED ] && break
    case "$state_" in FAILED|CANCELLED|TIMEOUT) ended=$((ended + 1)) ;; *) ended=0 ;; esac
    [ $ended -ge 75 ] && break
    # a requeued job is held back for a while; let it start sooner (see tests/slurm.sh)
    case "$state_" in PENDING) pending=$((pending + 1)) ;; *) pending=0 ;; esac
    [ $pending -ge 15 ] && sl scontrol update JobId="$jid" StartTime=now >/dev/null 2>&1
    sleep 0.2
done
cp "$tmp/job-requeue.out" "$out" 2>/dev/null
its=$(column training_iteration "$d/result.json")
want=$(seq 1 $epochs | tr '\n' ' ')
attempts=$(sed -n 's/.*"attempts": *\([0-9]*\).*/\1/p' "$d/run.json" 2>/dev/null)
stopped=$(sed -n 's/.*resumed from .* (epoch \([0-9]*\) done).*/\1/p' "$out" | head -n 1)
if [ "$state_" = COMPLETED ] && grep -q "requeueing" "$out" && [ "$its" = "$want" ] \
    && [ "${attempts:-0}" -ge 2 ] && grep -q '"status": "finished"' "$d/run.json" \
    && ! grep -q '"world_size": *[^4{]' "$d/result.json"; then
    ok "job $jid on 2 nodes: SIGUSR1, checkpoint, requeue, resume after iteration ${stopped:-?} (attempts $attempts), $epochs iterations once each at 4 ranks"
else bad "requeue across nodes (state '$state_', attempts '$attempts', iterations '$its')"; tail -n 20 "$tmp"/slurmctld.log; fi

finish
