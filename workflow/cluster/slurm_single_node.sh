#!/usr/bin/env bash
# A single-node SLURM (Debian's slurmctld, slurmd, slurm-client, munge; SLURM 22.05) for running the
# workflow through workflow/profiles/slurm on one machine. Needs root; no systemd. Everything the
# cluster writes (keys, sockets, state, logs, pid files, slurm.conf) lives in one state directory,
# and slurm.conf is also copied to /etc/slurm/slurm.conf, where SLURM's clients look by default: the
# executor plugin's job step (snakemake-executor-plugin-slurm-jobstep) drops SLURM_CONF before its
# inner srun, so a job could not find the cluster otherwise. An /etc/slurm/slurm.conf this script did
# not write is never touched (start fails instead); `stop` removes the copy it wrote.
#
#   slurm_single_node.sh install          apt-get install the four packages (no-op when present)
#   slurm_single_node.sh start DIR        start munged, slurmctld, slurmd; wait until a job runs
#   slurm_single_node.sh env DIR          print `export SLURM_CONF=...` for the shell
#   slurm_single_node.sh stop DIR         cancel jobs, stop the three daemons by PID (always safe)
#
# start stops whatever it started when a step fails, prints one line "slurm-single-node: FAILED: ..."
# and exits non-zero. Every wait has a timeout. Liveness is checked by PID file (kill -0 on a
# non-zombie) and, for munged, by a credential round trip (munge -n | unmunge): a stopped munged can
# leave a zombie that a process-name check would take for a live daemon.
# Partition: "attncert" (not the default partition: a submission must name it, e.g. SBATCH_PARTITION).
set -uo pipefail

PARTITION=attncert
WAIT_START=${SLURM_SINGLE_NODE_TIMEOUT:-60}   # seconds per daemon / readiness step
WAIT_STOP=20                                  # seconds before SIGKILL
PACKAGES=(slurmctld slurmd slurm-client munge)

log() { printf 'slurm-single-node: %s\n' "$*" >&2; }
die() { printf 'slurm-single-node: FAILED: %s\n' "$*" >&2; exit 1; }

# A live process: exists and is not a zombie.
alive() {
    local pid=$1 state
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ "$state" != Z && "$state" != X ]]
}

pid_of() { [[ -s "$1" ]] && tr -dc '0-9' <"$1"; }

# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND every 0.5 s until it succeeds.
wait_for() {
    local secs=$1 what=$2 t0=$SECONDS
    shift 2
    until "$@" >/dev/null 2>&1; do
        (( SECONDS - t0 >= secs )) && return 1
        sleep 0.5
    done
    log "$what after $(( SECONDS - t0 )) s"
}

cmd_install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        && command -v munged >/dev/null; then
        log "packages present: $(slurmctld -V 2>/dev/null), $(munged --version 2>&1 | head -n1)"
        return 0
    fi
    [[ $(id -u) -eq 0 ]] || die "installing ${PACKAGES[*]} needs root (apt-get); run as root or install them yourself"
    command -v apt-get >/dev/null || die "no apt-get: install ${PACKAGES[*]} (SLURM 22.05) with your package manager"
    # The packages' maintainer scripts must not start daemons we would not own: without a
    # policy-rc.d, add one that refuses service starts for the duration of the install.
    local policy=/usr/sbin/policy-rc.d added=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && added=1
    fi
    local t0=$SECONDS rc=0
    log "apt-get install ${PACKAGES[*]}"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}"; } \
        >/tmp/slurm-single-node-apt.log 2>&1 || rc=$?
    (( added )) && rm -f "$policy"
    (( rc == 0 )) || die "apt-get install ${PACKAGES[*]} exited $rc (log: /tmp/slurm-single-node-apt.log: $(tail -n1 /tmp/slurm-single-node-apt.log))"
    log "installed in $(( SECONDS - t0 )) s: $(slurmctld -V 2>/dev/null)"
}

munge_ok() { munge -n -S "$1/munge/munge.socket" | unmunge -S "$1/munge/munge.socket"; }

# start_daemon NAME PIDFILE COMMAND...: run COMMAND (which daemonizes and writes PIDFILE) and wait for
# PIDFILE to name a live process.
start_daemon() {
    local name=$1 pidfile=$2
    shift 2
    # daemon output goes to a file, never to our stdout/stderr (a caller reading them to EOF would hang)
    "$@" </dev/null >>"$(dirname "$pidfile")/log/$name.out" 2>&1 || return 1
    wait_for "$WAIT_START" "$name pid file written" bash -c "pid=\$(tr -dc 0-9 <'$pidfile') && kill -0 \$pid" \
        || return 1
    alive "$(pid_of "$pidfile")" || return 1
    log "$name up: pid $(pid_of "$pidfile")"
}

write_conf() {
    local dir=$1 host cpus mem
    host=$(hostname -s)
    # The node's real resources, as slurmd reports them; RealMemory must not exceed what slurmd sees.
    local probe
    probe=$(slurmd -C 2>/dev/null | head -n1) || true
    cpus=$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$probe")
    mem=$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$probe")
    [[ -n "$cpus" && -n "$mem" ]] || { cpus=$(nproc); mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 )); }
    mem=$(( mem * 9 / 10 ))
    cat >"$dir/slurm.conf" <<EOF
$MARKER
ClusterName=attncert
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# No accounting database: sacct cannot see jobs. Jobs stay visible to squeue for 10 minutes after they
# end, which is what '--slurm-status-command squeue' needs.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$host Default=NO MaxTime=INFINITE State=UP
EOF
    log "slurm.conf: node $host CPUs=$cpus RealMemory=$mem, partition $PARTITION"
}

ETC_CONF=/etc/slurm/slurm.conf
MARKER="# single-node SLURM written by workflow/cluster/slurm_single_node.sh"

# ours DIR: /etc/slurm/slurm.conf is the copy written for state directory DIR
ours() { [[ -f $ETC_CONF ]] && head -n1 "$ETC_CONF" | grep -qxF "$MARKER" && grep -qxF "StateSaveLocation=$1/state" "$ETC_CONF"; }

install_conf() {
    local dir=$1 other
    if [[ -e $ETC_CONF ]]; then
        head -n1 "$ETC_CONF" | grep -qxF "$MARKER" || return 1
        other=$(sed -n 's/^StateSaveLocation=\(.*\)\/state$/\1/p' "$ETC_CONF")
        if [[ -n "$other" && "$other" != "$dir" ]] && alive "$(pid_of "$other/slurmctld.pid")"; then
            die "another single-node SLURM of this script is running ($other): '$0 stop $other' first"
        fi
    fi
    mkdir -p "$(dirname "$ETC_CONF")" && cp "$dir/slurm.conf" "$ETC_CONF"
}

cmd_start() {
    local dir=${1:?usage: start DIR}
    [[ $(id -u) -eq 0 ]] || die "starting slurmctld/slurmd as configured here needs root"
    for b in munged munge unmunge slurmctld slurmd sbatch squeue scontrol sinfo; do
        command -v "$b" >/dev/null || die "$b not found: run '$0 install' first"
    done
    mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || die "cannot create $dir"
    # munged refuses group/world-writable directories on its paths; the socket path must stay short
    mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log" && chmod 0700 "$dir" "$dir/munge"
    (( ${#dir} < 80 )) || die "state directory path too long for a unix socket: $dir"
    for f in munged.pid slurmctld.pid slurmd.pid; do
        alive "$(pid_of "$dir/$f")" && die "$dir/$f names a live process: stop that cluster first ($0 stop $dir)"
        rm -f "$dir/$f"
    done
    if [[ -e $ETC_CONF ]] && ! head -n1 "$ETC_CONF" | grep -qxF "$MARKER"; then
        die "$ETC_CONF exists and was not written by this script: a SLURM is configured on this machine already"
    fi
    # on failure: stop what was started, quietly, so that the FAILED line stays the last line
    trap 'rc=$?; if (( rc != 0 )); then cmd_stop "$dir" >/dev/null 2>&1; fi' EXIT
    local t0=$SECONDS

    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none && chmod 0400 "$dir/munge/munge.key" \
        || die "cannot write the munge key"
    start_daemon munged "$dir/munged.pid" munged --force --key-file="$dir/munge/munge.key" \
        --socket="$dir/munge/munge.socket" --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munged.seed" \
        || die "munged did not start within ${WAIT_START}s ($(tail -n1 "$dir/log/munged.log" 2>/dev/null))"
    wait_for "$WAIT_START" "munge credential round trip ok" munge_ok "$dir" \
        || die "munged (pid $(pid_of "$dir/munged.pid")) does not answer 'munge -n | unmunge' within ${WAIT_START}s"

    write_conf "$dir"
    install_conf "$dir" || die "$ETC_CONF exists and was not written by this script: a SLURM is configured on this machine already"
    export SLURM_CONF=$dir/slurm.conf
    start_daemon slurmctld "$dir/slurmctld.pid" slurmctld -f "$SLURM_CONF" \
        || die "slurmctld did not start within ${WAIT_START}s ($(tail -n1 "$dir/log/slurmctld.log" 2>/dev/null))"
    wait_for "$WAIT_START" "slurmctld answers" scontrol ping \
        || die "slurmctld (pid $(pid_of "$dir/slurmctld.pid")) does not answer 'scontrol ping' within ${WAIT_START}s ($(tail -n1 "$dir/log/slurmctld.log"))"
    start_daemon slurmd "$dir/slurmd.pid" slurmd -f "$SLURM_CONF" -N "$(hostname -s)" \
        || die "slurmd did not start within ${WAIT_START}s ($(tail -n1 "$dir/log/slurmd.log" 2>/dev/null))"
    wait_for "$WAIT_START" "node idle" bash -c "sinfo -h -N -o %t | grep -qx idle" \
        || die "node not idle within ${WAIT_START}s (state: $(sinfo -h -N -o %t 2>&1 | head -n1); $(tail -n1 "$dir/log/slurmd.log"))"
    # A job that really runs: scheduling, credentials and step launch all work.
    local out
    out=$(timeout "$WAIT_START" srun -p "$PARTITION" -N1 -n1 -t 1 hostname 2>&1) \
        || die "a test job did not run within ${WAIT_START}s: ${out//$'\n'/ }"
    log "test job ran on $out"
    trap - EXIT
    log "cluster up in $(( SECONDS - t0 )) s: munged $(pid_of "$dir/munged.pid"), slurmctld $(pid_of "$dir/slurmctld.pid"), slurmd $(pid_of "$dir/slurmd.pid"); export SLURM_CONF=$SLURM_CONF"
}

# stop_pid NAME PIDFILE: SIGTERM, wait, then SIGKILL; a daemon that ignores SIGTERM is still stopped.
stop_pid() {
    local name=$1 pidfile=$2 pid
    pid=$(pid_of "$pidfile") || { log "$name: no pid file"; return 0; }
    [[ -n "$pid" ]] || { log "$name: empty pid file"; return 0; }
    if ! alive "$pid"; then
        log "$name (pid $pid) not running"
        rm -f "$pidfile"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null
    if ! wait_for "$WAIT_STOP" "$name (pid $pid) stopped" bash -c "! kill -0 $pid || [[ \$(awk '{print \$3}' /proc/$pid/stat) == Z ]]"; then
        log "$name (pid $pid) ignored SIGTERM for ${WAIT_STOP}s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null
        wait_for 10 "$name (pid $pid) killed" bash -c "! kill -0 $pid || [[ \$(awk '{print \$3}' /proc/$pid/stat) == Z ]]" \
            || { log "$name (pid $pid) still alive after SIGKILL"; return 1; }
    fi
    rm -f "$pidfile"
}

cmd_stop() {
    local dir=${1:?usage: stop DIR} rc=0
    [[ -d "$dir" ]] || { log "no state directory $dir: nothing to stop"; return 0; }
    dir=$(cd "$dir" && pwd)
    export SLURM_CONF=$dir/slurm.conf
    if alive "$(pid_of "$dir/slurmctld.pid")"; then
        # jobs first, so that no job step outlives the daemons
        timeout 10 scancel --partition="$PARTITION" >/dev/null 2>&1 || true
        wait_for 20 "no job left" bash -c "[[ -z \$(squeue -h -t R,CG,PD -o %i 2>/dev/null) ]]" \
            || log "jobs still listed after 20 s: $(timeout 5 squeue -h -o '%i %T' 2>&1 | tr '\n' ' ')"
    fi
    stop_pid slurmd "$dir/slurmd.pid" || rc=1
    stop_pid slurmctld "$dir/slurmctld.pid" || rc=1
    stop_pid munged "$dir/munged.pid" || rc=1
    if ours "$dir"; then rm -f "$ETC_CONF" && log "removed $ETC_CONF"; fi
    (( rc == 0 )) && log "daemons stopped" || log "some daemon could not be stopped"
    return $rc
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start "${2:-}" ;;
    stop) cmd_stop "${2:-}" ;;
    env) echo "export SLURM_CONF=$(cd "${2:?usage: env DIR}" && pwd)/slurm.conf" ;;
    *) echo "usage: $0 install | start DIR | env DIR | stop DIR" >&2; exit 2 ;;
esac
