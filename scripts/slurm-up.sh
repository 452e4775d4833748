#!/usr/bin/env bash
# Brings up a real two-node Slurm cluster on this one machine, for native
# mode and its tests (docs/DESIGN.md §14). Usage:
#
#   scripts/slurm-up.sh STATE_DIR
#   eval "$(scripts/slurm-up.sh STATE_DIR | tail -n 1)"   # sets SLURM_CONF
#
# What it does, in order (no systemd: the daemons are started by hand and
# stopped by their pid files with scripts/slurm-down.sh STATE_DIR):
#   1. installs Debian's packages if `slurmctld` is missing;
#   2. writes STATE_DIR/slurm.conf (two fake 1-CPU nodes n1 and n2 on this
#      host, ports 17001/17002) and a cgroup.conf that enforces each job's
#      memory, so a job over its `--mem` ends OUT_OF_MEMORY;
#   3. starts munged (auth/munge) — or, if munge cannot start, configures
#      auth/none and says so on stderr;
#   4. starts slurmctld (with no jobs left from an earlier run) and both
#      slurmd, then polls `sinfo` until both nodes are up (idle, or running
#      jobs when the daemons were already up), with a deadline
#      (SLURM_UP_TIMEOUT seconds, default 60).
#
# Knobs (environment): SLURM_NODE_MEM, each node's RealMemory in MiB
# (default 4096); SLURM_SELECT_PARAMS, the consumable resources (default
# CR_CPU_Memory; CR_Memory lets jobs share the fake nodes' one CPU, so that
# memory alone bounds how many run at once, as scripts/bench-slurm.sh needs).
#
# Idempotent: run twice with the same STATE_DIR and the second run finds the
# daemons alive and only waits for idle. The last line on stdout is
# `export SLURM_CONF=...`; progress and timings go to stderr.
set -euo pipefail

if [ $# -ne 1 ]; then
    echo "usage: $0 STATE_DIR" >&2
    exit 2
fi
mkdir -p "$1"
S=$(cd "$1" && pwd)
CONF="$S/slurm.conf"
H=$(hostname -s)
DEADLINE_S=${SLURM_UP_TIMEOUT:-60}
NODE_MEM=${SLURM_NODE_MEM:-4096}
SELECT_PARAMS=${SLURM_SELECT_PARAMS:-CR_CPU_Memory}
t0=$(date +%s.%N)

say() { printf 'slurm-up: %s\n' "$*" >&2; }
elapsed() { echo "$(date +%s.%N) $t0" | awk '{printf "%.2f", $1 - $2}'; }

# A pid file names a live process of the expected program.
alive() {
    local pidfile=$1 name=$2 pid
    [ -s "$pidfile" ] || return 1
    pid=$(cat "$pidfile")
    [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$name" ]
}

# 1. Packages.
if ! command -v slurmctld >/dev/null 2>&1; then
    say "installing slurmctld slurmd slurm-client munge"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge >"$S/apt.log" 2>&1; then
        # Stale package lists are the usual cause; refresh once and retry.
        apt-get update >>"$S/apt.log" 2>&1
        apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge >>"$S/apt.log" 2>&1 ||
            { say "apt-get install failed, see $S/apt.log"; exit 1; }
    fi
    say "installed in $(elapsed) s"
fi

mkdir -p "$S/state" "$S/spool" "$S/run" "$S/log"

# 2-3. Authentication: munge when it starts, auth/none otherwise.
AUTH=auth/munge
CRED=cred/munge
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    if command -v munged >/dev/null 2>&1 && id munge >/dev/null 2>&1; then
        mkdir -p /run/munge
        chown munge:munge /run/munge
        # munged daemonises itself and refuses to start twice.
        su -s /bin/sh munge -c munged >>"$S/log/munged.log" 2>&1 || true
        for _ in $(seq 50); do
            munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1 && break
            sleep 0.1
        done
    fi
fi
if munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "munge works: auth/munge"
else
    AUTH=auth/none
    CRED=cred/none
    say "munge could not start: using auth/none + cred/none"
fi

cat >"$CONF.new" <<EOF
# Written by scripts/slurm-up.sh: two fake 1-CPU nodes on one host.
ClusterName=lardontest
SlurmctldHost=$H(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=$AUTH
CredType=$CRED
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
# Each job gets its own memory cgroup limited to its --mem: the
# OUT_OF_MEMORY path of native mode needs it, and lardon exec reads the
# job's measured peak from it.
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=$SELECT_PARAMS
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0,default_queue_depth=1000
DefMemPerCPU=100
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MinJobAge=30
KillWait=5
NodeName=n1 NodeHostname=$H NodeAddr=127.0.0.1 Port=17001 CPUs=1 RealMemory=$NODE_MEM State=UNKNOWN
NodeName=n2 NodeHostname=$H NodeAddr=127.0.0.1 Port=17002 CPUs=1 RealMemory=$NODE_MEM State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$S/cgroup.conf.new" <<EOF
CgroupPlugin=autodetect
ConstrainCores=yes
ConstrainRAMSpace=yes
ConstrainSwapSpace=no
EOF
mv "$S/cgroup.conf.new" "$S/cgroup.conf"
if [ -f "$CONF" ] && ! cmp -s "$CONF" "$CONF.new"; then
    # A changed config (auth fell back, new host name) needs fresh daemons.
    say "configuration changed: restarting the daemons"
    mv "$CONF.new" "$CONF"
    "$(dirname "$0")/slurm-down.sh" "$S" --keep-munge
else
    mv "$CONF.new" "$CONF"
fi
export SLURM_CONF="$CONF"

# 4. Daemons: controller first, then one slurmd per fake node.
if ! alive "$S/run/slurmctld.pid" slurmctld; then
    # -c: a test cluster starts with no jobs left by an earlier run (a
    # restored long job would hold a node).
    slurmctld -c -f "$CONF" >>"$S/log/slurmctld.out" 2>&1
fi
for n in n1 n2; do
    if ! alive "$S/run/slurmd-$n.pid" slurmd; then
        slurmd -f "$CONF" -N "$n" >>"$S/log/slurmd-$n.out" 2>&1
    fi
done

# Poll until both nodes are up: idle, or busy with jobs when the daemons
# were already running (a registering or lost node says unknown, down or
# idle* — a trailing * means not responding), failing with the logs' tails
# at the deadline.
end=$(($(date +%s) + DEADLINE_S))
while :; do
    states=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u | tr '\n' ' ' || true)
    if [ "$(sinfo -h -N -o '%T' 2>/dev/null | grep -cxE 'idle|mixed|allocated|completing' || true)" -ge 2 ]; then
        break
    fi
    if [ "$(date +%s)" -ge "$end" ]; then
        say "nodes not idle after ${DEADLINE_S}s (states: ${states:-none})"
        tail -n 20 "$S/log/slurmctld.log" "$S/log/slurmd-n1.log" >&2 || true
        exit 1
    fi
    sleep 0.2
done
say "two nodes up $(elapsed) s after start ($AUTH)"
echo "export SLURM_CONF=$CONF"
