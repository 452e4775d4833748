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
import uuid
from pathlib import Path

import pytest

import lardon

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


def _mounts():
    """``(fstype, mount point, root, super options)`` of each cgroup mount."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) >= 5 and len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            yield tail[0], Path(fields[4]), fields[3], tail[2].split(",")


def _memory_cgroup():
    """Our own memory cgroup: ``(directory, is_v2)``; a v1 memory
    hierarchy first (a hybrid host's limits live there), as the daemon
    picks."""
    membership = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        membership[controllers] = path
    mounts = list(_mounts())
    for fstype, point, root, options in mounts:
        if fstype == "cgroup" and "memory" in options:
            own = next((p for c, p in membership.items() if "memory" in c.split(",")), None)
            if own is not None:
                return point / os.path.relpath(own, root), False
    for fstype, point, root, _ in mounts:
        if fstype == "cgroup2" and "" in membership:
            return point / os.path.relpath(membership[""], root), True
    pytest.fail("no memory cgroup to limit: no v1 memory hierarchy and no cgroup2 mount")


class LimitedCgroup:
    """A fresh memory cgroup under ours with a memory limit (v2
    ``memory.max`` or v1 ``memory.limit_in_bytes``, swap off); removed,
    its processes killed, at the end."""

    def __init__(self, limit: int) -> None:
        own, self.v2 = _memory_cgroup()
        if self.v2:
            controllers = (own / "cgroup.controllers").read_text().split()
            if "memory" not in controllers:
                pytest.fail(f"the cgroup {own} has no memory controller ({controllers})")
            try:
                (own / "cgroup.subtree_control").write_text("+memory")
            except OSError as e:
                pytest.fail(f"cannot enable +memory in {own}/cgroup.subtree_control: {e}")
        self.path = own / f"lardon-pytest-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        try:
            self.path.mkdir()
        except OSError as e:
            pytest.fail(f"cannot create the cgroup {self.path}: {e}")
        if self.v2:
            (self.path / "memory.max").write_text(str(limit))
            if (self.path / "memory.swap.max").exists():
                (self.path / "memory.swap.max").write_text("0")
        else:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))
            if (self.path / "memory.memsw.limit_in_bytes").exists():
                (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit))
        self.limit = limit

    def oom_kills(self) -> int:
        """OOM kills the kernel made anywhere in the subtree."""
        if self.v2:
            text = (self.path / "memory.events").read_text()
        else:
            text = (self.path / "memory.oom_control").read_text()
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            pids = []
            for procs in self.path.rglob("cgroup.procs"):
                pids += [int(p) for p in procs.read_text().split()]
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        for d in sorted((p for p in self.path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            d.rmdir()
        self.path.rmdir()


@pytest.fixture
def run_limited(tmp_path):
    """``run(limit_bytes, script) -> (result, oom kills)``: runs a
    Python script inside a fresh cgroup limited to ``limit_bytes`` (the
    shell joins it before it becomes Python, so nothing of the script runs
    outside) and returns the JSON object its last stdout line prints."""
    made = []

    def run(limit: int, script: str, timeout: float = 240):
        cg = LimitedCgroup(limit)
        made.append(cg)
        path = tmp_path / f"script_{len(made)}.py"
        path.write_text(script)
        proc = subprocess.run(
            ["sh", "-c", 'echo $$ > "$1/cgroup.procs" || exit 97; shift; exec "$@"', "sh", str(cg.path), sys.executable, str(path)],
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
