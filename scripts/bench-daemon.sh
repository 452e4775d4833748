#!/usr/bin/env bash
# Daemon benchmarks of docs/DESIGN.md §12, each as a ratio measured in one run:
#   1. trivial-command launch rate: lardon (daemon, max_running = P) against
#      `xargs -P P`, GNU parallel -j P and (with --pueue) pueue with P slots,
#      lardon both with one `lardon submit` per task and with one
#      `lardon submit --each` for all of them; lardon governs the real host
#      (cpu_reserve 0, so the pool is every CPU), or with --simulate a
#      simulated 64 GiB / 64-CPU one;
#   2. hand-over with limit 1 (max_running 1): the end of one `true` to the
#      start of the next, and `started → finished` of one `true`, medians
#      from the daemon's own stamps (milliseconds);
#   3. `lardon submit` latency (p50/p99 of the whole CLI call) with 0, 10 000
#      and 100 000 tasks already queued behind a blocker;
#   4. the CLI's start-up: `lardon --version` against `/bin/true`;
#   5. beside task-spooler (`tsp`, or `ts`; Debian's task-spooler, installed
#      if missing; --no-tsp skips it), in the same run: its rate with one
#      client process per task (`tsp -n true`, the way `lardon submit` per
#      task is measured, P slots) and its submit latency p50/p99 at the
#      same depths behind a blocker. tsp keeps its queue in memory (not
#      durable across a restart); lardon's survives one.
# Not part of CI. LARDON=path uses that binary instead of building one.
# Usage: scripts/bench-daemon.sh [--tasks N] [--parallel P]
#                         [--depths "0 10000 100000"] [--samples S] [--pueue]
#                         [--simulate] [--static | --nopie] [--no-gates] [--no-tsp]
# --static measures a statically linked, non-PIE build (x86_64/aarch64
# glibc hosts), built into target/static; --nopie a dynamically linked,
# non-PIE one (into target/nopie): no relative relocations for the loader
# to apply at each start, and the daemon still starts runs with
# posix_spawn (the static build forks). --no-gates turns off the load
# and CPU-PSI gates (the peers have none; the clients' own load, and what
# the peers run just before leave in the 1-minute load, can close them).
set -euo pipefail
cd "$(dirname "$0")/.."

TASKS=500
PAR=2
DEPTHS="0 10000 100000"
SAMPLES=200
WITH_PUEUE=0
SIMULATE=0
STATIC=0
NOPIE=0
GATES=on
WITH_TSP=1
while [ $# -gt 0 ]; do
  case "$1" in
    --tasks) TASKS=$2; shift 2 ;;
    --parallel) PAR=$2; shift 2 ;;
    --depths) DEPTHS=$2; shift 2 ;;
    --samples) SAMPLES=$2; shift 2 ;;
    --pueue) WITH_PUEUE=1; shift ;;
    --simulate) SIMULATE=1; shift ;;
    --static) STATIC=1; shift ;;
    --nopie) NOPIE=1; shift ;;
    --no-gates) GATES=off; shift ;;
    --no-tsp) WITH_TSP=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

need() { command -v "$1" >/dev/null 2>&1; }
if ! need parallel; then
  echo "installing GNU parallel (Debian package)…" >&2
  apt-get update -qq >/dev/null && apt-get install -y -qq parallel >/dev/null
fi
TSP=
if [ "$WITH_TSP" = 1 ]; then
  if ! need tsp && ! need ts; then
    echo "installing task-spooler (Debian package)…" >&2
    apt-get update -qq >/dev/null && apt-get install -y -qq task-spooler >/dev/null
  fi
  # Debian names it tsp (ts is moreutils' timestamper); elsewhere it is ts.
  if need tsp; then TSP=tsp; elif need ts && ts -h 2>&1 | grep -q 'spooler'; then TSP=ts; fi
  [ -n "$TSP" ] || { echo "task-spooler not found (pass --no-tsp)" >&2; exit 1; }
fi
if [ "$WITH_PUEUE" = 1 ] && ! need pueue; then
  echo "installing pueue from crates.io (a few minutes)…" >&2
  cargo install --locked pueue >/dev/null
fi

if [ -n "${LARDON:-}" ]; then
  # A binary given (LARDON=path): no build (a smoke run of the script
  # itself; its figures are then that binary's, a debug one's say little).
  echo "using $LARDON (no build)" >&2
elif [ "$STATIC" = 1 ]; then
  # A static, non-PIE executable: no dynamic loader, no relocations to
  # apply at each start (about 0.5 ms less CPU per CLI call; BENCHMARKS.md).
  # Needs --target, so that build scripts and proc macros stay dynamic.
  triple=$(rustc -vV | sed -n 's/^host: //p')
  echo "building lardon (release, statically linked for $triple, into target/static)…" >&2
  RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" \
    CARGO_TARGET_DIR=$PWD/target/static cargo build --release -q -p lardon-cli --target "$triple"
  LARDON=$PWD/target/static/$triple/release/lardon
elif [ "$NOPIE" = 1 ]; then
  # Non-PIE but dynamically linked (see scripts/build-nopie.sh).
  LARDON=$(scripts/build-nopie.sh)
else
  echo "building lardon (release)…" >&2
  cargo build --release -q -p lardon-cli
  LARDON=$PWD/target/release/lardon
fi
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT

now_ns() { date +%s%N; }
rate() { awk -v n="$1" -v ns="$2" 'BEGIN { printf "%.0f", n / (ns / 1e9) }'; }

start_daemon() { # $1 = state dir; $2 = "sim" for a simulated host
  # The real host by default: the load gate counts only foreign load, so
  # Lardon's own tasks do not hold it back. The latency part simulates a
  # host (it measures the store and the RPC, not admission).
  local host=()
  if [ "$SIMULATE" = 1 ] || [ "${2:-}" = sim ]; then host=(--simulate-host 64GiB,64); fi
  "$LARDON" --state-dir "$1" daemon --log-file - "${host[@]}" >"$1.log" 2>&1 &
  for _ in $(seq 200); do [ -S "$1/lardon.sock" ] && break; sleep 0.05; done
  [ -S "$1/lardon.sock" ] || { echo "daemon did not start; see $1.log" >&2; exit 1; }
  "$LARDON" --state-dir "$1" policy --set cpu_reserve=0 >/dev/null
  if [ "$GATES" = off ]; then
    # The peers have no load or CPU-pressure gate: without Lardon's, the
    # launch path alone is measured (the memory budget still governs).
    "$LARDON" --state-dir "$1" policy --set max_load_ratio=off >/dev/null
    "$LARDON" --state-dir "$1" policy --set psi_cpu=100 >/dev/null
  fi
}
stop_daemon() { # $1 = state dir
  local pid; pid=$(cat "$1/lardon.lock" 2>/dev/null || true)
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  for _ in $(seq 100); do [ -S "$1/lardon.sock" ] || break; sleep 0.05; done
}
# Median of "finished - started" (ms) and of "start of task i+1 - end of
# task i" over the tasks of a state dir, from `lardon status --json`.
handover() { # $1 = state dir
  "$LARDON" --state-dir "$1" status --json | python3 -c '
import json, statistics, sys
tasks = json.load(sys.stdin)
tasks = tasks if isinstance(tasks, list) else tasks.get("tasks", [])
t = sorted((x for x in tasks if x.get("started_unix_ms") and x.get("finished_unix_ms")),
           key=lambda x: x["started_unix_ms"])
run = [x["finished_unix_ms"] - x["started_unix_ms"] for x in t]
gap = [b["started_unix_ms"] - a["finished_unix_ms"] for a, b in zip(t, t[1:])]
print(statistics.median(gap) if gap else "n/a", statistics.median(run) if run else "n/a")'
}

echo "== launch rate: $TASKS × true, parallelism $PAR" >&2
t0=$(now_ns); seq "$TASKS" | xargs -P "$PAR" -n 1 true; t1=$(now_ns)
XARGS=$(rate "$TASKS" $((t1 - t0)))
t0=$(now_ns); seq "$TASKS" | parallel -j "$PAR" true >/dev/null; t1=$(now_ns)
PARALLEL=$(rate "$TASKS" $((t1 - t0)))

SD=$WORK/launch; mkdir -p "$SD"; start_daemon "$SD"
"$LARDON" --state-dir "$SD" policy --set max_running="$PAR" >/dev/null
t0=$(now_ns)
seq "$TASKS" | xargs -P 4 -n 50 sh -c 'for _ in "$@"; do "$0" --state-dir "'"$SD"'" submit -- true >/dev/null; done' "$LARDON"
"$LARDON" --state-dir "$SD" wait >/dev/null
t1=$(now_ns)
LARDON_RATE=$(rate "$TASKS" $((t1 - t0)))
stop_daemon "$SD"

SD=$WORK/each; mkdir -p "$SD"; start_daemon "$SD"
"$LARDON" --state-dir "$SD" policy --set max_running="$PAR" >/dev/null
t0=$(now_ns)
seq "$TASKS" | "$LARDON" --state-dir "$SD" submit --each -- true >/dev/null
"$LARDON" --state-dir "$SD" wait >/dev/null
t1=$(now_ns)
EACH_RATE=$(rate "$TASKS" $((t1 - t0)))
stop_daemon "$SD"

echo "== hand-over: 200 × true, max_running 1" >&2
SD=$WORK/handover; mkdir -p "$SD"; start_daemon "$SD"
"$LARDON" --state-dir "$SD" policy --set max_running=1 >/dev/null
seq 200 | "$LARDON" --state-dir "$SD" submit --each -- true >/dev/null
"$LARDON" --state-dir "$SD" wait >/dev/null
read -r HANDOVER RUNTIME < <(handover "$SD")
stop_daemon "$SD"

PUEUE="not run (pass --pueue)"
if [ "$WITH_PUEUE" = 1 ]; then
  PD=$WORK/pueue; mkdir -p "$PD"
  cat >"$PD/pueue.yml" <<EOF
shared:
  pueue_directory: $PD
  use_unix_socket: true
EOF
  pueued -c "$PD/pueue.yml" -d >/dev/null 2>&1 || true
  sleep 1
  pueue -c "$PD/pueue.yml" parallel "$PAR" >/dev/null
  t0=$(now_ns)
  for _ in $(seq "$TASKS"); do pueue -c "$PD/pueue.yml" add -- true >/dev/null; done
  pueue -c "$PD/pueue.yml" wait >/dev/null
  t1=$(now_ns)
  PUEUE=$(rate "$TASKS" $((t1 - t0)))
  pueue -c "$PD/pueue.yml" shutdown >/dev/null 2>&1 || true
fi

TSP_RATE="not run (--no-tsp)"
TSP_LAT_ROWS=""
if [ -n "$TSP" ]; then
  echo "== task-spooler: $TASKS × true, one client per task, $PAR slots" >&2
  # Its own server (TS_SOCKET), output not stored (-n), finished jobs not
  # kept past what the check needs.
  export TS_SOCKET=$WORK/tsp.sock TS_MAXFINISHED=1000
  # Every running job's process (the blocker), then the server (the
  # queued clients exit with it).
  tsp_stop() {
    local id pid
    [ -S "$TS_SOCKET" ] || return 0
    for id in $("$TSP" -l 2>/dev/null | awk 'NR > 1 && $2 == "running" { print $1 }'); do
      pid=$("$TSP" -p "$id" 2>/dev/null) && kill "$pid" 2>/dev/null || true
    done
    "$TSP" -K >/dev/null 2>&1 || true
  }
  trap 'tsp_stop; kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
  tsp_idle() { ! "$TSP" -l | awk 'NR > 1 && ($2 == "running" || $2 == "queued") { found = 1 } END { exit !found }'; }
  "$TSP" -S "$PAR" >/dev/null
  t0=$(now_ns)
  seq "$TASKS" | xargs -P 4 -n 50 sh -c 'for _ in "$@"; do "$0" -n true >/dev/null; done' "$TSP"
  until tsp_idle; do sleep 0.005; done
  t1=$(now_ns)
  TSP_RATE=$(rate "$TASKS" $((t1 - t0)))
  echo "== task-spooler submit latency at depths: $DEPTHS" >&2
  "$TSP" -K >/dev/null 2>&1 || true
  "$TSP" -S 1 >/dev/null
  "$TSP" -n sleep 100000 >/dev/null
  queued=0
  full=""
  for depth in $DEPTHS; do
    fill=$((depth - queued))
    if [ -n "$full" ]; then
      TSP_LAT_ROWS="$TSP_LAT_ROWS| $depth | not reachable: queue full at $full jobs | |"$'\n'
      continue
    fi
    if [ "$fill" -gt 0 ]; then
      echo "   filling to $depth queued jobs (one client each: tsp has no batch submit)…" >&2
      # Each queued tsp job stays a live client process holding a server
      # connection (TS_MAXCONN, 1000 by default): -B exits 2 instead of
      # blocking once the queue is full, and the depth reached is reported.
      seq "$fill" | xargs -P 4 -n 200 sh -c 'for _ in "$@"; do "$0" -B -n true >/dev/null || exit 255; done' "$TSP" || true
      queued=$("$TSP" -l | awk 'NR > 1 && $2 == "queued"' | wc -l)
      if [ "$queued" -lt "$depth" ]; then
        full=$queued
        TSP_LAT_ROWS="$TSP_LAT_ROWS| $depth | not reachable: queue full at $full jobs | |"$'\n'
        continue
      fi
    fi
    : >"$WORK/tlat"
    for _ in $(seq "$SAMPLES"); do
      t0=${EPOCHREALTIME//[.,]/}; "$TSP" -n true >/dev/null; t1=${EPOCHREALTIME//[.,]/}
      echo $((t1 - t0)) >>"$WORK/tlat"
    done
    queued=$((queued + SAMPLES))
    stats=$(sort -n "$WORK/tlat" | awk '{ v[NR] = $1 } END { printf "%.2f ms | %.2f ms", v[int(NR * 0.5)] / 1000, v[int(NR * 0.99)] / 1000 }')
    TSP_LAT_ROWS="$TSP_LAT_ROWS| $depth | $stats |"$'\n'
  done
  tsp_stop
fi

echo "== submit latency at depths: $DEPTHS" >&2
SD=$WORK/latency; mkdir -p "$SD"; start_daemon "$SD" sim
"$LARDON" --state-dir "$SD" policy --set max_running=1 >/dev/null
"$LARDON" --state-dir "$SD" submit --name blocker -- sleep 100000 >/dev/null
queued=0
LAT_ROWS=""
for depth in $DEPTHS; do
  fill=$((depth - queued))
  if [ "$fill" -gt 0 ]; then
    echo "   filling to $depth queued tasks…" >&2
    # One --each submission (10 000 per request): filling is not measured.
    seq "$fill" | "$LARDON" --state-dir "$SD" submit --each - -- true >/dev/null
    queued=$depth
  fi
  : >"$WORK/lat"
  for _ in $(seq "$SAMPLES"); do
    # $EPOCHREALTIME, not `date`: a `$(date …)` after the call would add
    # a fork and an exec (about 1 ms) to every sample.
    t0=${EPOCHREALTIME//[.,]/}; "$LARDON" --state-dir "$SD" submit -- true >/dev/null; t1=${EPOCHREALTIME//[.,]/}
    echo $((t1 - t0)) >>"$WORK/lat"
  done
  queued=$((queued + SAMPLES))
  stats=$(sort -n "$WORK/lat" | awk '{ v[NR] = $1 } END { printf "%.2f ms | %.2f ms", v[int(NR * 0.5)] / 1000, v[int(NR * 0.99)] / 1000 }')
  LAT_ROWS="$LAT_ROWS| $depth | $stats |"$'\n'
done

echo "== client start-up: lardon --version against /bin/true" >&2
STARTUP=$(python3 - "$LARDON" <<'PY'
import statistics, subprocess, sys, time
def median_ms(argv, n=300):
    runs = []
    for _ in range(n):
        t = time.perf_counter_ns()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        runs.append(time.perf_counter_ns() - t)
    return statistics.median(runs) / 1e6
true_ms = median_ms(["/bin/true"])
lardon_ms = median_ms([sys.argv[1], "--version"])
print(f"| {true_ms:.2f} ms | {lardon_ms:.2f} ms | {lardon_ms - true_ms:.2f} ms |")
PY
)

cat <<EOF

Machine: $(nproc) CPUs, $(awk '/model name/ { $1=$2=$3=""; print; exit }' /proc/cpuinfo | sed 's/^ *//'), $(uname -r)

Host governed by lardon: $( [ "$SIMULATE" = 1 ] && echo "simulated 64 GiB / 64 CPUs" || echo "the real host, cpu_reserve 0" ); load and CPU-pressure gates: $GATES

| launcher (parallelism $PAR, $TASKS × true) | tasks/s | lardon ÷ it | lardon --each ÷ it |
|---|---|---|---|
| xargs -P $PAR | $XARGS | $(awk -v a="$LARDON_RATE" -v b="$XARGS" 'BEGIN { printf "%.2f", a / b }') | $(awk -v a="$EACH_RATE" -v b="$XARGS" 'BEGIN { printf "%.2f", a / b }') |
| GNU parallel -j $PAR | $PARALLEL | $(awk -v a="$LARDON_RATE" -v b="$PARALLEL" 'BEGIN { printf "%.2f", a / b }') | $(awk -v a="$EACH_RATE" -v b="$PARALLEL" 'BEGIN { printf "%.2f", a / b }') |
| task-spooler (\`$TSP -n true\` per task, $PAR slots; not durable) | $TSP_RATE | $(case "$TSP_RATE" in ''|*[!0-9]*) ;; *) awk -v a="$LARDON_RATE" -v b="$TSP_RATE" 'BEGIN { printf "%.2f", a / b }' ;; esac) | |
| pueue (parallel $PAR) | $PUEUE | $(case "$PUEUE" in ''|*[!0-9]*) ;; *) awk -v a="$LARDON_RATE" -v b="$PUEUE" 'BEGIN { printf "%.1f", a / b }' ;; esac) | |
| lardon (daemon, max_running $PAR; one \`lardon submit\` per task) | $LARDON_RATE | 1.00 | |
| lardon (daemon, max_running $PAR; one \`lardon submit --each\`) | $EACH_RATE | | 1.00 |

| hand-over (max_running 1, 200 × true, daemon stamps) | median ms |
|---|---|
| end of one task → start of the next | $HANDOVER |
| \`started → finished\` of \`true\` | $RUNTIME |

| tasks queued | \`lardon submit\` p50 | p99 |
|---|---|---|
$LAT_ROWS
| jobs queued | \`$TSP -n true\` p50 (task-spooler, same run) | p99 |
|---|---|---|
${TSP_LAT_ROWS:-| not run (--no-tsp) | | |
}
| \`/bin/true\` (median of 300) | \`lardon --version\` | start-up over \`/bin/true\` |
|---|---|---|
$STARTUP
EOF
