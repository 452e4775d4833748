#!/usr/bin/env bash
# Fuzz the decoders of outside input (not run in CI). Usage:
#   scripts/fuzz.sh [SECONDS per target, default 60] [TARGET...]
# Targets: units admission proto flags workload (default: all).
# Needs the nightly toolchain and cargo-fuzz (cargo-fuzz is installed here
# if missing). Get nightly with:
#   rustup toolchain install nightly
# Each target's harness also runs as a unit test on stable where it lives
# (e.g. lardon_proto::fuzzing), so it compiles without nightly too.
set -euo pipefail
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz.sh: needs the nightly toolchain: rustup toolchain install nightly" >&2
  exit 1
fi
cd "$(dirname "$0")/../fuzz"
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(units admission proto flags workload)
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
for target in "${targets[@]}"; do
  echo "== $target ($secs s)"
  cargo +nightly fuzz run "$target" -- -max_total_time="$secs"
done
