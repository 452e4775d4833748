"""The one embedded engine of this process (the daemon, in-process).

One Governor owns a host's budgets; two in one process would each count
the whole host. So every `Executor` without a `client` shares this
engine, started on first use and stopped at interpreter exit. It keeps its
state (database, task logs, learned peaks) in a fresh temporary directory
unless ``state_dir`` is given, which keeps what it learned for the next
run.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from typing import Optional, Tuple, Union

from . import _native
from .errors import InvalidRequest

Simulated = Optional[Tuple[Union[int, str], int]]

_lock = threading.Lock()
_running: Optional["_Running"] = None


class _Running:
    def __init__(self, engine: "_native.Engine", state_dir: str, temporary: bool, simulate: Simulated) -> None:
        self.engine = engine
        self.state_dir = state_dir
        self.temporary = temporary
        self.simulate = simulate


def engine(state_dir: Optional[str], simulate_host: Simulated) -> _Running:
    """This process's engine, started now if none runs; refuses a second
    one with other settings (naming the field)."""
    global _running
    with _lock:
        if _running is not None:
            if state_dir is not None and os.path.abspath(state_dir) != _running.state_dir:
                raise InvalidRequest(
                    f"state_dir: this process's engine already keeps its state in {_running.state_dir} "
                    "(one engine per process owns the host's budgets)"
                )
            if simulate_host is not None and simulate_host != _running.simulate:
                raise InvalidRequest(
                    f"simulate_host: this process's engine already runs with simulate_host={_running.simulate!r}"
                )
            return _running
        memory = cpus = None
        if simulate_host is not None:
            try:
                mem_text, cpus = simulate_host
            except (TypeError, ValueError):
                raise InvalidRequest("simulate_host: a (memory, cpus) pair such as ('8GiB', 4)") from None
            memory = _native.parse_bytes(mem_text, "simulate_host")
            if not isinstance(cpus, int) or cpus < 1:
                raise InvalidRequest("simulate_host: the CPU count is a whole number of at least 1")
        temporary = state_dir is None
        directory = tempfile.mkdtemp(prefix="lardon-py-") if temporary else os.path.abspath(state_dir)
        os.makedirs(directory, exist_ok=True)
        try:
            native = _native.Engine(directory, os.path.join(directory, "lardon.sock"), memory, cpus)
        except BaseException:
            if temporary:
                shutil.rmtree(directory, ignore_errors=True)
            raise
        _running = _Running(native, directory, temporary, simulate_host)
        atexit.register(shutdown)
        return _running


def shutdown() -> None:
    """Stops this process's engine (tasks still running stop with it);
    the next `Executor` starts a fresh one."""
    global _running
    with _lock:
        running, _running = _running, None
    if running is None:
        return
    running.engine.shutdown()
    if running.temporary:
        shutil.rmtree(running.state_dir, ignore_errors=True)
