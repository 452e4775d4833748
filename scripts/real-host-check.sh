#!/usr/bin/env bash
# Real-host enforcement check: runs a daemon against THIS host (no simulated
# host; pure cgroup v2, hybrid or none) and prints PASS/FAIL per scenario:
#   a. a liar (`--mem 128MiB`, touches 600 MiB) is killed for memory where
#      enforcement is hard (and `lardon resources` says which backend, why);
#   b. 8 honest `lardon exercise --mem 600MiB` tasks all complete;
#   c. `true` started→finished from the daemon's own stamps (a figure).
# Run it on a new kind of host (a pure-v2 distribution, a systemd unit with
# Delegate=yes, a Slurm node) before trusting enforcement there. Not part of
# CI: it builds the release binary and takes a minute or two.
# Usage: scripts/real-host-check.sh [--trues N]   (LARDON=path skips the build)
set -uo pipefail
cd "$(dirname "$0")/.."

TRUES=200
while [ $# -gt 0 ]; do
  case "$1" in
    --trues) TRUES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

if [ -z "${LARDON:-}" ]; then
  echo "building lardon (release)…" >&2
  cargo build --release -q -p lardon-cli || exit 2
  LARDON=$PWD/target/release/lardon
fi
STATE=$(mktemp -d)
L() { "$LARDON" --state-dir "$STATE" "$@"; }
L daemon >"$STATE/daemon.out" 2>&1 &
DAEMON=$!
cleanup() { kill "$DAEMON" 2>/dev/null; wait "$DAEMON" 2>/dev/null; rm -rf "$STATE"; }
trap cleanup EXIT
for _ in $(seq 100); do L status >/dev/null 2>&1 && break; sleep 0.1; done
FAILED=0
verdict() { # name ok detail
  if [ "$2" = 1 ]; then echo "PASS $1: $3"; else echo "FAIL $1: $3"; FAILED=1; fi
}
task_field() { # id field
  L status "$1" --json | python3 -c "import json,sys; t=json.load(sys.stdin); t=t[0] if isinstance(t,list) else t; print(t.get('$2'))"
}

ENFORCEMENT=$(L resources --json | python3 -c 'import json,sys; e=json.load(sys.stdin)["enforcement"]; print(e["mode"], "|", e["line"])')
echo "enforcement: ${ENFORCEMENT#*| }"
MODE=${ENFORCEMENT%% |*}

# a. The liar.
ID=$(L submit --mem 128MiB --name liar -- "$LARDON" exercise --mem 600MiB --secs 1)
L wait "$ID" >/dev/null 2>&1
STATE_A=$(task_field "$ID" state)
WHY_A=$(task_field "$ID" failure_reason)
case "$MODE" in
  ENFORCE_MODE_HARD)
    ok=0; [ "$STATE_A" = failed ] && [[ "$WHY_A" == *memory* ]] && ok=1
    verdict "a liar killed for memory (hard)" $ok "state $STATE_A, reason: $WHY_A" ;;
  *)
    # No kernel limit: the RSS watchdog may or may not catch a 1 s burst.
    ok=0; [ "$STATE_A" = failed ] && [[ "$WHY_A" == *memory* ]] && ok=1
    verdict "a liar killed for memory (no cgroup: $MODE)" $ok "state $STATE_A, reason: $WHY_A" ;;
esac

# b. Eight honest tasks.
IDS=()
for i in $(seq 8); do
  IDS+=("$(L submit --mem 700MiB --class honest --name "honest-$i" -- "$LARDON" exercise --mem 600MiB --secs 1)")
done
L wait "${IDS[@]}" >/dev/null 2>&1
DONE=0
for id in "${IDS[@]}"; do [ "$(task_field "$id" state)" = completed ] && DONE=$((DONE + 1)); done
ok=0; [ "$DONE" = 8 ] && ok=1
verdict "b 8 honest 600 MiB tasks complete" $ok "$DONE of 8 completed"

# c. `true`, started→finished.
TIDS=()
for _ in $(seq "$TRUES"); do TIDS+=("$(L submit --class trues -- true)"); done
L wait "${TIDS[@]}" >/dev/null 2>&1
L status --json | python3 -c '
import json, statistics, sys
d = sorted(t["finished_unix_ms"] - t["started_unix_ms"] for t in json.load(sys.stdin)
           if t["argv"] == ["true"] and t["state"] == "completed")
if d:
    print(f"INFO c true started->finished over {len(d)} tasks: median {statistics.median(d)} ms, "
          f"p90 {d[int(len(d) * 0.9)]} ms, max {d[-1]} ms")
else:
    print("FAIL c no true task completed")'
exit $FAILED
