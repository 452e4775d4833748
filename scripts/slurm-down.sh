#!/usr/bin/env bash
# Stops what scripts/slurm-up.sh STATE_DIR started, by pid file: both slurmd,
# then slurmctld, then munged (unless --keep-munge). Idempotent: a missing
# pid file or a process already gone is not an error. Usage:
#
#   scripts/slurm-down.sh STATE_DIR [--keep-munge]
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 STATE_DIR [--keep-munge]" >&2
    exit 2
fi
S=$1
KEEP_MUNGE=${2:-}

# Stops the process named in a pid file if it is still the expected
# program (a recycled pid must not be signalled), waiting up to 10 s for it
# to exit before SIGKILL.
stop() {
    local pidfile=$1 name=$2 pid
    [ -s "$pidfile" ] || return 0
    pid=$(cat "$pidfile")
    if [ -r "/proc/$pid/comm" ] && [ "$(cat "/proc/$pid/comm")" = "$name" ]; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 100); do
            [ -d "/proc/$pid" ] || break
            sleep 0.1
        done
        [ -d "/proc/$pid" ] && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

for n in n1 n2; do
    stop "$S/run/slurmd-$n.pid" slurmd
done
stop "$S/run/slurmctld.pid" slurmctld
if [ "$KEEP_MUNGE" != "--keep-munge" ]; then
    stop /run/munge/munged.pid munged
fi
echo "slurm-down: stopped" >&2
