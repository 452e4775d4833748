#!/usr/bin/env bash
# Daemon CPU per task and the dispatcher thread's CPU for one
# `lardon submit --each` of N × true (max_running 2, the real host,
# cpu_reserve 0), from /proc (utime+stime). Alternate two builds in one
# sitting to compare them: CPU per task moves less with the machine's
# load than the rate does.
# Usage: scripts/bench-each-cpu.sh [LARDON_BINARY] [N]
# (default: target/release/lardon, 1000). Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
L=${1:-$PWD/target/release/lardon}
N=${2:-1000}
SD=$(mktemp -d)
trap 'kill "$P" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$SD" "$SD.log"' EXIT
"$L" --state-dir "$SD" daemon --log-file - >"$SD.log" 2>&1 &
P=$!
for _ in $(seq 200); do [ -S "$SD/lardon.sock" ] && break; sleep 0.05; done
"$L" --state-dir "$SD" policy --set cpu_reserve=0 >/dev/null
"$L" --state-dir "$SD" policy --set max_running=2 >/dev/null
tck=$(getconf CLK_TCK)
read -r a b < <(awk '{print $14, $15}' "/proc/$P/stat")
t0=${EPOCHREALTIME//[.,]/}
seq "$N" | "$L" --state-dir "$SD" submit --each -- true >/dev/null
"$L" --state-dir "$SD" wait >/dev/null
t1=${EPOCHREALTIME//[.,]/}
read -r c d < <(awk '{print $14, $15}' "/proc/$P/stat")
dispatch=0
for t in /proc/"$P"/task/*; do
  if [ "$(cat "$t/comm")" = lardon-dispatch ]; then dispatch=$(awk '{print $14 + $15}' "$t/stat"); fi
done
awk -v n="$N" -v us=$((t1 - t0)) -v cpu=$((c + d - a - b)) -v dsp="$dispatch" -v tck="$tck" -v bin="$L" 'BEGIN {
  printf "%s: %.0f tasks/s, daemon CPU %.3f ms per task, dispatcher %.0f ms in all\n",
    bin, n / (us / 1e6), cpu / tck / n * 1000, dsp / tck * 1000 }'
