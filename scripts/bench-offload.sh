#!/usr/bin/env bash
# Offload at cluster speed (docs/DESIGN.md §14, issue 28): the same N tasks
#   shipped  — `lardon submit --each` to a daemon with offload prefer =
#              remote, which ships them through the broker to the agent;
#   direct   — N `lardon cluster submit` processes at once, straight to
#              the broker;
#   local    — `lardon submit --each` to a daemon with no broker;
# for N = 1, 4 and 64, for two workloads: `true` (the per-task overhead)
# and `sleep 1` (whether the cluster runs them at once). One broker, one
# agent with --tokens 4 on a simulated 8 GiB / 4-CPU host, each task
# --cpus 1, so four run at a time everywhere: the local daemon governs a
# simulated host of the same size. Wall time from the first submit to the
# last answer, min / median / max of --samples runs, each mode in turn.
#
# `--each` appends its input line to the command when the template has no
# `{}`, so the tasks are `sh -c 'sleep 1' N` (the line is `$0`), not
# `sleep 1 N` (GNU sleep adds its arguments up: `sleep 1 4` sleeps 5 s).
#
# Not part of CI. LARDON=path uses that binary instead of the debug build.
# Usage: scripts/bench-offload.sh [--samples S] [--counts "1 4 64"]
set -euo pipefail
cd "$(dirname "$0")/.."

SAMPLES=3
COUNTS="1 4 64"
while [ $# -gt 0 ]; do
  case "$1" in
    --samples) SAMPLES=$2; shift 2 ;;
    --counts) COUNTS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

if [ -z "${LARDON:-}" ]; then
  cargo build -q -p lardon-cli --bin lardon
  LARDON=$PWD/target/debug/lardon
fi
L=$LARDON
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ns() { date +%s%N; }
until_ok() { # until_ok WHAT CMD…: polls CMD for up to 30 s
  local what=$1; shift
  for _ in $(seq 300); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "timed out waiting for $what" >&2; exit 1
}

ADDR=127.0.0.1:$(free_port)
$L broker --listen "$ADDR" --heartbeat 1s >"$WORK/broker.log" 2>&1 & PIDS+=($!)
$L agent --broker "$ADDR" --id a1 --capability sh@1 --tokens 4 --heartbeat 1s \
  --simulate-host 8GiB,4 --no-optimizer >"$WORK/agent.log" 2>&1 & PIDS+=($!)
echo 'offload = { prefer = "remote" }' >"$WORK/remote.toml"
echo '' >"$WORK/local.toml"
$L --state-dir "$WORK/shipped" daemon --simulate-host 8GiB,4 --policy "$WORK/remote.toml" \
  --broker "$ADDR" --broker-heartbeat 1s >"$WORK/shipped.log" 2>&1 & PIDS+=($!)
$L --state-dir "$WORK/local" daemon --simulate-host 8GiB,4 --policy "$WORK/local.toml" \
  >"$WORK/local.log" 2>&1 & PIDS+=($!)
until_ok "the shipping daemon" $L --state-dir "$WORK/shipped" status
until_ok "the local daemon" $L --state-dir "$WORK/local" status
agent_up() { $L cluster status --broker "$ADDR" --json | grep -q '"a1"'; }
until_ok "the agent" agent_up

# run MODE N SCRIPT: one sample's wall time in ms.
run() {
  local mode=$1 n=$2 script=$3 start ids
  start=$(now_ns)
  case "$mode" in
    shipped|local)
      local ship=(); [ "$mode" = shipped ] && ship=(--capability sh@1 --shippable)
      ids=$(seq "$n" | $L --state-dir "$WORK/$mode" submit --each - "${ship[@]}" \
        --cpus 1 -- sh -c "$script" 2>/dev/null)
      [ "$(wc -w <<<"$ids")" -eq "$n" ] || { echo "$mode: submit gave '$ids'" >&2; exit 1; }
      # shellcheck disable=SC2086 # one id per word
      $L --state-dir "$WORK/$mode" wait $ids >/dev/null ;;
    direct)
      local pids=()
      for _ in $(seq "$n"); do
        $L cluster submit --broker "$ADDR" --capability sh@1 --cpus 1 -- sh -c "$script" >/dev/null & pids+=($!)
      done
      for p in "${pids[@]}"; do wait "$p"; done ;;
  esac
  echo $(( ($(now_ns) - start) / 1000000 ))
}

# stats "a b c": min / median / max.
stats() { tr ' ' '\n' <<<"$1" | sort -n | awk '{v[NR]=$1} END {printf "%d / %d / %d", v[1], v[int((NR+1)/2)], v[NR]}'; }

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $L"
echo "| workload | N | shipped ms | direct ms | local ms | shipped / direct |"
echo "|---|---|---|---|---|---|"
for script in "true" "sleep 1"; do
  for n in $COUNTS; do
    declare -A got=()
    for _ in $(seq "$SAMPLES"); do
      for mode in shipped direct local; do got[$mode]+="$(run $mode "$n" "$script") "; done
    done
    s=$(stats "${got[shipped]% }"); d=$(stats "${got[direct]% }"); l=$(stats "${got[local]% }")
    ratio=$(awk -v a="${s#* / }" -v b="${d#* / }" 'BEGIN {split(a, x, " "); split(b, y, " "); printf "%.2f", x[1] / y[1]}')
    echo "| \`$script\` | $n | $s | $d | $l | $ratio |"
    unset got
  done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
