#!/usr/bin/env bash
# Engine benchmarks and the packing simulator, in release (docs/DESIGN.md §12).
# Not run in CI: a cold release build of the bench dependencies is slow on
# 2 cores. Figures and their targets are in BENCHMARKS.md.
#
#   scripts/bench.sh            everything
#   scripts/bench.sh sim        only the simulator table
#
# Uses CARGO_TARGET_DIR (default target/bench: the release build of the
# bench dependencies stays apart from the dev build).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/bench}"

echo "## machine"
echo "nproc: $(nproc)"
echo "cpu:   $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "kernel: $(uname -r)"
echo "load:  $(cut -d' ' -f1-3 /proc/loadavg)"
echo

if [[ "${1:-all}" != "sim" ]]; then
    echo "## admission: Governor::reserve + release vs tokio::sync::Semaphore"
    cargo bench -p lardon-bench --bench admission
    echo
    echo "## queue: no-op tasks through TaskQueue vs a crossbeam-channel pool"
    cargo bench -p lardon-bench --bench queue
    echo
    echo "## wake: release -> next waiting task's callback start"
    cargo run -q -p lardon-bench --release --bin wake_latency -- 2000
    echo
fi

echo "## packing simulator"
cargo run -q -p lardon-bench --release --bin simulate
