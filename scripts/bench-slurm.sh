#!/usr/bin/env bash
# Native Slurm mode with learned --mem against plain `sbatch` with the
# user's guesses, on the real two-node Slurm of scripts/slurm-up.sh, in one
# run (docs/DESIGN.md §12, §14). Usage:
#
#   scripts/bench-slurm.sh [--tasks N] [--secs S] [--days D] [STATE_DIR]
#
# The workload: three classes of N tasks each (default 8), every task
# `lardon exercise --mem REAL --secs S` (it writes every page and holds
# them), with the user's guess for --mem:
#
#   over   REAL 300 MiB, guessed 1200 MiB   (4 x too much)
#   under  REAL 200 MiB, guessed  120 MiB   (too little: OUT_OF_MEMORY)
#   close  REAL 150 MiB, guessed  200 MiB
#
# Slurm here: two fake nodes of 1536 MiB whose one CPU up to 8 jobs share
# (OverSubscribe=FORCE:8; memory stays consumable), so memory alone bounds
# how many jobs run at once, and
# task/cgroup enforcing each job's --mem (a job over it ends OUT_OF_MEMORY).
# The script brings this Slurm up in STATE_DIR (default
# /tmp/lardon-bench-slurm) and down at the end; no other Slurm may be
# running on the machine (the ports are fixed).
#
# Each "day" the same workload is submitted again, all at once, as a user
# with a daily pipeline would:
#   * plain: `sbatch --mem=GUESS`; a job that ends OUT_OF_MEMORY is
#     resubmitted by the user's retry loop with twice its --mem, until it
#     completes (the guesses are never corrected: plain sbatch learns
#     nothing);
#   * native: `lardon submit --engine slurm --mem GUESS --class C`, through
#     one daemon kept across days; the daemon resubmits an OUT_OF_MEMORY job
#     once at the size the kill taught and sizes later jobs of the class from
#     the measured peaks; a task still failed is restarted by the same retry
#     loop (`lardon restart`).
# Reported per day and mode: makespan (first submission to last completion),
# OUT_OF_MEMORY jobs, and jobs submitted. Slurm's own scheduling latency is
# part of both.
set -euo pipefail

TASKS=8
SECS=3
DAYS=2
STATE=/tmp/lardon-bench-slurm
while [ $# -gt 0 ]; do
    case "$1" in
    --tasks) TASKS=$2; shift 2 ;;
    --secs) SECS=$2; shift 2 ;;
    --days) DAYS=$2; shift 2 ;;
    -h | --help) sed -n '2,36p' "$0"; exit 0 ;;
    -*) echo "bench-slurm: unknown flag $1 (see --help)" >&2; exit 2 ;;
    *) STATE=$1; shift ;;
    esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# The newer of the release and debug builds, unless LARDON names one.
LARDON=${LARDON:-$({ ls -t "$ROOT/target/release/lardon" "$ROOT/target/debug/lardon" 2>/dev/null || true; } | head -n 1)}
[ -n "$LARDON" ] || { echo "bench-slurm: build lardon first (cargo build --release -p lardon-cli)" >&2; exit 1; }
say() { printf 'bench-slurm: %s\n' "$*" >&2; }

export SLURM_NODE_MEM=1536 SLURM_OVERSUBSCRIBE=FORCE:8
eval "$("$ROOT/scripts/slurm-up.sh" "$STATE" | tail -n 1)"
D=$(mktemp -d)
DAEMON_PID=
cleanup() {
    scancel -u "$(id -un)" >/dev/null 2>&1 || true
    [ -n "$DAEMON_PID" ] && kill "$DAEMON_PID" 2>/dev/null && wait "$DAEMON_PID" 2>/dev/null
    "$ROOT/scripts/slurm-down.sh" "$STATE" >/dev/null 2>&1 || true
    rm -rf "$D"
}
trap cleanup EXIT

CLASSES="over:300:1200 under:200:120 close:150:200"
now() { date +%s.%N; }
secs_since() { echo "$(now) $1" | awk '{printf "%.1f", $1 - $2}'; }

# Job states by id: "ID|STATE" lines for the given comma-separated ids.
states() { squeue -h -t all -j "$1" -o '%i|%T' 2>/dev/null || true; }

plain_day() {
    local day=$1 t0 pending=() mem=() argv=() ooms=0 jobs=0
    t0=$(now)
    declare -A memof cmdof
    for c in $CLASSES; do
        IFS=: read -r name real guess <<<"$c"
        for i in $(seq "$TASKS"); do
            id=$(sbatch --parsable --job-name="lb-plain-$day-$name-$i" --mem="${guess}M" \
                --cpus-per-task=1 --output=/dev/null \
                --wrap="exec $LARDON exercise --mem ${real}MiB --secs $SECS")
            memof[$id]=$guess
            cmdof[$id]="$name:$real:$i"
            pending+=("$id")
            jobs=$((jobs + 1))
        done
    done
    while [ ${#pending[@]} -gt 0 ]; do
        local next=() seen
        seen=$(states "$(IFS=,; echo "${pending[*]}")")
        for id in "${pending[@]}"; do
            st=$(grep -m1 "^$id|" <<<"$seen" | cut -d'|' -f2 || true)
            case "$st" in
            COMPLETED) ;;
            OUT_OF_MEMORY | FAILED | CANCELLED | NODE_FAIL | TIMEOUT)
                [ "$st" = OUT_OF_MEMORY ] && ooms=$((ooms + 1))
                IFS=: read -r name real i <<<"${cmdof[$id]}"
                m=$((memof[$id] * 2))
                nid=$(sbatch --parsable --job-name="lb-plain-$day-$name-$i" --mem="${m}M" \
                    --cpus-per-task=1 --output=/dev/null \
                    --wrap="exec $LARDON exercise --mem ${real}MiB --secs $SECS")
                memof[$nid]=$m
                cmdof[$nid]=${cmdof[$id]}
                next+=("$nid")
                jobs=$((jobs + 1))
                ;;
            *) next+=("$id") ;;
            esac
        done
        pending=("${next[@]+"${next[@]}"}")
        [ ${#pending[@]} -gt 0 ] && sleep 0.2
    done
    printf 'plain  day %d: makespan %6s s, OUT_OF_MEMORY %2d, jobs %2d\n' "$day" "$(secs_since "$t0")" "$ooms" "$jobs"
}

l() { "$LARDON" --state-dir "$D" "$@"; }
native_day() {
    local day=$1 t0 ids=() ooms jobs
    t0=$(now)
    for c in $CLASSES; do
        IFS=: read -r name real guess <<<"$c"
        for i in $(seq "$TASKS"); do
            ids+=("$(l submit --engine slurm --mem "${guess}MiB" --cpus 1 --class "$name" \
                --name "lb-native-$day-$name-$i" -- "$LARDON" exercise --mem "${real}MiB" --secs "$SECS")")
        done
    done
    local left=("${ids[@]}")
    while [ ${#left[@]} -gt 0 ]; do
        l wait "${left[@]}" >/dev/null 2>&1 || true
        local again=()
        for id in "${left[@]}"; do
            st=$(l status --json "$id" | grep -o '"state": *"[a-z_]*"' | head -1 | grep -o '[a-z_]*"$' | tr -d '"')
            [ "$st" = completed ] || { l restart "$id" >/dev/null; again+=("$id"); }
        done
        left=("${again[@]+"${again[@]}"}")
    done
    local mark
    mark=$(now)
    # Count this day's jobs as Slurm saw them (MinJobAge keeps them 30 s).
    local seen
    seen=$(squeue -h -t all -o '%j|%T' | grep "^lb-native-$day-" || true)
    ooms=$(grep -c '|OUT_OF_MEMORY$' <<<"$seen" || true)
    jobs=$(grep -c . <<<"$seen" || true)
    printf 'native day %d: makespan %6s s, OUT_OF_MEMORY %2d, jobs %2d\n' "$day" "$(echo "$mark $t0" | awk '{printf "%.1f", $1 - $2}')" "$ooms" "$jobs"
}

say "lardon: $LARDON; $((TASKS * 3)) tasks a day of ${SECS} s each; $DAYS days"
"$LARDON" daemon --simulate-host 64GiB,64 --state-dir "$D" >"$D/daemon.out" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 100); do l status >/dev/null 2>&1 && break; sleep 0.1; done
l policy --set slurm_poll_ms=100 >/dev/null
for day in $(seq "$DAYS"); do
    plain_day "$day"
    native_day "$day"
done
