#!/usr/bin/env bash
# The whole test suite: formatting, lints, every workspace test, the API
# docs, and the engine's loom models. `.ci/run` runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

# The real-Slurm tests, native and pilot mode (lardon-cli's `slurm-tests`
# feature, on with --all-features), need a running Slurm. `.ci/run` starts one and exports
# SLURM_CONF; run directly, this script starts its own (as root: it may
# install Debian's packages) and stops it at exit. Without Slurm those tests
# fail naming scripts/slurm-up.sh; they never skip.
if [ -z "${SLURM_CONF:-}" ]; then
    step "Slurm for the native-mode tests (scripts/slurm-up.sh)"
    slurm_state=${LARDON_SLURM_DIR:-/tmp/lardon-test-slurm}
    if up=$(./scripts/slurm-up.sh "$slurm_state"); then
        eval "$(printf '%s\n' "$up" | tail -n 1)"
        trap './scripts/slurm-down.sh "$slurm_state"' EXIT
    else
        echo "Slurm could not start: the slurm-tests will fail" >&2
    fi
fi

# A real REAPI client for the broker's cache test (Debian's bazel-bootstrap,
# about 40 MiB; nothing is fetched at test time).
if ! command -v bazel >/dev/null 2>&1; then
  step "installing bazel-bootstrap (the REAPI client of the cache test)"
  if [ "$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi
  $SUDO apt-get install -y --no-install-recommends bazel-bootstrap >/dev/null \
    || { $SUDO apt-get update >/dev/null && $SUDO apt-get install -y --no-install-recommends bazel-bootstrap >/dev/null; }
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy (all targets, all features, warnings denied)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "cargo test (workspace, all features)"
cargo test --workspace --all-features

# The host check a new user runs first (README), against this machine's
# real cgroups, with the debug binary the tests just built: short (--quick),
# so that it never rots unseen again.
step "real-host check (scripts/real-host-check.sh --quick)"
cargo build -q -p lardon-cli
LARDON=$PWD/target/debug/lardon scripts/real-host-check.sh --quick

# The Python package (python/): built from this checkout with maturin into
# a venv, then its pytest suites (a real daemon; the Executor on the real
# host inside cgroups with a known memory limit).
step "Python package (scripts/test-python.sh: maturin develop, pytest)"
scripts/test-python.sh

# Broken intra-doc links and malformed rustdoc fail the build like a lint.
step "cargo doc (workspace, no dependencies, warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

# loom swaps the engine's locks, condvars, atomics and threads for
# model-checked ones; the models drive the real Governor and the real queue
# (dispatcher, worker pool, close). Debug assertions stay on so the engine's
# `debug_assert!` invariants (the ledger check among them) are checked in
# every explored interleaving. RUSTFLAGS changes every dependency's build,
# hence its own target dir.
step "loom models of the Governor and the queue (debug assertions on)"
export RUSTFLAGS="--cfg loom -C debug-assertions" CARGO_TARGET_DIR=target/loom
cargo test -p lardon --release --all-features --test 'loom_*'
cargo test -p lardon --release --all-features --lib loom_tests
