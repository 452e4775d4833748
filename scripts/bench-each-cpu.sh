#!/usr/bin/env bash
# Daemon CPU per task, and per daemon thread, for one
# `lardon submit --each` of N × true (max_running 2, the real host,
# cpu_reserve 0), from /proc (utime+stime). Alternate two builds in one
# sitting to compare them: CPU per task moves less with the machine's
# load than the rate does.
# Usage: scripts/bench-each-cpu.sh [--no-gates] [LARDON_BINARY] [N]
# (default: target/release/lardon, 1000). --no-gates turns the load and
# CPU-pressure gates off (max_load_ratio=off, psi_cpu=100), as
# bench-daemon.sh --no-gates does: otherwise a run held by the CPU-PSI
# gate also counts the waiting. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
GATES=on
if [ "${1:-}" = --no-gates ]; then GATES=off; shift; fi
L=${1:-$PWD/target/release/lardon}
N=${2:-1000}
SD=$(mktemp -d)
trap 'kill "$P" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$SD" "$SD.log"' EXIT
"$L" --state-dir "$SD" daemon --log-file - >"$SD.log" 2>&1 &
P=$!
for _ in $(seq 200); do [ -S "$SD/lardon.sock" ] && break; sleep 0.05; done
"$L" --state-dir "$SD" policy --set cpu_reserve=0 >/dev/null
"$L" --state-dir "$SD" policy --set max_running=2 >/dev/null
if [ "$GATES" = off ]; then
  "$L" --state-dir "$SD" policy --set max_load_ratio=off >/dev/null
  "$L" --state-dir "$SD" policy --set psi_cpu=100 >/dev/null
fi
tck=$(getconf CLK_TCK)
threads() { for t in /proc/"$P"/task/*; do echo "$(cat "$t/comm") $(awk '{print $14 + $15}' "$t/stat")"; done; }
before=$(threads)
read -r a b < <(awk '{print $14, $15}' "/proc/$P/stat")
t0=${EPOCHREALTIME//[.,]/}
seq "$N" | "$L" --state-dir "$SD" submit --each -- true >/dev/null
"$L" --state-dir "$SD" wait >/dev/null
t1=${EPOCHREALTIME//[.,]/}
read -r c d < <(awk '{print $14, $15}' "/proc/$P/stat")
after=$(threads)
awk -v n="$N" -v us=$((t1 - t0)) -v cpu=$((c + d - a - b)) -v tck="$tck" -v bin="$L" -v gates="$GATES" 'BEGIN {
  printf "%s (gates %s): %.0f tasks/s, daemon CPU %.3f ms per task\n",
    bin, gates, n / (us / 1e6), cpu / tck / n * 1000 }'
# Per thread name (the workers summed): CPU in this run, ms.
{ echo "$before" | sed 's/^/B /'; echo "$after" | sed 's/^/A /'; } | awk -v tck="$tck" '
  $1 == "B" { b[$2] += $3 } $1 == "A" { a[$2] += $3 }
  END { line = "  per thread:"; for (k in a) if (a[k] - b[k] > 0) line = line sprintf(" %s %.0f ms", k, (a[k] - b[k]) / tck * 1000); print line }'
