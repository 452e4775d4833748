"""`Executor`: a `concurrent.futures.Executor` governed by Lardon.

Each call runs in a fresh worker process that the Governor admits against
this host's real budgets: it waits while the memory or CPUs it declares
are taken, runs in a cgroup of its own limited to what it was granted
(where the host allows), and its measured peak teaches the next calls of
the same function their size. A call that outgrows its grant is killed at
the limit, run again at the size the kill taught (``retry_on_oom``), and
reported as `MemoryLimitExceeded` if it still does not fit; it never
takes the host down with it. Unlike a process pool there is no worker
count to guess: the Governor decides how many run.
"""

from __future__ import annotations

import concurrent.futures
from concurrent.futures import _base
import hashlib
import itertools
import multiprocessing.spawn
import os
import pickle
import shutil
import sys
import threading
import time
import uuid
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from . import _engine, _native
from ._types import TERMINAL, Task
from .client import Client, Cpus, Size, build_spec
from .errors import (
    InvalidRequest,
    LardonError,
    MemoryLimitExceeded,
    Rejected,
    TaskCancelled,
    TaskFailed,
    TaskTimeout,
    WorkerError,
)

#: The memory a call declares when neither it nor the Executor says: a
#: Python interpreter with a few modules, and room for modest work.
DEFAULT_MEM = "256MiB"
#: A ``map`` worker's fixed part (the interpreter) when not given.
DEFAULT_MAP_MEM = "64MiB"
#: A ``map`` item's cost when not given.
DEFAULT_MEM_PER_ITEM = "16MiB"


def class_key(fn: Callable, prefix: str = "py") -> str:
    """The learning key of a function's calls: ``py.<module>.<qualname>``,
    lower-cased to the Governor's alphabet; long names end in a hash."""
    module = getattr(fn, "__module__", None) or "unknown"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    raw = f"{prefix}.{module}.{name}".lower()
    key = "".join(c if (c.isascii() and (c.isalnum() or c in "._-")) else "_" for c in raw)
    if len(key) > 64:
        key = key[:55] + "-" + hashlib.sha1(raw.encode()).hexdigest()[:8]
    return key


class _Call:
    """What the collector needs to finish one future."""

    __slots__ = ("future", "job", "mode", "count")

    def __init__(self, future: "_Future", job: str, mode: str, count: int) -> None:
        self.future = future
        self.job = job
        self.mode = mode
        self.count = count


class _Future(concurrent.futures.Future):
    """A future whose `cancel` cancels its task in the engine first: a call
    still waiting for admission is cancelled; a running one is not (as
    with any executor)."""

    def __init__(self, executor: "Executor") -> None:
        super().__init__()
        self._executor = executor
        self.task_id: Optional[str] = None

    def cancel(self) -> bool:
        if self.running() or self.done() or self.task_id is None:
            return super().cancel()
        results = self._executor._conn.cancel([self.task_id], "")
        if not any(ok for _, ok, _ in results):
            return False
        return self._mark_cancelled()

    def _mark_cancelled(self) -> bool:
        """Cancels the future itself and tells its waiters, once (the
        caller's `cancel` and the collector's seeing the task cancelled
        may race)."""
        with self._condition:
            if self._state == _base.CANCELLED_AND_NOTIFIED:
                return True
            if not super().cancel():
                return False
            self.set_running_or_notify_cancel()
            return True


def _load(path: str):
    with open(path, "rb") as f:
        return pickle.load(f)


def _remote_exception(outcome, task: Optional[Task]) -> BaseException:
    """The exception a worker sent back, with its traceback as a note."""
    kind = outcome[0]
    if kind == "err":
        exc = outcome[1]
        note = "raised in the lardon worker:\n" + outcome[2]
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        else:  # Python < 3.11
            exc.__notes__ = [*getattr(exc, "__notes__", []), note]
        return exc
    return WorkerError(f"the call's outcome could not be sent back ({outcome[1]}):\n{outcome[2]}", task)


class Executor(concurrent.futures.Executor):
    """Runs calls in worker processes admitted by Lardon's Governor.

    ``mem`` and ``cpus`` are every call's default needs (a call may give
    its own: ``submit(fn, x, mem="2GiB", cpus=2)``; the two names are
    therefore taken from ``fn``'s keyword arguments). ``retry_on_oom``
    runs a call killed at its memory limit again at the size the kill
    taught (once for a call, smaller batches for ``map``). ``timeout`` is
    each run's wall-clock limit in seconds.

    Without ``client`` the calls run under this process's embedded engine
    (no daemon needed; ``state_dir`` keeps what it learns between runs,
    ``simulate_host=("8GiB", 4)`` pretends a host of that size, for
    tests). With ``client=lardon.Client()`` they run as tasks of that
    daemon, seen by ``lardon status`` (its workers must be able to read
    this process's temporary files and import its modules).

    Functions are pickled as a spawn-mode process pool pickles them:
    define them at a module's top level (a script's own ``__main__``
    functions work; guard the script's work with ``if __name__ ==
    "__main__":``). A call's printed output is in its task's log
    (`log`).
    """

    def __init__(
        self,
        *,
        mem: Size = DEFAULT_MEM,
        cpus: Cpus = 1,
        retry_on_oom: bool = True,
        timeout: Optional[float] = None,
        client: Optional[Client] = None,
        state_dir: Optional[str] = None,
        simulate_host: Optional[Tuple[Union[int, str], int]] = None,
    ) -> None:
        self._mem = _native.parse_bytes(mem, "mem")
        self._cpus = _native.parse_cpus(cpus, "cpus")
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
            raise InvalidRequest("timeout: seconds, more than 0")
        self._timeout = timeout
        self._retry = bool(retry_on_oom)
        if client is not None:
            if state_dir is not None or simulate_host is not None:
                raise InvalidRequest("client: state_dir and simulate_host are for the embedded engine, not a daemon")
            self._conn = client._conn
            import tempfile

            self._jobs = tempfile.mkdtemp(prefix="lardon-executor-")
        else:
            running = _engine.engine(state_dir, simulate_host)
            self._conn = _native.Connection(str(running.engine.socket))
            self._jobs = os.path.join(running.state_dir, "python-jobs", uuid.uuid4().hex[:12])
            os.makedirs(self._jobs)
        self._group = f"py-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._prep = os.path.join(self._jobs, "prep.pkl")
        prep = multiprocessing.spawn.get_preparation_data("lardon-worker")
        # The worker talks to no multiprocessing manager: no key to share.
        prep.pop("authkey", None)
        with open(self._prep, "wb") as f:
            pickle.dump(prep, f)
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self._calls: Dict[str, _Call] = {}
        self._closed = False
        self._broken: Optional[BaseException] = None
        # Subscribed before the first submission: no end can be missed.
        self._watcher = self._conn.watch()
        self._collector = threading.Thread(target=self._collect, name="lardon-executor", daemon=True)
        self._collector.start()

    # ------------------------------------------------------------ submit

    def submit(self, fn: Callable, /, *args: Any, mem: Optional[Size] = None, cpus: Optional[Cpus] = None, **kwargs: Any):
        """Schedules ``fn(*args, **kwargs)`` in a governed worker; returns
        a `concurrent.futures.Future`. ``mem`` and ``cpus`` override the
        Executor's for this call."""
        return self._start(
            "call",
            (fn, args, kwargs),
            name=getattr(fn, "__qualname__", "call"),
            count=1,
            mem=self._mem if mem is None else mem,
            cpus=self._cpus_arg(cpus),
            task_class=class_key(fn),
        )

    def map(
        self,
        fn: Callable,
        *iterables: Iterable,
        timeout: Optional[float] = None,
        chunksize: int = 1,
        mem: Optional[Size] = None,
        mem_per_item: Optional[Size] = None,
        batch: Tuple[int, int] = (1, 32),
        cpus: Optional[Cpus] = None,
        chunks: Optional[int] = None,
    ) -> Iterator:
        """``fn(*args)`` for each item of ``zip(*iterables)``, in order, as
        batched tasks: the items are split into ``chunks`` runs of work
        (default: one per CPU), each run in batches whose size (within
        ``batch=(min, max)``) the Governor picks from ``mem`` (the worker's
        fixed part) plus ``mem_per_item`` per item. A batch killed at its
        memory limit is re-run smaller, and the per-item cost it learned
        sizes every later batch of ``fn``. ``chunksize`` is accepted for
        compatibility and ignored: batching is Lardon's."""
        del chunksize
        items = list(zip(*iterables))
        if not items:
            return iter(())
        try:
            low, high = (int(b) for b in batch)
        except (TypeError, ValueError):
            raise InvalidRequest("batch: a (min, max) pair of item counts") from None
        if low < 1 or high < low:
            raise InvalidRequest(f"batch: needs 1 <= min <= max, got ({low}, {high})")
        n = chunks if chunks is not None else max(1, os.cpu_count() or 1)
        if not isinstance(n, int) or n < 1:
            raise InvalidRequest("chunks: a whole number of at least 1")
        n = min(n, len(items))
        bounds = [len(items) * i // n for i in range(n + 1)]
        futures = []
        for a, b in zip(bounds, bounds[1:]):
            part = items[a:b]
            futures.append(
                self._start(
                    "map",
                    (fn, part),
                    name=f"{getattr(fn, '__qualname__', 'map')}[{a}:{b}]",
                    count=len(part),
                    mem=DEFAULT_MAP_MEM if mem is None else mem,
                    mem_per_item=DEFAULT_MEM_PER_ITEM if mem_per_item is None else mem_per_item,
                    cpus=self._cpus_arg(cpus),
                    task_class=class_key(fn, "py.map"),
                    items=len(part),
                    batch=(min(low, len(part)), min(high, len(part))),
                )
            )
        deadline = None if timeout is None else time.monotonic() + timeout

        def results():
            try:
                for fut in futures:
                    left = None if deadline is None else max(0.0, deadline - time.monotonic())
                    values, error = fut.result(left)
                    yield from values
                    if error is not None:
                        raise error
            finally:
                for fut in futures:
                    fut.cancel()

        return results()

    def _cpus_arg(self, cpus: Optional[Cpus]) -> str:
        if cpus is None:
            return f"{self._cpus}m"
        return f"{_native.parse_cpus(cpus, 'cpus')}m"

    def _start(self, mode: str, payload, *, name: str, count: int, **options) -> _Future:
        if self._broken is not None:
            raise LardonError(f"the executor's engine failed: {self._broken}")
        if self._closed:
            raise RuntimeError("cannot schedule new futures after shutdown")
        job = os.path.join(self._jobs, f"{next(self._numbers):07d}")
        os.mkdir(job)
        with open(os.path.join(job, "call.pkl"), "wb") as f:
            pickle.dump(payload, f, protocol=pickle.HIGHEST_PROTOCOL)
        spec = build_spec(
            [sys.executable, "-m", "lardon._worker", mode, self._prep, job],
            name=name,
            group=self._group,
            oom_retry=self._retry,
            timeout=self._timeout,
            **options,
        )
        future = _Future(self)
        with self._lock:
            if self._closed:
                shutil.rmtree(job, ignore_errors=True)
                raise RuntimeError("cannot schedule new futures after shutdown")
            future.task_id = self._conn.submit(spec)
            self._calls[future.task_id] = _Call(future, job, mode, count)
        return future

    # ------------------------------------------------------------ ends

    def _collect(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closed and not self._calls:
                        return
                event = self._watcher.next(0.5)
                if event is None:
                    continue
                if event == "lagged":
                    with self._lock:
                        ids = list(self._calls)
                    for t in self._conn.list(ids, ""):
                        self._changed(t)
                else:
                    self._changed(event)
        except BaseException as e:  # the engine is gone: fail what is left
            self._broken = e
            with self._lock:
                calls, self._calls = list(self._calls.values()), {}
            for call in calls:
                if not call.future.done():
                    call.future.set_exception(LardonError(f"the engine stopped before the call ended: {e}"))

    def _changed(self, d: dict) -> None:
        state = d["state"]
        with self._lock:
            call = self._calls.get(d["id"])
            if call is None:
                return
            if state in TERMINAL:
                del self._calls[d["id"]]
        if state == "running" and not call.future.running() and not call.future.done():
            call.future.set_running_or_notify_cancel()
        if state in TERMINAL:
            try:
                self._finish(call, Task._from(d))
            finally:
                shutil.rmtree(call.job, ignore_errors=True)

    def _finish(self, call: _Call, task: Task) -> None:
        future = call.future
        if future.cancelled():
            return
        if task.state == "cancelled":
            if future.running():
                future.set_exception(TaskCancelled(f"task {task.id} was cancelled while it ran", task))
            else:
                future._mark_cancelled()
            return
        if not future.running():
            future.set_running_or_notify_cancel()
        try:
            if call.mode == "call":
                future.set_result(self._call_result(call, task))
            else:
                future.set_result(self._map_result(call, task))
        except BaseException as e:  # noqa: BLE001 -- handed to the caller
            future.set_exception(e)

    def _call_result(self, call: _Call, task: Task):
        path = os.path.join(call.job, "result.pkl")
        outcome = _load(path) if os.path.exists(path) else None
        if outcome is not None and outcome[0] == "ok":
            return outcome[1]
        if outcome is not None:
            raise _remote_exception(outcome, task)
        raise self._failure(task)

    def _map_result(self, call: _Call, task: Task) -> Tuple[List[Any], Optional[BaseException]]:
        values: Dict[int, Any] = {}
        error: Optional[BaseException] = None
        error_at = call.count
        for name in sorted(os.listdir(call.job)):
            path = os.path.join(call.job, name)
            if name.startswith("out-") and name.endswith(".pkl"):
                offset, _size, batch = _load(path)
                for i, v in enumerate(batch):
                    values[offset + i] = v
            elif name.startswith("err-") and name.endswith(".pkl"):
                index, outcome = _load(path)
                if index < error_at:
                    error_at, error = index, _remote_exception(outcome, task)
        if error is None and task.state != "completed":
            error = self._failure(task)
            error_at = min(i for i in range(call.count + 1) if i not in values)
        ordered = []
        for i in range(error_at):
            if i not in values:
                raise WorkerError(f"task {task.id} ended without the result of item {i}", task)
            ordered.append(values[i])
        return ordered, error

    def _failure(self, task: Task) -> TaskFailed:
        reason = task.failure_reason
        decision = task.last_decision
        if reason.startswith("killed: memory limit"):
            return MemoryLimitExceeded(f"task {task.id}: {reason}", task)
        if decision is not None and decision.kind == "reject":
            return Rejected(f"task {task.id} rejected: {decision.message}", task)
        if "timeout" in reason or "timed out" in reason:
            return TaskTimeout(f"task {task.id}: {reason}", task)
        try:
            tail = self._conn.log(task.id)[-2000:].decode("utf-8", "replace")
        except LardonError:
            tail = ""
        return WorkerError(f"task {task.id} {task.state}: {reason}\n{tail}".rstrip(), task)

    # ------------------------------------------------------------ the rest

    def tasks(self) -> List[Task]:
        """This executor's tasks as the engine sees them (learned sizes,
        memory retries, decisions)."""
        return [Task._from(t) for t in self._conn.list([], self._group)]

    def log(self, future: concurrent.futures.Future) -> str:
        """What the call's worker printed (stdout and stderr)."""
        task_id = getattr(future, "task_id", None)
        if task_id is None:
            raise InvalidRequest("future: not a future of this executor")
        return self._conn.log(task_id).decode("utf-8", "replace")

    def explain(self, future: concurrent.futures.Future):
        """The Governor's reasons for the call's task (`Client.explain`)."""
        from ._types import Explanation

        task_id = getattr(future, "task_id", None)
        if task_id is None:
            raise InvalidRequest("future: not a future of this executor")
        return Explanation._from(self._conn.explain(task_id))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new calls; with ``cancel_futures`` the calls still waiting
        for admission are cancelled; with ``wait`` returns once every call
        has ended."""
        with self._lock:
            self._closed = True
            pending = [c.future for c in self._calls.values()]
        if cancel_futures:
            for f in pending:
                if not f.running():
                    f.cancel()
        if wait:
            self._collector.join()
            shutil.rmtree(self._jobs, ignore_errors=True)
