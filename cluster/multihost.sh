#!/usr/bin/env bash
# An emulated cluster of N hosts on this machine, for tests and demos (Debian/Ubuntu, as root):
# each host a Linux network namespace with its own hostname, /etc/hosts and node-local /scratch
# and two networks, as a cluster has: the fabric (eth0, MPI's) and the management network (eth1,
# Slurm's), each a bridge; one slurmctld on its own host, one slurmd per host, one munged.
# How and why: docs/design.md#multihost.
#
#   cluster/multihost.sh start [--hosts N] [--rate R]   start (idempotent; N default 2, at most 200;
#                                                   R: every link's rate, tc syntax, e.g. 1gbit)
#   cluster/multihost.sh stop                       end what start started (PID files, namespaces)
#   cluster/multihost.sh status                     each daemon, each host's link, and sinfo
#   cluster/multihost.sh link HOST down|up [--all]  cut a host off the fabric (MPI's network), or
#                                                   with --all off both networks (Slurm loses it
#                                                   too); up reconnects both and waits until Slurm
#                                                   serves the host again
#   cluster/multihost.sh link HOST rate R|off       shape its fabric link both ways (tbf), or not
#   cluster/multihost.sh lose HOST                  lose a host whole: kill every process on it,
#                                                   its slurmd included
#   cluster/multihost.sh revive HOST                boot it again (new slurmd, empty /scratch) and
#                                                   wait until Slurm serves it
#   cluster/multihost.sh exec HOST CMD...           run CMD on a host (or on the controller, mhctl)
#                                                   with SLURM_CONF set: sinfo, sbatch, srun ...
#   cluster/multihost.sh env                        print the shell variables the cluster uses
#
# Hosts are mh1..mhN at SUBNET.11.. on the fabric and MGMT_SUBNET.11.. on the management network,
# the controller mhctl at .1 (SUBNET default 10.77.0, MGMT_SUBNET 10.78.0); host names resolve to
# management addresses, Slurm talks there, Open MPI on the fabric only.
# All state (slurm.conf, munge key and socket, spools, logs, PID files) lives under MULTIHOST_DIR
# (default /tmp/distgnn-multihost); its etc/hosts and etc/slurm are bound over /etc/hosts and
# /etc/slurm inside each host only (Slurm's clients in a job find the cluster as on a real node).
# Nothing in /etc is written, so it runs beside cluster/local-slurm.sh. Every folder outside
# MULTIHOST_DIR is shared by all hosts, as a cluster's network filesystem is; MULTIHOST_SCRATCH (default /scratch) is each host's own tmpfs
# (MULTIHOST_SCRATCH_MB, default 256). Open MPI between hosts: TCP on the fabric (the btl and
# interface variables `env` prints; shared memory needs one host).
set -euo pipefail

STATE=${MULTIHOST_DIR:-/tmp/distgnn-multihost}
SUBNET=${MULTIHOST_SUBNET:-10.77.0}
MGMT_SUBNET=${MULTIHOST_MGMT_SUBNET:-10.78.0}
SCRATCH=${MULTIHOST_SCRATCH:-/scratch}
SCRATCH_MB=${MULTIHOST_SCRATCH_MB:-256}
PREFIX=dgmh                       # namespaces dgmh-sw (the bridges), dgmh-mhctl, dgmh-mh1 ...
CONF="$STATE/etc/slurm/slurm.conf"   # bound over /etc/slurm on every host
MUNGE_SOCKET="$STATE/munge/munge.socket"
SUDO=""
LOG_NAME=multihost
# shellcheck source=cluster/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

hosts_of() {  # the hosts of the running (or last written) cluster, one per line
  [ -f "$STATE/hosts.list" ] && cat "$STATE/hosts.list"
}
address() {  # address HOST [SUBNET]: its address on the fabric (or on SUBNET)
  local net=${2:-$SUBNET}
  if [ "$1" = mhctl ]; then echo "$net.1"; else echo "$net.$((10 + ${1#mh}))"; fi
}
mgmt_address() { address "$1" "$MGMT_SUBNET"; }
ctld_pid() { echo "$STATE/run/slurmctld.pid"; }
slurmd_pid() { echo "$STATE/run/slurmd-$1.pid"; }
anchor_pid() {  # anchor_pid HOST: the daemon whose namespaces are the host's
  if [ "$1" = mhctl ]; then ctld_pid; else slurmd_pid "$1"; fi
}

in_host() {  # in_host HOST CMD...: run CMD in the host's network, hostname and mount namespaces
  local pidfile
  pidfile=$(anchor_pid "$1")
  pid_alive "$pidfile" || { log "$1: not running (cluster/multihost.sh start)"; return 1; }
  shift
  # --root: the daemon's own root (entering a mount namespace alone would put the command at the
  # namespace's root, outside a chroot the cluster was started in)
  # shellcheck disable=SC2046  # mpi_env's words are separate variables
  nsenter --target "$(cat "$pidfile")" --net --uts --mount --root --wd="$PWD" \
    env SLURM_CONF="$CONF" $(mpi_env) "$@"
}

mpi_env() {  # Open MPI over TCP on the fabric only; threads left unbound (below)
  # The hosts share this machine's cores, so a rank alone on its host is not alone on the cores:
  # distgnn's pinning (docs/design.md#thread-pinning) would put every host's rank on core 0.
  echo "OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$SUBNET.0/24" \
       "OMPI_MCA_oob_tcp_if_include=$SUBNET.0/24 PMIX_MCA_ptl_tcp_if_include=$SUBNET.0/24" \
       "OMP_PROC_BIND=false"
}

write_conf() {  # write_conf HOST...
  local cpus mem
  cpus=$(nproc)
  # every host offers the machine's cores and 90% of its memory (they share them; no cgroups)
  mem=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
  mkdir -p "$STATE"/{etc/slurm,run,log,spool/ctld,spool/slurmd,munge}
  chmod 700 "$STATE/munge"
  {
    echo "127.0.0.1 localhost"
    echo "$(mgmt_address mhctl) mhctl"
    for h in "$@"; do echo "$(mgmt_address "$h") $h"; done
  } > "$STATE/etc/hosts"
  cat > "$CONF.tmp" <<EOF
# Written by cluster/multihost.sh: an emulated cluster of $# hosts (network namespaces).
ClusterName=distgnn-multihost
SlurmctldHost=mhctl($(mgmt_address mhctl))
AuthInfo=socket=$MUNGE_SOCKET
$(slurm_common_conf)
TaskPlugin=task/none
StateSaveLocation=$STATE/spool/ctld
SlurmdSpoolDir=$STATE/spool/slurmd/%n
SlurmctldPidFile=$(ctld_pid)
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
# each host's own: PMIx's per-step folders would collide in a /tmp every host shares
TmpFS=$SCRATCH
# a host cut off the management network is DOWN within about 20 s (the tests' bound)
SlurmdTimeout=15
MessageTimeout=5
EOF
  for h in "$@"; do
    echo "NodeName=$h NodeAddr=$(mgmt_address "$h") CPUs=$cpus RealMemory=$mem State=UNKNOWN" >> "$CONF.tmp"
  done
  echo "PartitionName=hosts Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >> "$CONF.tmp"
  echo "PMIxCliTmpDirBase=$SCRATCH" > "$STATE/etc/slurm/mpi.conf"
  for h in "$@"; do mkdir -p "$STATE/spool/slurmd/$h"; done
  mv "$CONF.tmp" "$CONF"
  printf '%s\n' "$@" > "$STATE/hosts.list"
}

start_munge() {
  pid_alive "$STATE/munge/munged.pid" && return 0
  [ -s "$STATE/munge/munge.key" ] || mungekey --create --keyfile="$STATE/munge/munge.key"
  chmod 400 "$STATE/munge/munge.key"
  munged --force --socket="$MUNGE_SOCKET" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/log/munged.log" \
    --seed-file="$STATE/munge/munged.seed"
}

add_link() {  # add_link HOST: its namespace, a veth pair to each bridge, its addresses
  local ns="$PREFIX-$1"
  [ -e "/run/netns/$ns" ] || ip netns add "$ns"
  ip -n "$ns" link set lo up
  # eth0 on the fabric (br0, veth v-HOST), eth1 on the management network (br1, veth m-HOST)
  local dev bridge veth addr
  for dev in eth0 eth1; do
    if [ $dev = eth0 ]; then bridge=br0 veth="v-$1" addr=$(address "$1")
    else bridge=br1 veth="m-$1" addr=$(mgmt_address "$1"); fi
    if ! ip -n "$ns" link show $dev >/dev/null 2>&1; then
      ip link add "$veth" netns "$PREFIX-sw" type veth peer name $dev netns "$ns"
      ip -n "$PREFIX-sw" link set "$veth" master $bridge up
      ip -n "$ns" addr add "$addr/24" dev $dev
    fi
    ip -n "$ns" link set $dev up
  done
}

shape() {  # shape HOST RATE|off: tbf on both ends of the host's link (tbf shapes egress only)
  local ns="$PREFIX-$1" veth="v-$1"
  if [ "$2" = off ]; then
    tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
    tc -n "$PREFIX-sw" qdisc del dev "$veth" root 2>/dev/null || true
  else
    tc -n "$ns" qdisc replace dev eth0 root tbf rate "$2" burst 256kb latency 50ms
    tc -n "$PREFIX-sw" qdisc replace dev "$veth" root tbf rate "$2" burst 256kb latency 50ms
  fi
}

launch_in_host() {  # launch_in_host HOST CMD...: the daemon CMD in new hostname and mount
  # namespaces inside the host's network namespace (its /etc/hosts and /etc/slurm bound over the
  # machine's, /scratch its own tmpfs)
  local host=$1
  shift
  nsenter --net="/run/netns/$PREFIX-$host" \
    unshare --uts --mount --propagation private sh -c '
      set -e
      hostname "$1"; mount --bind "$2/hosts" /etc/hosts; mount --bind "$2/slurm" /etc/slurm
      if [ "$1" != mhctl ]; then mount -t tmpfs -o "size=$4m" tmpfs "$3"; fi
      shift 4; exec "$@"' sh "$host" "$STATE/etc" "$SCRATCH" "$SCRATCH_MB" "$@"
}

wait_idle() {  # wait_idle N: until N hosts are idle (or 60 s)
  local idle=0
  for _ in $(seq 1 120); do
    idle=$(in_host mhctl sinfo -h -N -o '%N %t' 2>/dev/null | grep -c -E ' (idle|mix|alloc)$' || true)
    [ "$idle" -ge "$1" ] && return 0
    in_host mhctl scontrol update NodeName=ALL State=RESUME >/dev/null 2>&1 || true
    sleep 0.5
  done
  log "only $idle of $1 hosts became idle; logs in $STATE/log"
  tail -n 15 "$STATE"/log/slurmctld.log "$STATE"/log/slurmd-*.log >&2 || true
  return 1
}

wait_host() {  # wait_host HOST: until Slurm serves the host again (or 60 s)
  local state=""
  for _ in $(seq 1 120); do
    state=$(in_host mhctl sinfo -h -N -n "$1" -o '%t' 2>/dev/null | head -n 1 || true)
    case "$state" in idle|mix|alloc) return 0 ;; esac   # a '*' suffix: not responding yet
    # slurmctld pings a DOWN host only every minute or two; once its slurmd answers on the
    # management network, RESUME returns it now (never before: a job sent to a host whose
    # slurmd is not up yet fails)
    if in_host mhctl timeout 1 bash -c "exec 3<>/dev/tcp/$(mgmt_address "$1")/6818" 2>/dev/null; then
      in_host mhctl scontrol update NodeName="$1" State=RESUME >/dev/null 2>&1 || true
    fi
    sleep 0.5
  done
  log "$1: not back in service after 60 s (state '$state'); logs in $STATE/log"
  return 1
}

start() {
  local n=2 rate=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --hosts) n=$2; shift 2 ;;
      --rate) rate=$2; shift 2 ;;
      *) log "start: unknown option '$1' (expected --hosts N, --rate R)"; return 2 ;;
    esac
  done
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 200 ] || {
    log "--hosts: expected 1 to 200, got '$n'"; return 2; }
  [ "$(id -u)" = 0 ] || { log "needs root (network namespaces, mounts)"; return 2; }
  install_packages "${SLURM_PACKAGES[@]}" iproute2
  local hosts=() running=1
  for i in $(seq 1 "$n"); do hosts+=("mh$i"); done
  if [ "$(hosts_of | tr '\n' ' ')" != "${hosts[*]} " ]; then running=0; fi
  for h in mhctl "${hosts[@]}"; do
    pid_alive "$(anchor_pid "$h")" && ip -n "$PREFIX-$h" link show eth1 >/dev/null 2>&1 || running=0
  done
  if [ $running = 1 ] && pid_alive "$STATE/munge/munged.pid"; then
    [ -z "$rate" ] || for h in "${hosts[@]}"; do shape "$h" "$rate"; done
    wait_idle "$n" && { log "already running: ${hosts[*]}"; return 0; }
  fi
  stop >/dev/null 2>&1 || true
  mkdir -p "$SCRATCH" /etc/slurm   # mount points (on each host: its tmpfs, and this cluster's conf)
  write_conf "${hosts[@]}"
  start_munge
  [ -e "/run/netns/$PREFIX-sw" ] || ip netns add "$PREFIX-sw"
  for br in br0 br1; do
    ip -n "$PREFIX-sw" link show $br >/dev/null 2>&1 || ip -n "$PREFIX-sw" link add $br type bridge
    ip -n "$PREFIX-sw" link set $br up
  done
  for h in mhctl "${hosts[@]}"; do add_link "$h"; done
  [ -z "$rate" ] || for h in "${hosts[@]}"; do shape "$h" "$rate"; done
  launch_in_host mhctl slurmctld -c -f "$CONF"   # -c: no state of an earlier cluster
  for h in "${hosts[@]}"; do launch_in_host "$h" slurmd -f "$CONF" -N "$h"; done
  wait_idle "$n"
  log "running: ${hosts[*]} (controller mhctl, state in $STATE)"
}

kill_in_netns() {  # kill_in_netns NS: SIGKILL to every process in network namespace NS
  local pid
  # the shell's own kill: a minimal system has no /bin/kill (procps) for xargs to run, and the
  # processes lived on unseen (found on a debootstrapped image)
  for pid in $(ip netns pids "$1"); do kill -9 "$pid" 2>/dev/null || true; done
}

stop() {
  local h
  for h in $(hosts_of); do stop_pidfile "slurmd $h" "$(slurmd_pid "$h")" & done
  wait
  stop_pidfile slurmctld "$(ctld_pid)"
  stop_pidfile munged "$STATE/munge/munged.pid"
  for ns in $(ip netns list | awk '{print $1}' | grep "^$PREFIX-" || true); do
    # what still runs on a host (job steps that outlived their slurmd) was started by the cluster
    kill_in_netns "$ns"
    ip netns del "$ns"
  done
  log "stopped"
}

status() {
  local rc=0 h
  if pid_alive "$STATE/munge/munged.pid"; then echo "munged: running (pid $(cat "$STATE/munge/munged.pid"))"
  else echo "munged: stopped"; rc=3; fi
  for h in mhctl $(hosts_of); do
    local daemon=slurmd link mgmt
    [ "$h" = mhctl ] && daemon=slurmctld
    link=$(ip -n "$PREFIX-sw" -o link show "v-$h" 2>/dev/null | grep -o 'state [A-Z]*' || echo "state none")
    mgmt=$(ip -n "$PREFIX-sw" -o link show "m-$h" 2>/dev/null | grep -o 'state [A-Z]*' || echo "state none")
    if pid_alive "$(anchor_pid "$h")"; then
      echo "$h ($(address "$h")): $daemon running (pid $(cat "$(anchor_pid "$h")")), link ${link#state }, management ${mgmt#state }"
    else echo "$h: $daemon stopped"; rc=3; fi
  done
  [ $rc = 0 ] && in_host mhctl sinfo -N
  return $rc
}

known_host() {  # known_host VERB HOST: exit 2 with one line unless HOST is one of the hosts
  hosts_of | grep -qx "$2" || { log "$1: unknown host '$2' (hosts: $(hosts_of | tr '\n' ' '))"; return 2; }
}

link() {
  local host=${1:-} what=${2:-} all=${3:-}
  known_host link "$host" || return 2
  case "$what" in
    down) case "$all" in
            "") ip -n "$PREFIX-sw" link set "v-$host" down ;;
            --all) ip -n "$PREFIX-sw" link set "v-$host" down
                   ip -n "$PREFIX-sw" link set "m-$host" down ;;
            *) log "link $host down: unknown option '$all' (expected --all)"; return 2 ;;
          esac ;;
    up) ip -n "$PREFIX-sw" link set "v-$host" up
        ip -n "$PREFIX-sw" link set "m-$host" up
        wait_host "$host" ;;
    rate) [ -n "${3:-}" ] || { log "link $host rate: expected a rate (e.g. 100mbit) or off"; return 2; }
          shape "$host" "$3" ;;
    *) log "link: expected HOST down [--all]|up|rate R|rate off"; return 2 ;;
  esac
}

lose() {  # every process in the host's network namespace, its slurmd (the host's anchor) included
  local host=${1:-}
  known_host lose "$host" || return 2
  kill_in_netns "$PREFIX-$host"
  log "$host lost: every process on it killed"
}

revive() {
  local host=${1:-}
  known_host revive "$host" || return 2
  if ! pid_alive "$(slurmd_pid "$host")"; then
    # a boot starts from an empty spool: the killed steps' sockets would refuse a requeued job's
    # step of the same id ("Cannot bind() UNIX socket ... stepd.slurm.pmix.<job>.0")
    find "$STATE/spool/slurmd/$host" -mindepth 1 -delete 2>/dev/null || true
    launch_in_host "$host" slurmd -f "$CONF" -N "$host"
  fi
  wait_host "$host"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  status) status ;;
  link) shift; link "$@" ;;
  lose) shift; lose "$@" ;;
  revive) shift; revive "$@" ;;
  exec) shift; [ $# -ge 2 ] || { log "exec: expected HOST CMD..."; exit 2; }; in_host "$@" ;;
  env) echo "SLURM_CONF=$CONF $(mpi_env)" ;;
  *) echo "usage: $0 start [--hosts N] [--rate R]|stop|status|link HOST down [--all]|up|rate R|lose HOST|revive HOST|exec HOST CMD...|env" >&2
     exit 2 ;;
esac
