#!/bin/sh
# A cluster of hosts on this machine, for running flegel across hosts for real (issue 20).
#
#   deploy/local/cluster.sh up N [--rate RATE] [--delay MS]   make hosts h1..hN
#   deploy/local/cluster.sh run JOB [flegel run args...]      run a job across them
#   deploy/local/cluster.sh status                             hosts, addresses, link limits
#   deploy/local/cluster.sh shape [--rate RATE] [--delay MS]   new link limits (none: unlimited)
#   deploy/local/cluster.sh down                               remove everything `up` made
#   deploy/local/cluster.sh exec HOST CMD...                   run a command on one host
#   deploy/local/cluster.sh mpiexec ARGS...                    MPICH's mpiexec over the hosts
#
# Run as root (network namespaces).  Each host hK is
#   - a network namespace NAME-hK with loopback up and one veth link (eth0, address
#     SUBNET.K/24) to one bridge NAME-br, shaped with tc when asked: --rate limits both
#     directions of the link (a token bucket, tbf), --delay MS delays what the host sends
#     (MS one way between two hosts; needs the kernel's netem, which some VMs lack);
#   - a UTS namespace (its own hostname, hK: MPICH takes ranks on different hosts for
#     remote and talks TCP between them, not shared memory);
#   - a mount namespace with the cluster's /etc/hosts bound over the machine's, so h1..hN
#     resolve on every host (the file system is otherwise the machine's: the "shared file
#     system" every multi-host path assumes, deploy/README.md).
# `run` starts `flegel run` on h1 (rank 0, the master, is there) under MPICH's own launcher:
# hydra's ssh launcher, whose "ssh" is NAME's `launch` script (HYDRA_LAUNCHER_EXEC): it
# enters the named host's namespaces and starts hydra's proxy there (no sshd).  Like an ssh
# session, a host's proxy ends when mpiexec does (its parent-death signal), and its ranks
# with it.  The hostfile lists each host with one slot, so ranks go round-robin: rank 0 on h1,
# workers 1, 2, ... on h2, h3, ..., h1, h2, ...
#
# Environment: FLEGEL_CLUSTER (the cluster's name, default "flegel": at most 8 letters or
# digits; several clusters may be up at once under other names), FLEGEL_CLUSTER_SUBNET (the
# first three octets of the hosts' addresses, default 10.87.0), FLEGEL (the flegel command,
# default the one on PATH).  Nothing outside the namespaces, the bridge and
# /run/flegel-cluster/NAME is touched.
set -eu

NAME=${FLEGEL_CLUSTER:-flegel}
SUBNET=${FLEGEL_CLUSTER_SUBNET:-10.87.0}
STATE=/run/flegel-cluster/$NAME
BRIDGE=$NAME-br
HERE=$(cd "$(dirname "$0")" && pwd)

die() { echo "cluster.sh: $*" >&2; exit 2; }

case $NAME in
  *[!a-z0-9]*|"") die "FLEGEL_CLUSTER must be letters and digits (got '$NAME')" ;;
esac
[ ${#NAME} -le 8 ] || die "FLEGEL_CLUSTER must be at most 8 characters (link names)"

need_root() {
  [ "$(id -u)" = 0 ] || die "run as root (network namespaces need it)"
  command -v ip >/dev/null || die "no 'ip' command: install iproute2"
}

hosts() { cat "$STATE/hosts.list" 2>/dev/null || true; }

# enter HOST CMD...: run CMD on HOST (h1, h2, ...), in this process (exec, so signals and
# the parent stay the caller's): its network and UTS namespaces, and a mount namespace of
# its own with the cluster's /etc/hosts (made per command: a persistent one would have to
# be created before the other hosts' namespace files it must see).
enter() {
  h=$1; shift
  [ -e "$STATE/$h.uts" ] || die "no host '$h' in cluster '$NAME'"
  exec nsenter --net="/run/netns/$NAME-$h" --uts="$STATE/$h.uts" -- \
    unshare --mount --propagation private -- "$0" _hosts "$h" "$@"
}

shape() {  # shape DEV RATE DELAY [netns]: DEV's egress limited to RATE, delayed by DELAY ms
  dev=$1 rate=$2 delay=$3 ns=${4:-}
  run_tc() { if [ -n "$ns" ]; then ip netns exec "$ns" tc "$@"; else tc "$@"; fi; }
  if [ -n "$delay" ] && [ "$delay" != 0 ]; then
    # netem does both (its rate, then its delay).
    run_tc qdisc replace dev "$dev" root netem delay "${delay}ms" ${rate:+rate "$rate"} \
      || die "--delay needs the kernel's netem qdisc (sch_netem), which this one lacks"
  elif [ -n "$rate" ]; then
    # A token bucket: bursts of 64 KiB at most, packets queued up to 100 ms.
    run_tc qdisc replace dev "$dev" root tbf rate "$rate" burst 64kb latency 100ms
  fi
}

limits() {  # [--rate RATE] [--delay MS] -> $rate, $delay
  rate="" delay=""
  while [ $# -gt 0 ]; do
    case $1 in
      --rate) [ $# -ge 2 ] || die "--rate needs a value (e.g. 100mbit)"; rate=$2; shift 2 ;;
      --delay) [ $# -ge 2 ] || die "--delay needs milliseconds"; delay=$2; shift 2 ;;
      *) die "unknown option '$1'" ;;
    esac
  done
}

up() {
  need_root
  [ $# -ge 1 ] || die "usage: cluster.sh up N [--rate RATE] [--delay MS]"
  n=$1; shift
  case $n in *[!0-9]*|"") die "N must be a number (got '$n')";; esac
  [ "$n" -ge 1 ] && [ "$n" -le 250 ] || die "N must be 1..250"
  limits "$@"
  if [ -e "$STATE" ] || ip link show "$BRIDGE" >/dev/null 2>&1; then
    die "cluster '$NAME' is up already (cluster.sh down first)"
  fi
  trap 'echo "cluster.sh: up failed; cleaning up" >&2; down >/dev/null 2>&1 || true' EXIT
  mkdir -p "$STATE"
  # The namespace files are bind mounts: their folder must be a private mount.
  mount --bind "$STATE" "$STATE"
  mount --make-private "$STATE"
  printf '127.0.0.1\tlocalhost\n' > "$STATE/etc-hosts"
  : > "$STATE/hostfile"
  : > "$STATE/hosts.list"
  ip link add "$BRIDGE" type bridge
  ip link set "$BRIDGE" up
  i=1
  while [ "$i" -le "$n" ]; do
    h=h$i
    printf '%s.%s\t%s\n' "$SUBNET" "$i" "$h" >> "$STATE/etc-hosts"
    echo "$h:1" >> "$STATE/hostfile"
    echo "$h" >> "$STATE/hosts.list"
    ip netns add "$NAME-$h"
    ip link add "$NAME-$h" type veth peer name eth0 netns "$NAME-$h"
    ip link set "$NAME-$h" master "$BRIDGE" up
    ip -n "$NAME-$h" addr add "$SUBNET.$i/24" dev eth0
    ip -n "$NAME-$h" link set eth0 up
    ip -n "$NAME-$h" link set lo up
    shape eth0 "$rate" "$delay" "$NAME-$h"  # what the host sends
    shape "$NAME-$h" "$rate" ""             # what it receives
    touch "$STATE/$h.uts"
    unshare --uts="$STATE/$h.uts" hostname "$h"
    i=$((i + 1))
  done
  printf 'rate=%s\ndelay=%s\nsubnet=%s\n' "${rate:-none}" "${delay:-0}" "$SUBNET" \
    > "$STATE/limits"
  # hydra's "ssh": enter the host named by the first argument that is not an option.
  # ssh's arguments: options, the host, then the command as words for a shell.
  cat > "$STATE/launch" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
host=\$1; shift
# Like an ssh session: the host's side ends when the side that started it does.
FLEGEL_CLUSTER=$NAME exec "$HERE/cluster.sh" exec "\$host" \\
  setpriv --pdeathsig TERM -- sh -c "exec \$*"
EOF
  chmod +x "$STATE/launch"
  trap - EXIT
  status
}

reshape() {  # shape [--rate RATE] [--delay MS]: new link limits on a running cluster
  need_root
  [ -e "$STATE/hosts.list" ] || die "cluster '$NAME' is down (cluster.sh up N first)"
  limits "$@"
  for h in $(hosts); do
    ip netns exec "$NAME-$h" tc qdisc del dev eth0 root 2>/dev/null || true
    tc qdisc del dev "$NAME-$h" root 2>/dev/null || true
    shape eth0 "$rate" "$delay" "$NAME-$h"
    shape "$NAME-$h" "$rate" ""
  done
  printf 'rate=%s\ndelay=%s\nsubnet=%s\n' "${rate:-none}" "${delay:-0}" "$SUBNET" \
    > "$STATE/limits"
  status
}

status() {
  if [ ! -e "$STATE/hosts.list" ]; then
    echo "cluster '$NAME' is down"
    return 0
  fi
  . "$STATE/limits"
  echo "cluster '$NAME': $(hosts | wc -l) hosts on bridge $BRIDGE, link rate $rate, delay ${delay} ms"
  echo "hostfile: $STATE/hostfile"
  for h in $(hosts); do
    addr=$(ip -n "$NAME-$h" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')
    link=$(ip -n "$NAME-$h" -o link show dev eth0 2>/dev/null | grep -o 'state [A-Z]*' || true)
    qdisc=$(ip netns exec "$NAME-$h" tc qdisc show dev eth0 2>/dev/null \
            | grep -E 'netem|tbf' | sed 's/^qdisc \([a-z]*\) [^ ]* root refcnt [0-9]*/\1/' || true)
    procs=$(ip netns pids "$NAME-$h" 2>/dev/null | wc -l)
    echo "$h  ${addr:-?}  ${link:-gone}  link: ${qdisc:-unlimited}  processes: $procs"
  done
}

# mpiexec ARGS...: MPICH's mpiexec on h1 with the cluster's hostfile and launcher.
hydra() {
  need_root
  [ -e "$STATE/hosts.list" ] || die "cluster '$NAME' is down (cluster.sh up N first)"
  # hydra reads its options from the environment.  The hosts share one kernel, so UCX
  # (MPICH's netmod) would find them one machine and pass messages through shared memory;
  # real hosts cannot: TCP over eth0 only.
  enter h1 env HYDRA_HOST_FILE="$STATE/hostfile" HYDRA_LAUNCHER=ssh \
    HYDRA_LAUNCHER_EXEC="$STATE/launch" UCX_TLS=tcp,self UCX_NET_DEVICES=eth0 "$@"
}

run() {
  [ $# -ge 1 ] || die "usage: cluster.sh run JOB [flegel run args...]"
  flegel=${FLEGEL:-$(command -v flegel || true)}
  [ -n "$flegel" ] || die "no flegel command on PATH (activate its environment, or set FLEGEL)"
  # The launcher runs on h1 (rank 0 too) and starts mpiexec with the environment above.
  hydra "$flegel" run "$@"
}

mpiexec_on() {
  py=$(command -v python3 || command -v python || true)
  mpiexec=${MPIEXEC:-$([ -n "$py" ] && "$py" -c 'import os, sys; print(os.path.join(os.path.dirname(os.path.realpath(sys.executable)), "mpiexec"))')}
  [ -x "$mpiexec" ] || mpiexec=$(command -v mpiexec || true)
  [ -n "$mpiexec" ] || die "no mpiexec (pip install 'flegel[mpi]', or set MPIEXEC)"
  hydra "$mpiexec" "$@"
}

on() {  # exec HOST CMD...: a command on one host
  need_root
  [ $# -ge 2 ] || die "usage: cluster.sh exec HOST CMD..."
  enter "$@"
}

inside() {  # _hosts HOST CMD...: (in a host's fresh mount namespace) the cluster's
  # /etc/hosts, and the host's own mounts: lines "SOURCE TARGET" in $STATE/HOST.mounts, bound
  # over the shared file system (a folder that differs on one host, e.g. data missing there).
  h=$1; shift
  mount --bind "$STATE/etc-hosts" /etc/hosts
  if [ -f "$STATE/$h.mounts" ]; then
    while read -r src dst; do
      [ -n "$src" ] && mount --bind "$src" "$dst"
    done < "$STATE/$h.mounts"
  fi
  exec "$@"
}

cluster_pids() {  # every process on the cluster's hosts
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NAME-h[0-9]*$" || true); do
    ip netns pids "$ns" 2>/dev/null || true
  done
}

down() {
  need_root
  # As a scheduler ending its jobs: SIGTERM to each job's root on the hosts (a process whose
  # parent is not on them: `run`'s flegel launcher, which ends every rank on every host and
  # has the master save θ), up to STOP_S seconds for them to end, then every process left
  # is killed (a host is switched off).
  all=$(cluster_pids)
  for pid in $all; do
    ppid=$(ps -o ppid= -p "$pid" 2>/dev/null | tr -d ' ') || continue
    case " $(echo $all) " in *" $ppid "*) ;; *) kill -TERM "$pid" 2>/dev/null || true ;; esac
  done
  waited=0
  while [ -n "$(cluster_pids)" ] && [ "$waited" -lt "${STOP_S:-10}0" ]; do
    sleep 0.1; waited=$((waited + 1))
  done
  pids=$(cluster_pids)
  [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
  # The hosts' namespace files (bind mounts), deepest first, then the folder's own mount.
  for f in $(awk -v d="$STATE/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount "$f" 2>/dev/null || umount -l "$f" 2>/dev/null || true
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NAME-h[0-9]*$" || true); do
    ip netns del "$ns" 2>/dev/null || true   # its end of the veth goes with it
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 \
                | grep "^$NAME-h[0-9]*$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$BRIDGE" 2>/dev/null || true
  if [ -d "$STATE" ]; then
    umount "$STATE" 2>/dev/null || true
    rm -rf "$STATE"
  fi
  echo "cluster '$NAME' is down"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  up) up "$@" ;;
  run) run "$@" ;;
  status) status ;;
  shape) reshape "$@" ;;
  down) down ;;
  exec) on "$@" ;;
  mpiexec) mpiexec_on "$@" ;;
  _hosts) inside "$@" ;;
  *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
