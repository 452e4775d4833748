#!/usr/bin/env bash
# The Python package's tests (python/tests), run by scripts/test.sh after
# `cargo test`: a virtual environment in target/py-venv with maturin and
# pytest from PyPI, the package built from this checkout into it
# (`maturin develop`: an abi3 wheel of crates/lardon-py, on the debug
# build cargo already compiled; nothing prebuilt of Lardon's is fetched),
# then pytest against the CLI binary of the same build (LARDON_BIN).
# The real-host tests make cgroups with a known memory limit: as root.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=$root/target/py-venv
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q --disable-pip-version-check 'maturin>=1.9,<2' 'pytest>=8'
(cd python && VIRTUAL_ENV=$venv PATH=$venv/bin:$PATH maturin develop -q)
[ -x target/debug/lardon ] || cargo build -q -p lardon-cli
cd python
LARDON_BIN=$root/target/debug/lardon exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests "$@"
