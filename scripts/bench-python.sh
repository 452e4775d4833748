#!/usr/bin/env bash
# lardon.Executor against ProcessPoolExecutor(max_workers=N) on one
# memory-bound workload, each alone in a fresh cgroup with the same memory
# limit (python/bench/executor_vs_pool.py; BENCHMARKS.md's Python rows).
# As root. Builds the package first (scripts/test-python.sh's venv, no
# tests run). Options go to the benchmark: --limit-mib, --calls, --mib,
# --hold, --workers 2,4,8, --json.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$PWD/target/py-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check 'maturin>=1.9,<2'
(cd python && VIRTUAL_ENV=$venv PATH=$venv/bin:$PATH maturin develop -q ${LARDON_PY_RELEASE:+--release})
exec "$venv/bin/python" python/bench/executor_vs_pool.py "$@"
