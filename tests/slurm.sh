#!/bin/sh
# A real single-node Slurm from Debian's packages (munge, slurmctld, slurmd), configured in
# a temporary folder through SLURM_CONF and stopped afterwards:
#  - scripts/slurm/train.sbatch runs the trainer with srun --mpi=pmix, and with mpirun
#    inside the allocation (sbatch --wait), and the runs finish;
#  - without MT_TRAINER the script finds build-plain/tools/trainer under the submit folder,
#    and says so when there is no trainer anywhere; a request no node can satisfy is
#    refused by sbatch --test-only (too many tasks) or sbatch (too much memory);
#  - scripts/slurm/local.sh brings up a one-node Slurm a job runs on, and stops it;
#  - a running job sent SIGUSR1 (what --signal=B:USR1@N delivers) checkpoints, requeues
#    itself, resumes and completes, with every iteration once in result.json.
set -u
. "${top_srcdir:-.}/tests/lib.sh"
need_tier full
src=$(cd "${top_srcdir:-.}" && pwd)
for p in slurmctld slurmd sbatch munged; do
    command -v $p >/dev/null 2>&1 || { echo "FAILED: $p not installed (scripts/setup.sh --slurm)"; echo "0 passed, 1 failed"; exit 1; }
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpitrain-slurm-test.XXXXXX")
chmod 755 "$tmp"
out="$tmp/out"; err="$tmp/err"
host=$(hostname)
started_munge=0
cleanup() {
    scontrol shutdown >/dev/null 2>&1
    slurm_stopped "$tmp"
    for f in "$tmp"/slurm*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    [ $started_munge -eq 1 ] && [ -f /run/munge/munged.pid ] && kill "$(cat /run/munge/munged.pid)" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

# scripts/slurm/local.sh, what setup.sh --slurm offers users: up, a batch job runs on it
# (sbatch --wait), down; then this test's own Slurm, on its own port
slurm_munge_start || { bad "munged did not start"; finish; }
started_munge=$slurm_started_munge
# every Slurm of this test on ports found free (free_ports), never fixed ones: a second
# checkout running this test at the same time would talk to the first one's slurmctld
lport=$(free_ports 2) || { bad "no two free TCP ports for local.sh's slurmctld and slurmd"; finish; }
if MT_SLURM_PORT=$lport sh "$src/scripts/slurm/local.sh" up "$tmp/local" >"$out" 2>"$err" \
    && grep -q "^export SLURM_CONF=$tmp/local/slurm.conf" "$out" \
    && SLURM_CONF="$tmp/local/slurm.conf" timeout 120 sbatch --wait --output="$tmp/local/job.out" \
        --wrap 'echo ran on $(hostname)' >>"$out" 2>>"$err" \
    && grep -q "^ran on $host" "$tmp/local/job.out" \
    && sh "$src/scripts/slurm/local.sh" down "$tmp/local" >>"$out" 2>>"$err"; then
    ok "scripts/slurm/local.sh up: a one-node Slurm where sbatch --wait runs a job; down stops it"
else bad "scripts/slurm/local.sh up, sbatch, down"; cat "$tmp"/local/slurm*.log 2>/dev/null | tail -n 10
    SLURM_CONF="$tmp/local/slurm.conf" scontrol shutdown >/dev/null 2>&1; fi
mem=$(awk '/MemTotal/ { printf "%d", $2 / 1024 * 0.8 }' /proc/meminfo)
port=$(free_ports 2) || { bad "no two free TCP ports for slurmctld and slurmd"; finish; }
slurm_conf "$tmp" mpitrain-test "$host" "$port"
cat >>"$tmp/slurm.conf" <<CONF
NodeName=$host CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$tmp/slurm.conf"
slurmctld && slurmd
for _ in $(seq 1 100); do
    sinfo -h -o %t 2>/dev/null | grep -q idle && break
    sleep 0.2
done
if ! sinfo -h -o %t 2>/dev/null | grep -q idle; then
    bad "Slurm did not start"; cat "$tmp"/slurm*.log 2>/dev/null | tail -n 20
    finish
fi
echo "slurm is up on $host"

store=$tmp
fmnist_h5
opts="--data $data --storage-path $tmp/runs --steps-per-epoch 20"
limit=$((300 * ${MT_TEST_TIMEOUT_SCALE:-1}))

for launch in srun mpirun; do
    jid=$(MT_LAUNCH=$launch MT_TRAINER="$b/tools/trainer" timeout $limit sbatch --parsable --wait \
        --ntasks=2 --output="$tmp/job-$launch.out" "$src/scripts/slurm/train.sbatch" $opts --epochs 2 2>"$err")
    rc=$?
    d="$tmp/runs/mpitrain-$jid"
    cp "$tmp/job-$launch.out" "$out" 2>/dev/null
    if [ $rc -eq 0 ] && grep -q '"status": "finished"' "$d/run.json" 2>/dev/null \
        && [ "$(wc -l <"$d/result.json")" -eq 2 ] && grep -q "world_size\":2" "$d/result.json"; then
        ok "sbatch --wait with $launch: job $jid finished at 2 ranks, result.json has 2 reports"
    else bad "sbatch with $launch (exit $rc, job '$jid')"; fi
done

# the trainer found without MT_TRAINER: build-plain/tools/trainer under the submit folder;
# with none anywhere, the job says so and exits 2
mkdir -p "$tmp/src/build-plain/tools" "$tmp/empty"
ln -s "$b/tools/trainer" "$tmp/src/build-plain/tools/trainer"
jid=$(cd "$tmp/src" && PATH=/usr/sbin:/usr/bin:/sbin:/bin timeout $limit sbatch --parsable --wait \
    --ntasks=2 --output="$tmp/job-found.out" "$src/scripts/slurm/train.sbatch" $opts --epochs 1 2>"$err")
rc=$?
cp "$tmp/job-found.out" "$out" 2>/dev/null
if [ $rc -eq 0 ] && grep -q "$tmp/src/build-plain/tools/trainer --name" "$out" \
    && grep -q '"status": "finished"' "$tmp/runs/mpitrain-$jid/run.json" 2>/dev/null; then
    ok "train.sbatch without MT_TRAINER finds build-plain/tools/trainer under the submit folder"
else bad "train.sbatch finding the trainer (exit $rc, job '$jid')"; fi
if ! PATH=/usr/sbin:/usr/bin:/sbin:/bin command -v trainer >/dev/null 2>&1; then
    jid=$(cd "$tmp/empty" && PATH=/usr/sbin:/usr/bin:/sbin:/bin timeout $limit sbatch --parsable --wait \
        --ntasks=1 --output="$tmp/job-none.out" "$src/scripts/slurm/train.sbatch" 2>"$err")
    rc=$?
    cp "$tmp/job-none.out" "$out" 2>/dev/null
    if [ $rc -eq 2 ] && grep -q "train.sbatch: cannot find the trainer: no MT_TRAINER, no trainer on PATH" "$out"; then
        ok "train.sbatch with no trainer anywhere: a message and exit 2"
    else bad "train.sbatch without a trainer (exit $rc)"; fi
fi
# a request the node can never satisfy: `sbatch --test-only` (the README's check) refuses
# too many tasks with Slurm's reason, and sbatch itself refuses too much memory (too many
# tasks or nodes would pend with reason PartitionConfig on this partition: Slurm's choice)
timeout 30 sbatch --test-only --ntasks=$(($(nproc) * 64 + 1)) "$src/scripts/slurm/train.sbatch" \
    >"$out" 2>"$err"
rc1=$?
timeout 30 sbatch --parsable --mem=$((mem * 64)) --output="$tmp/job-big.out" \
    "$src/scripts/slurm/train.sbatch" >"$out" 2>>"$err"
rc2=$?
if [ $rc1 -ne 0 ] && [ $rc1 -ne 124 ] && [ $rc2 -ne 0 ] && [ $rc2 -ne 124 ] \
    && [ "$(grep -c "Requested node configuration is not available" "$err")" -eq 2 ]; then
    ok "a request no node can satisfy: sbatch --test-only and a too-large --mem are refused with Slurm's reason"
else bad "an unsatisfiable request (exits $rc1, $rc2)"; scancel "$(cat "$out")" 2>/dev/null; fi

# preemption: SIGUSR1 to the batch script, a checkpoint, a requeue, a resume. The job waits
# for the test: rank 0 pauses inside the commit of checkpoint 1 until the batch script has
# passed the signal on to srun, so the job stops with epochs to spare
epochs=8
go="$tmp/go"
jout="$tmp/job-requeue.out"
jid=$(MT_TEST_COMMIT_PAUSE=$limit MT_TEST_COMMIT_PAUSE_AT=1 MT_TEST_COMMIT_RESUME_FILE="$go" \
    MT_TRAINER="$b/tools/trainer" sbatch --parsable --ntasks=2 --output="$jout" \
    "$src/scripts/slurm/train.sbatch" $opts --epochs $epochs 2>"$err")
d="$tmp/runs/mpitrain-$jid"
slurm_log "$jid" "$jout" "test hook: pid [0-9]* pausing"
scancel --signal=USR1 --batch "$jid"
slurm_log "$jid" "$jout" "SIGUSR1: asking the job to checkpoint and stop"
: >"$go"
state=""; ended=0; pending=0
for _ in $(seq 1 $((limit * 5))); do
    state=$(scontrol show job "$jid" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
    [ "$state" = COMPLETED ] && break
    # a requeue passes through CANCELLED or FAILED for a moment: only a lasting one counts
    case "$state" in FAILED|CANCELLED|TIMEOUT) ended=$((ended + 1)) ;; *) ended=0 ;; esac
    [ $ended -ge 75 ] && break
    # Slurm holds a requeued job back for a while (its begin time); let it start sooner,
    # but not at once: a launch credential issued before slurmd has revoked the killed
    # run's is refused ("Job credential revoked") and the job fails
    case "$state" in PENDING) pending=$((pending + 1)) ;; *) pending=0 ;; esac
    [ $pending -ge 15 ] && scontrol update JobId="$jid" StartTime=now >/dev/null 2>&1
    sleep 0.2
done
cp "$tmp/job-requeue.out" "$out" 2>/dev/null
its=$(sed -n 's/.*"training_iteration": *\([0-9]*\).*/\1/p' "$d/result.json" 2>/dev/null | tr '\n' ' ')
want=$(seq 1 $epochs | tr '\n' ' ')
attempts=$(sed -n 's/.*"attempts": *\([0-9]*\).*/\1/p' "$d/run.json" 2>/dev/null)
stopped=$(sed -n 's/.*resumed from .* (epoch \([0-9]*\) done).*/\1/p' "$out" | head -n 1)
if [ "$state" = COMPLETED ] && grep -q "requeueing" "$out" && [ "$its" = "$want" ] \
    && [ "${attempts:-0}" -ge 2 ] && grep -q '"status": "finished"' "$d/run.json"; then
    ok "SIGUSR1 to job $jid: checkpointed, requeued, resumed after iteration ${stopped:-?} (attempts $attempts), $epochs iterations once each"
else bad "requeue on SIGUSR1 (state '$state', attempts '$attempts', iterations '$its')"; fi

finish
