#!/usr/bin/env bash
# A one-node Slurm on this machine, for tests and demos (Debian/Ubuntu, as root or with sudo).
#
#   cluster/local-slurm.sh start    install if missing, write slurm.conf, start munged, slurmctld,
#                                   slurmd, wait until the node is idle (idempotent)
#   cluster/local-slurm.sh stop     stop the three daemons by their PID files (idempotent)
#   cluster/local-slurm.sh status   print whether each daemon runs, and sinfo
#
# No systemd and no cgroups are assumed: the daemons are started directly (apt's own service start
# is usually refused in containers), process tracking is linuxproc, and there is no accounting, so
# Snakemake's slurm plugin must poll with squeue (tests pass `--slurm-status-command squeue`).
# Settings: SLURM_CONF_DIR (default /etc/slurm), SLURM_PARTITION_NAME (default debug).
set -euo pipefail

CONF_DIR=${SLURM_CONF_DIR:-/etc/slurm}
CONF="$CONF_DIR/slurm.conf"
PARTITION=${SLURM_PARTITION_NAME:-debug}
MUNGE_PID=/run/munge/munged.pid
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

LOG_NAME=local-slurm
# shellcheck source=cluster/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

write_conf() {
  local host node_line mem
  host=$(hostname -s)
  # slurmctld and slurmd look this name up; unresolved, they retry for minutes and sinfo waits
  getent hosts "$host" >/dev/null \
    || { log "this machine's name '$host' does not resolve: add it to /etc/hosts (127.0.1.1 $host)"; exit 1; }
  # slurmd -C prints this machine's NodeName line; keep ~95% of its RealMemory so that
  # slurmd's own check (configured memory <= real memory) never drains the node.
  node_line=$(slurmd -C | grep '^NodeName=')
  mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node_line")
  node_line=$(sed "s/RealMemory=[0-9]*/RealMemory=$((mem * 95 / 100))/" <<<"$node_line")
  # Each CPU is described as a socket of one core (SlurmdParameters=config_overrides keeps slurmd
  # from draining the node for it): presets that place one rank per socket (ranks_per_node:
  # socket, the slurm preset's default) then put a rank on each CPU of this one node, as tests of
  # P ranks on a one-node Slurm need. A real cluster's nodes report their own sockets.
  local cpus
  cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$node_line")
  node_line=$(sed -E "s/Boards=[0-9]+ //; s/SocketsPerBoard=[0-9]+/Sockets=$cpus/; s/CoresPerSocket=[0-9]+/CoresPerSocket=1/; s/ThreadsPerCore=[0-9]+/ThreadsPerCore=1/" <<<"$node_line")
  $SUDO mkdir -p "$CONF_DIR" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
  $SUDO tee "$CONF.tmp" >/dev/null <<EOF
# Written by cluster/local-slurm.sh: a one-node test cluster (no systemd, no cgroups, no accounting).
ClusterName=distgnn-local
SlurmctldHost=$host
$(slurm_common_conf)
TaskPlugin=task/affinity
SlurmdParameters=config_overrides
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
$node_line
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  $SUDO mv "$CONF.tmp" "$CONF"
}

start_munge() {
  pid_alive "$MUNGE_PID" && return 0
  $SUDO mkdir -p /run/munge
  $SUDO chown munge:munge /run/munge
  if [ ! -s /etc/munge/munge.key ]; then
    $SUDO mungekey --create --force 2>/dev/null || \
      $SUDO dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    $SUDO chown munge:munge /etc/munge/munge.key
    $SUDO chmod 400 /etc/munge/munge.key
  fi
  $SUDO runuser -u munge -- /usr/sbin/munged
}

wait_idle() {
  local state
  for _ in $(seq 1 60); do
    state=$(sinfo -h -o %t 2>/dev/null | head -n1 || true)
    case "$state" in
      idle|mix|alloc) return 0 ;;
      drain*|down*)
        # A node left down by an earlier unclean stop: bring it back.
        $SUDO scontrol update NodeName="$(hostname -s)" State=RESUME 2>/dev/null || true ;;
    esac
    sleep 0.5
  done
  log "node never became idle (sinfo: '${state:-none}'); see /var/log/slurm/slurmd.log"
  tail -n 20 /var/log/slurm/slurmd.log /var/log/slurm/slurmctld.log >&2 || true
  return 1
}

start() {
  install_packages "${SLURM_PACKAGES[@]}"
  if pid_alive "$CTLD_PID" && pid_alive "$SLURMD_PID" && pid_alive "$MUNGE_PID"; then
    wait_idle && { log "already running"; return 0; }
  fi
  if [ -f "$CONF" ] && ! grep -q '^# Written by cluster/local-slurm.sh' "$CONF"; then
    log "$CONF exists and was not written by this script; refusing to overwrite it"; return 1
  fi
  write_conf
  start_munge
  pid_alive "$CTLD_PID" || $SUDO /usr/sbin/slurmctld
  pid_alive "$SLURMD_PID" || $SUDO /usr/sbin/slurmd
  wait_idle
  log "running: $(sinfo -h -o '%P %D %c %t' | head -n1)"
}

stop() {
  stop_pidfile slurmd "$SLURMD_PID"
  stop_pidfile slurmctld "$CTLD_PID"
  stop_pidfile munged "$MUNGE_PID"
  log "stopped"
}

status() {
  local rc=0
  for pair in "munged:$MUNGE_PID" "slurmctld:$CTLD_PID" "slurmd:$SLURMD_PID"; do
    if pid_alive "${pair#*:}"; then echo "${pair%%:*}: running (pid $(cat "${pair#*:}"))"
    else echo "${pair%%:*}: stopped"; rc=3; fi
  done
  [ $rc = 0 ] && sinfo
  return $rc
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
