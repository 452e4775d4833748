#!/usr/bin/env bash
# The whole test suite: formatting, lints, every workspace test, and the
# engine's loom models. `.ci/run` runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, all features, warnings denied)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo test (workspace, all features)"
cargo test --workspace --all-features

# loom swaps the engine's lock, condvar and atomics for model-checked ones;
# RUSTFLAGS changes every dependency's build, hence its own target dir.
step "loom models of the Governor and the dispatcher hand-off"
export RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom
cargo test -p lardon --release --all-features --test 'loom_*'
cargo test -p lardon --release --all-features --lib loom_tests
