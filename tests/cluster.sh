#!/bin/sh
# tests/cluster.sh -- an emulated cluster on one Linux machine, for the tests and by hand.
#
# Each node is a network namespace with a veth link into a bridge; processes started on a
# node (`exec`, or Open MPI through the rsh agent tests/cluster-rsh) also get their own UTS
# namespace with the node's host name, and a private /etc/hosts that names every node, so
# no name is ever looked up on the network. The head (where mpirun, slurmctld and the test
# run) is the root namespace, on the bridge's address. The subnet exists only on that
# bridge: the nodes have no other route, and nothing is sent to any other address.
#
#   cluster.sh [-n NAME] [-s A.B.C] up N     nodes NAME1..NAMEN at A.B.C.1..N (default mtc,
#                                            10.77.0); the head is A.B.C.254 ("NAMEhead")
#   cluster.sh [-n NAME] down                remove all of it (namespaces, links, the nodes'
#                                            processes, and those `run` started on the
#                                            head); also after a killed run
#   cluster.sh [-n NAME] hostfile S1 S2 ...  write a hostfile (S1 slots on node 1, ...), print its path
#   cluster.sh [-n NAME] run [--ompi-defaults] CMD...   run CMD on the head with the
#                                            cluster's Open MPI settings (rsh agent, TCP
#                                            limited to the subnet); --ompi-defaults: without
#                                            the TCP keepalive settings (Open MPI's own, as on
#                                            a cluster whose user never set them)
#   cluster.sh [-n NAME] env [--ompi-defaults]  print those settings as shell exports
#   cluster.sh exec NODE CMD...              run CMD on NODE (any cluster)
#   cluster.sh [-n NAME] kill NODE           kill every process of NODE and keep it dead
#                                            (the rsh agent refuses it, as ssh to a dead host)
#   cluster.sh [-n NAME] link NODE up|down   plug or pull NODE's cable
#   cluster.sh [-n NAME] hosts               the nodes that answer, "NODE slots=S" (S from
#                                            the last hostfile): a host-discovery command
#   cluster.sh [-n NAME] shape NODE|all none|10gbit|1gbit   tbf on both ends of NODE's link
#   cluster.sh [-n NAME] bandwidth [A B [MiB]]  TCP stream from node A to node B, in Gbit/s
#   cluster.sh [-n NAME] cpus NODE|all LIST|spread|none   the CPUs NODE's processes may use
#                                            (taskset -c LIST; spread: node k gets CPU
#                                            (k-1) mod the machine's CPUs; none: any)
#
# MT_CLUSTER and MT_CLUSTER_NET give NAME and A.B.C instead of -n and -s.
# Needs root (namespaces, links, tc). Open MPI's busy polling starves the kernel's packet
# processing when the nodes share a few cores (every message then waits a scheduler tick),
# so the settings include mpi_yield_when_idle=1. mpirun learns that a node is unreachable
# only from TCP keepalives on its daemon's connection (by default after 300 s + 9 x 20 s;
# until then an abort waits for that daemon): the settings make it 2 s + 3 x 1 s.
# Every node sees all of the machine's CPUs, so Open MPI binds local rank 0 of every node
# to CPU 0 (two nodes x 1 rank share one core); `cpus` gives each node its own, as a real
# node has (and the settings then tell Open MPI not to bind, so ranks keep them).
set -u
base=/run/mpitrain-cluster
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
name=${MT_CLUSTER:-mtc}
net=${MT_CLUSTER_NET:-10.77.0}
while [ $# -gt 0 ]; do
    case "$1" in
    -n) name=$2; shift 2 ;;
    -s) net=$2; shift 2 ;;
    *) break ;;
    esac
done
die() { echo "cluster.sh: $*" >&2; exit 1; }
[ $# -gt 0 ] || { sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
cmd=$1; shift
case "$name" in *[!a-z0-9]* | "") die "cluster name '$name': lower-case letters and digits only" ;; esac
[ ${#name} -le 8 ] || die "cluster name '$name' is longer than 8 characters (link names)"
state=$base/$name
shm=/dev/shm/.mtcluster-$name # the nodes' /dev/shm folders
br=${name}br
[ "$cmd" != up ] && [ -f "$state/net" ] && net=$(cat "$state/net")

# the cluster that NODE belongs to (its state folder), from any cluster's node list
state_of() {
    for d in "$base"/*/; do
        [ -f "$d/nodes" ] && grep -qx "$1" "$d/nodes" && { echo "${d%/}"; return 0; }
    done
    return 1
}

kill_ns() { # every process in namespace $1, until none is left (they may be forking)
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$1" 2>/dev/null)
        [ -z "$pids" ] && return 0
        # shellcheck disable=SC2086
        kill -9 $pids 2>/dev/null
        sleep 0.1
    done
}

down() {
    # processes on the head that `run` started for this cluster (mpirun, mpitrain-run,
    # slurmctld ...) carry MT_CLUSTER_RUN=NAME in their environment: first, so that no
    # supervisor starts a job again while the nodes go
    for e in $(grep -lzx "MT_CLUSTER_RUN=$name" /proc/[0-9]*/environ 2>/dev/null); do
        pid=${e#/proc/}; pid=${pid%/environ}
        [ "$pid" != $$ ] && [ "$pid" != "$PPID" ] && kill -9 "$pid" 2>/dev/null
    done
    for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E "^$name[0-9]+\$"); do
        kill_ns "$ns"
        ip netns del "$ns" 2>/dev/null
    done
    for l in $(ip -o link show 2>/dev/null | awk -F': ' '{ print $2 }' | sed 's/@.*//' \
        | grep -E "^$name([0-9]+h|br)\$"); do
        ip link del "$l" 2>/dev/null
    done
    rm -rf "$state" "$shm"
    rmdir "$base" 2>/dev/null
}

up() {
    n=$1
    case "$n" in '' | *[!0-9]*) die "up N: N must be a number of nodes (got '$n')" ;; esac
    [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "up N: 1 to 200 nodes (got $n)"
    [ "$(id -u)" -eq 0 ] || die "needs root (network namespaces)"
    echo "$net" | grep -qE '^[0-9]+\.[0-9]+\.[0-9]+$' || die "-s $net: expected A.B.C"
    down # leftovers of a killed run with this name
    # the subnet must be ours alone: no route of the machine may already cover it
    if ip -4 route show | awk '{ print $1 }' | grep -v '^default$' | grep -q "^$net\."; then
        die "$net.0/24 is already routed on this machine; choose another with -s"
    fi
    mkdir -p "$state"
    echo "$net" >"$state/net"
    # names resolve from this file only (it is bind-mounted over /etc/hosts on the nodes and
    # for `run`), so nothing asks a name server about them
    { grep -v "^$net\." /etc/hosts; echo "$net.254 ${name}head"; } >"$state/hosts"
    : >"$state/nodes"
    ip link add "$br" type bridge || die "cannot create bridge $br"
    ip addr add "$net.254/24" dev "$br"
    ip link set "$br" up
    k=1
    while [ $k -le "$n" ]; do
        node=$name$k
        ip netns add "$node" || die "cannot create namespace $node"
        ip link add "${node}h" type veth peer name eth0 netns "$node" || die "cannot create link ${node}h"
        ip link set "${node}h" master "$br" up
        ip -n "$node" addr add "$net.$k/24" dev eth0
        ip -n "$node" link set eth0 up
        mkdir -p "$shm/$node" # the node's own /dev/shm, as a real node has
        ip -n "$node" link set lo up
        echo "$node" >>"$state/nodes"
        echo "$net.$k $node" >>"$state/hosts"
        echo "$node slots=1" >>"$state/slots"
        k=$((k + 1))
    done
    echo "cluster $name: $n node(s) $(tr '\n' ' ' <"$state/nodes")on $net.0/24, head $net.254"
}

require_up() { [ -f "$state/nodes" ] || die "cluster $name is not up (cluster.sh -n $name up N)"; }
require_node() { grep -qx "$1" "$state/nodes" || die "$1 is not a node of cluster $name"; }

mca_env() {
    cat <<EOF
export OMPI_MCA_plm_rsh_agent=$(dirname "$self")/cluster-rsh
export OMPI_MCA_plm_rsh_no_tree_spawn=1
export OMPI_MCA_btl_tcp_if_include=$net.0/24
export OMPI_MCA_oob_tcp_if_include=$net.0/24
export OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_btl=self,vader,tcp
EOF
    if [ "${1:-}" = --ompi-defaults ]; then
        echo "unset OMPI_MCA_oob_tcp_keepalive_time OMPI_MCA_oob_tcp_keepalive_intvl" \
            "OMPI_MCA_oob_tcp_keepalive_probes"
    else
        echo "export OMPI_MCA_oob_tcp_keepalive_time=2"
        echo "export OMPI_MCA_oob_tcp_keepalive_intvl=1"
        echo "export OMPI_MCA_oob_tcp_keepalive_probes=3"
    fi
    # nodes given their own CPUs: ranks keep the node's CPUs (Open MPI would bind them to
    # the first CPUs of the machine it sees whole)
    if ls "$state"/cpus.* >/dev/null 2>&1; then
        echo "export OMPI_MCA_hwloc_base_binding_policy=none"
    fi
}

# on_node STATE NODE CMD...: CMD in NODE's network namespace, its own host name, hosts file
on_node() {
    st=$1; node=$2; shift 2
    [ -f "$st/cpus.$node" ] && set -- taskset -c "$(cat "$st/cpus.$node")" "$@"
    # and its own /dev/shm, a folder of the machine's (tmpfs, as /dev/shm is): a job's
    # shared-memory files (Open MPI's segments are named by host, job id and local rank,
    # and a requeued Slurm job keeps its id) never meet another node's
    nshm=/dev/shm/.mtcluster-$(basename "$st")/$node
    [ -d "$nshm" ] || nshm=/dev/shm
    exec nsenter --net="/run/netns/$node" unshare --uts --mount --propagation private \
        sh -c 'hostname "$1" && mount --bind "$2" /etc/hosts && mount --bind "$3" /dev/shm \
            && shift 3 && exec "$@"' sh "$node" "$st/hosts" "$nshm" "$@"
}

case "$cmd" in
up) [ $# -eq 1 ] || die "usage: up N"; up "$1" ;;
down) down ;;
env) require_up; mca_env "${1:-}" ;;
hostfile)
    require_up
    [ $# -ge 1 ] || die "usage: hostfile SLOTS_NODE1 [SLOTS_NODE2 ...]"
    : >"$state/slots"
    k=1
    for s in "$@"; do
        case "$s" in '' | *[!0-9]*) die "hostfile: slots must be numbers (got '$s')" ;; esac
        [ $k -le "$(wc -l <"$state/nodes")" ] || die "hostfile: cluster $name has $(wc -l <"$state/nodes") node(s)"
        [ "$s" -gt 0 ] && echo "$name$k slots=$s" >>"$state/slots"
        k=$((k + 1))
    done
    cp "$state/slots" "$state/hostfile"
    echo "$state/hostfile"
    ;;
run)
    require_up
    defaults=""
    [ "${1:-}" = --ompi-defaults ] && { defaults=$1; shift; }
    eval "$(mca_env $defaults)"
    export MT_CLUSTER_RUN="$name" # what `down` finds them by
    exec unshare --mount --propagation private \
        sh -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' sh "$state/hosts" "$@"
    ;;
exec)
    [ $# -ge 2 ] || die "usage: exec NODE CMD..."
    node=$1; shift
    st=$(state_of "$node") || die "no cluster has a node $node"
    if [ -e "$st/dead.$node" ]; then
        echo "ssh: connect to host $node port 22: No route to host" >&2; exit 255
    fi
    if [ "$(cat "/sys/class/net/${node}h/operstate" 2>/dev/null)" = down ]; then
        echo "ssh: connect to host $node port 22: Connection timed out" >&2; exit 255
    fi
    on_node "$st" "$node" "$@"
    ;;
kill)
    require_up; require_node "$1"
    touch "$state/dead.$1"
    kill_ns "$1"
    ;;
link)
    require_up; require_node "$1"
    case "${2:-}" in up | down) ip link set "${1}h" "$2" ;; *) die "usage: link NODE up|down" ;; esac
    ;;
hosts)
    require_up
    while read -r node slots; do
        [ -e "$state/dead.$node" ] && continue
        [ "$(cat "/sys/class/net/${node}h/operstate" 2>/dev/null)" = down ] && continue
        echo "$node $slots"
    done <"$state/slots"
    ;;
shape)
    require_up
    [ $# -eq 2 ] || die "usage: shape NODE|all none|10gbit|1gbit"
    case "$2" in
    none) rate="" ;;
    10gbit) rate=10gbit; burst=2500000 ;;
    1gbit) rate=1gbit; burst=250000 ;;
    *) die "profile '$2': none, 10gbit or 1gbit" ;;
    esac
    nodes=$1; [ "$1" = all ] && nodes=$(cat "$state/nodes")
    for node in $nodes; do
        require_node "$node"
        # both directions: the node's sending end and the bridge port that sends to it
        for where in "ip netns exec $node tc qdisc %s dev eth0 root" "tc qdisc %s dev ${node}h root"; do
            # shellcheck disable=SC2059
            $(printf "$where" del) 2>/dev/null
            # shellcheck disable=SC2059
            [ -n "$rate" ] && { $(printf "$where" add) tbf rate $rate burst $burst latency 20ms \
                || die "tc tbf on $node failed"; }
        done
    done
    echo "$name: $nodes: ${rate:-unshaped}"
    ;;
cpus)
    require_up
    [ $# -eq 2 ] || die "usage: cpus NODE|all LIST|spread|none"
    nodes=$1; [ "$1" = all ] && nodes=$(cat "$state/nodes")
    ncpu=$(nproc --all)
    for node in $nodes; do
        require_node "$node"
        case "$2" in
        none) rm -f "$state/cpus.$node"; continue ;;
        spread) list=$(( (${node#"$name"} - 1) % ncpu )) ;;
        *[!0-9,-]* | "") die "cpus: '$2' is not a CPU list (e.g. 0 or 0-1,3), spread or none" ;;
        *) list=$2 ;;
        esac
        taskset -c "$list" true 2>/dev/null || die "cpus: this machine has no CPU list '$list'"
        echo "$list" >"$state/cpus.$node"
        echo "$node: CPUs $list"
    done
    ;;
bandwidth)
    require_up
    a=${1:-${name}1}; b=${2:-${name}2}; mib=${3:-256}
    require_node "$a"; require_node "$b"
    addr=$(awk -v n="$b" '$2 == n { print $1 }' "$state/hosts")
    # receiver on B: time from the first byte to the end of the stream
    ip netns exec "$b" perl -MIO::Socket::INET -MTime::HiRes=time -e '
        alarm 300;
        my $s = IO::Socket::INET->new(LocalAddr => $ARGV[0], LocalPort => 5201, Listen => 1,
                                      ReuseAddr => 1) or die "listen: $!\n";
        print STDOUT "ready\n"; STDOUT->flush;
        my $c = $s->accept or die "accept: $!\n";
        my ($n, $t0, $buf) = (0, 0, "");
        while (my $r = sysread($c, $buf, 1 << 20)) { $t0 ||= time; $n += $r; }
        my $dt = (time - $t0) || 1e-6;
        printf "%s -> %s: %.0f MiB in %.2f s = %.2f Gbit/s\n", $ARGV[1], $ARGV[2],
               $n / 1048576, $dt, $n * 8 / $dt / 1e9;' "$addr" "$a" "$b" >"$state/bw.out" 2>&1 &
    rx=$!
    for _ in $(seq 1 50); do grep -q ready "$state/bw.out" 2>/dev/null && break; sleep 0.1; done
    ip netns exec "$a" timeout 120 perl -MIO::Socket::INET -e '
        my $c;
        for (1 .. 100) { last if $c = IO::Socket::INET->new(PeerAddr => $ARGV[0], PeerPort => 5201);
                         select(undef, undef, undef, 0.1); }
        $c or die "connect: $!\n";
        my $buf = "\0" x (1 << 20);
        syswrite($c, $buf) == length $buf or die "send: $!\n" for 1 .. $ARGV[1];' "$addr" "$mib" \
        || kill $rx 2>/dev/null
    wait $rx
    grep -v ready "$state/bw.out"
    ;;
*) die "unknown command '$cmd' (see cluster.sh without arguments)" ;;
esac
