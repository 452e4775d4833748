"""A memory cgroup with a known limit, made under our own (v1 memory
hierarchy first, as the daemon picks, else cgroup v2), for the real-host
tests (conftest.py) and the Executor benchmark (python/bench/). As root.
Nothing here skips: a machine that cannot host one raises `CgroupError`
saying why.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path


class CgroupError(RuntimeError):
    """Why no limited cgroup could be made here."""


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
    raise CgroupError("no memory cgroup to limit: no v1 memory hierarchy and no cgroup2 mount")


class LimitedCgroup:
    """A fresh memory cgroup under ours with a memory limit (v2
    ``memory.max`` or v1 ``memory.limit_in_bytes``, swap off); removed,
    its processes killed, at the end."""

    def __init__(self, limit: int) -> None:
        own, self.v2 = _memory_cgroup()
        if self.v2:
            controllers = (own / "cgroup.controllers").read_text().split()
            if "memory" not in controllers:
                raise CgroupError(f"the cgroup {own} has no memory controller ({controllers})")
            try:
                (own / "cgroup.subtree_control").write_text("+memory")
            except OSError as e:
                raise CgroupError(f"cannot enable +memory in {own}/cgroup.subtree_control: {e}")
        self.path = own / f"lardon-py-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        try:
            self.path.mkdir()
        except OSError as e:
            raise CgroupError(f"cannot create the cgroup {self.path}: {e}")
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

    def peak(self) -> int:
        """The most memory the subtree held at once, bytes (v2
        ``memory.peak``, v1 ``memory.max_usage_in_bytes``)."""
        name = "memory.peak" if self.v2 else "memory.max_usage_in_bytes"
        return int((self.path / name).read_text().split()[0])

    def join_argv(self, argv):
        """``argv`` run by a shell that joins this cgroup first, so no
        instant of it runs outside."""
        return ["sh", "-c", 'echo $$ > "$1/cgroup.procs" || exit 97; shift; exec "$@"', "sh", str(self.path), *argv]

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
