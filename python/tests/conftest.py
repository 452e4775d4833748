"""Fixtures of the Python package's tests: a real `lardon daemon`, and a
cgroup with a known memory limit to run an Executor script in (as the
Rust real-host tests do: the machine's own load never decides a result).

Nothing here skips: a machine that cannot host a test fails it, saying
why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import lardon
from cgroup_limit import CgroupError, LimitedCgroup

REPO = Path(__file__).resolve().parents[2]


def lardon_bin() -> str:
    """The CLI built from this checkout (`$LARDON_BIN`, else target/debug)."""
    path = os.environ.get("LARDON_BIN") or str(REPO / "target" / "debug" / "lardon")
    if not os.access(path, os.X_OK):
        pytest.fail(f"no lardon binary at {path}: run `cargo build -p lardon-cli` (or set LARDON_BIN)")
    return path


@pytest.fixture
def daemon(tmp_path):
    """A real `lardon daemon` on a simulated 8 GiB, 4-CPU host (its own
    state dir); yields a connected `lardon.Client`."""
    state = tmp_path / "state"
    state.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LARDON_")}
    log = open(tmp_path / "daemon.out", "wb")
    proc = subprocess.Popen(
        [lardon_bin(), "--state-dir", str(state), "daemon", "--simulate-host", "8GiB,4"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    client = None
    while client is None:
        try:
            client = lardon.Client(state_dir=str(state))
        except lardon.DaemonUnreachable:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("the daemon did not come up:\n" + (tmp_path / "daemon.out").read_text())
            time.sleep(0.05)
    yield client
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


@pytest.fixture
def run_limited(tmp_path):
    """``run(limit_bytes, script) -> (result, oom kills)``: runs a
    Python script inside a fresh cgroup limited to ``limit_bytes`` (the
    shell joins it before it becomes Python, so nothing of the script runs
    outside) and returns the JSON object its last stdout line prints."""
    made = []

    def run(limit: int, script: str, timeout: float = 240):
        try:
            cg = LimitedCgroup(limit)
        except CgroupError as e:
            pytest.fail(str(e))
        made.append(cg)
        path = tmp_path / f"script_{len(made)}.py"
        path.write_text(script)
        proc = subprocess.run(
            cg.join_argv([sys.executable, str(path)]),
            capture_output=True,
            timeout=timeout,
            cwd=tmp_path,
        )
        out = proc.stdout.decode(errors="replace")
        err = proc.stderr.decode(errors="replace")
        if proc.returncode != 0 or not out.strip():
            pytest.fail(f"the script exited {proc.returncode}\n--- stdout\n{out}\n--- stderr\n{err}")
        return json.loads(out.strip().splitlines()[-1]), cg.oom_kills()

    yield run
    for cg in made:
        cg.remove()
