#!/usr/bin/env bash
# Fuzz the decoders of outside input (not run in CI). Usage:
#   scripts/fuzz.sh [SECONDS per target, default 60]
# Needs the nightly toolchain and cargo-fuzz (installed here if missing).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
for target in units admission; do
  echo "== $target ($secs s)"
  cargo +nightly fuzz run "$target" -- -max_total_time="$secs"
done
