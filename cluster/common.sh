# Shell helpers shared by cluster/local-slurm.sh and cluster/multihost.sh (sourced, not run).
# The caller sets LOG_NAME (the prefix of its messages) and SUDO ("" as root, else "sudo").

log() { echo "$LOG_NAME: $*" >&2; }

pid_alive() {  # pid_alive PIDFILE: true if the file names a live process
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

install_packages() {  # install_packages PKG...: apt-get install those not installed yet
  local missing=()
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
}

# Open MPI first: it brings libpmix2, which slurmd's mpi/pmix plugin loads when it starts.
SLURM_PACKAGES=(openmpi-bin libopenmpi-dev munge slurm-wlm)

stop_pidfile() {  # stop_pidfile NAME PIDFILE: SIGTERM, then SIGKILL after 5 s; removes the file
  local pid
  pid_alive "$2" || { $SUDO rm -f "$2"; return 0; }
  pid=$(cat "$2")
  $SUDO kill "$pid"
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || { $SUDO rm -f "$2"; return 0; }
    sleep 0.1
  done
  log "$1 (pid $pid) ignored SIGTERM; sending SIGKILL"
  $SUDO kill -9 "$pid" 2>/dev/null || true
  $SUDO rm -f "$2"
}

# slurm.conf lines both clusters share: no systemd, no cgroups, no accounting.
slurm_common_conf() {
  cat <<EOF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# One rank that dies ends the whole step instead of leaving the others blocked in a collective.
KillOnBadExit=1
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SchedulerType=sched/backfill
InactiveLimit=0
MinJobAge=300
KillWait=5
EOF
}
