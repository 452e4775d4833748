#!/usr/bin/env bash
# Builds the `lardon` binary as a dynamically linked, non-PIE executable
# (release, into target/nopie) and prints its path. Without position
# independence the dynamic loader has no relative relocations to apply at
# each start (about 28 500 of them in the PIE build, most of its start-up
# cost): every CLI call, such as one `lardon submit` per task, starts about
# 0.4–0.5 ms sooner (BENCHMARKS.md, "Fast path IV: start-up"). The price is
# that the executable's own code is not address-randomised (ASLR still
# applies to its libraries, stack and heap), which is why the default build
# stays PIE. `--target` keeps build scripts and proc macros as they are.
# Usage: scripts/build-nopie.sh   (then install the printed path)
set -euo pipefail
cd "$(dirname "$0")/.."
triple=$(rustc -vV | sed -n 's/^host: //p')
echo "building lardon (release, non-PIE, for $triple, into target/nopie)…" >&2
RUSTFLAGS="-C relocation-model=static" \
  CARGO_TARGET_DIR=$PWD/target/nopie cargo build --release -q -p lardon-cli --target "$triple"
echo "$PWD/target/nopie/$triple/release/lardon"
