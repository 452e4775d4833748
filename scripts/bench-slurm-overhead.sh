#!/usr/bin/env bash
# Per-task overhead on a real Slurm, in one run: plain `sbatch` (polled),
# native mode (`lardon submit --engine slurm`, one job per task) and pilot
# mode (`lardon cluster submit` through a broker whose Slurm provider keeps
# one agent allocation; docs/DESIGN.md §14). Usage:
#
#   scripts/bench-slurm-overhead.sh [--tasks N] [--batch M] [STATE_DIR]
#
# The task is `true`, so what is timed is the overhead itself. For each
# mode:
#   * turnaround: N tasks one after another, each submitted when the last
#     one's answer came back (submission to answer, as the submitter sees
#     it); p50 and p90;
#   * throughput: M tasks submitted at once, first submission to last
#     answer, divided by M.
# Pilot mode's first task waits for the allocation (sbatch, the agent's
# start and dial-back): reported on its own as the cold start; the
# turnaround figures are with the allocation warm.
#
# Slurm: the one SLURM_CONF names when it is set (e.g. the test cluster of
# scripts/slurm-up.sh), else this script brings up scripts/slurm-up.sh's
# two-node cluster in STATE_DIR (default /tmp/lardon-bench-overhead) and
# stops it at the end. Native mode's daemon looks jobs up every 100 ms
# (slurm_poll_ms=100), the broker ticks every 200 ms.
set -euo pipefail

TASKS=20
BATCH=20
STATE=/tmp/lardon-bench-overhead
while [ $# -gt 0 ]; do
    case "$1" in
    --tasks) TASKS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    -h | --help) sed -n '2,25p' "$0"; exit 0 ;;
    -*) echo "bench-slurm-overhead: unknown flag $1 (see --help)" >&2; exit 2 ;;
    *) STATE=$1; shift ;;
    esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The newer of the release and debug builds, unless LARDON names one.
LARDON=${LARDON:-$({ ls -t "$ROOT/target/release/lardon" "$ROOT/target/debug/lardon" 2>/dev/null || true; } | head -n 1)}
[ -n "$LARDON" ] || { echo "bench-slurm-overhead: build lardon first (cargo build --release -p lardon-cli)" >&2; exit 1; }
say() { printf 'bench-slurm-overhead: %s\n' "$*" >&2; }

OWN_SLURM=
if [ -z "${SLURM_CONF:-}" ]; then
    eval "$("$ROOT/scripts/slurm-up.sh" "$STATE" | tail -n 1)"
    OWN_SLURM=1
fi
D=$(mktemp -d)
PIDS=()
JOBS_BEFORE=$(squeue -h -o '%i' | sort)
cleanup() {
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do wait "$p" 2>/dev/null || true; done
    # Only this run's jobs (others may share this Slurm).
    for j in $(squeue -h -o '%i|%j' | grep -E '\|(lbo-|lardon-)' | cut -d'|' -f1); do
        grep -qx "$j" <<<"$JOBS_BEFORE" || scancel "$j" 2>/dev/null || true
    done
    [ -n "$OWN_SLURM" ] && { "$ROOT/scripts/slurm-down.sh" "$STATE" >/dev/null 2>&1 || true; }
    rm -rf "$D"
}
trap cleanup EXIT

ms() { echo $(($(date +%s%N) / 1000000)); }
# p50 and p90 of the numbers on stdin, one per line.
pct() { sort -n | awk '{a[NR]=$1} END {i=int((NR+1)/2); j=int(NR*0.9+0.999); if (j<1) j=1; printf "%d ms p50, %d ms p90", a[i], a[j]}'; }
row() { printf '%-26s turnaround %-22s throughput %6.1f ms/task (%d at once)\n' "$1" "$2" "$3" "$BATCH"; }

# Plain sbatch: the floor Slurm itself sets.
plain() {
    local lat=() t0
    local id
    for i in $(seq "$TASKS"); do
        t0=$(ms)
        # Polled every 50 ms (sbatch --wait polls every 2 s or more, which
        # would be its own figure, not Slurm's).
        id=$(sbatch --parsable --job-name="lbo-plain-$i" --output=/dev/null --wrap=true)
        while squeue -h -j "$id" -t PENDING,RUNNING,CONFIGURING,COMPLETING 2>/dev/null | grep -q .; do sleep 0.05; done
        lat+=($(($(ms) - t0)))
    done
    t0=$(ms)
    local ids=()
    for i in $(seq "$BATCH"); do
        ids+=("$(sbatch --parsable --job-name="lbo-plainb-$i" --output=/dev/null --wrap=true)")
    done
    local list
    list=$(IFS=,; echo "${ids[*]}")
    while squeue -h -j "$list" -t PENDING,RUNNING,CONFIGURING,COMPLETING 2>/dev/null | grep -q .; do sleep 0.05; done
    row "plain sbatch" "$(printf '%s\n' "${lat[@]}" | pct)" "$(echo "$(ms) $t0 $BATCH" | awk '{print ($1-$2)/$3}')"
}

l() { "$LARDON" --state-dir "$D/daemon" "$@"; }
native() {
    mkdir -p "$D/daemon"
    "$LARDON" daemon --simulate-host 64GiB,64 --state-dir "$D/daemon" >"$D/daemon.out" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 200); do l status >/dev/null 2>&1 && break; sleep 0.05; done
    l policy --set slurm_poll_ms=100 >/dev/null
    local lat=() t0 id
    for i in $(seq "$TASKS"); do
        t0=$(ms)
        id=$(l submit --engine slurm --mem 64MiB --class lbo --name "lbo-native-$i" -- true)
        l wait "$id" >/dev/null
        lat+=($(($(ms) - t0)))
    done
    t0=$(ms)
    local ids=()
    for i in $(seq "$BATCH"); do
        ids+=("$(l submit --engine slurm --mem 64MiB --class lbo --name "lbo-nativeb-$i" -- true)")
    done
    l wait "${ids[@]}" >/dev/null
    row "native (job per task)" "$(printf '%s\n' "${lat[@]}" | pct)" "$(echo "$(ms) $t0 $BATCH" | awk '{print ($1-$2)/$3}')"
}

pilot() {
    local port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    cat >"$D/pilot.toml" <<EOF
provider = "slurm"
broker = "127.0.0.1:$port"
idle_exit = "2m"
tick = "200ms"
agent_program = "$LARDON"
output_dir = "$D"
[[shape]]
name = "lbo"
memory = "500MiB"
cpus = 1
walltime = "30m"
capabilities = ["sh"]
EOF
    "$LARDON" broker --listen "127.0.0.1:$port" --provision "$D/pilot.toml" >"$D/broker.out" 2>&1 &
    PIDS+=($!)
    local b="127.0.0.1:$port"
    for _ in $(seq 200); do "$LARDON" cluster status --broker "$b" >/dev/null 2>&1 && break; sleep 0.05; done
    local t0 cold lat=()
    t0=$(ms)
    "$LARDON" cluster submit --broker "$b" --capability sh --submitter lbo -- true
    cold=$(($(ms) - t0))
    for i in $(seq "$TASKS"); do
        t0=$(ms)
        "$LARDON" cluster submit --broker "$b" --capability sh --submitter lbo -- true
        lat+=($(($(ms) - t0)))
    done
    t0=$(ms)
    local subs=()
    for i in $(seq "$BATCH"); do
        "$LARDON" cluster submit --broker "$b" --capability sh --submitter "lbo-$i" -- true &
        subs+=($!)
    done
    for p in "${subs[@]}"; do wait "$p"; done
    row "pilot (warm allocation)" "$(printf '%s\n' "${lat[@]}" | pct)" "$(echo "$(ms) $t0 $BATCH" | awk '{print ($1-$2)/$3}')"
    printf '%-26s %d ms (first task: sbatch, agent start and dial-back, the task)\n' "pilot cold start" "$cold"
}

say "lardon: $LARDON; $TASKS tasks one by one and $BATCH at once per mode; SLURM_CONF=$SLURM_CONF"
plain
native
pilot
