"""`Client`: a thin client of a running daemon (``lardon daemon``), the
Python face of ``lardon submit / status / wait / cancel / explain / log``."""

from __future__ import annotations

import os
import threading
from typing import Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from ._types import Explanation, Resources, Task
from .errors import InvalidRequest, TaskFailed

Size = Union[int, str]
Cpus = Union[int, float, str]
TaskRef = Union[str, Task]


def _id(task: TaskRef) -> str:
    return task.id if isinstance(task, Task) else str(task)


def _ids(tasks: Union[TaskRef, Iterable[TaskRef]]) -> List[str]:
    if isinstance(tasks, (str, Task)):
        return [_id(tasks)]
    return [_id(t) for t in tasks]


def environment_block(env: Mapping[str, str]) -> bytes:
    """The submitter's environment as the daemon stores it
    (``NAME=VALUE\\0`` per variable)."""
    return b"".join(
        os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in env.items() if "=" not in k and k
    )


def build_spec(
    argv: Sequence[str],
    *,
    name: Optional[str] = None,
    mem: Optional[Size] = None,
    mem_per_item: Optional[Size] = None,
    cpus: Optional[Cpus] = None,
    items: Optional[int] = None,
    batch: Optional[Union[int, Tuple[int, int]]] = None,
    group: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    inherit_env: bool = True,
    cwd: Optional[str] = None,
    timeout: Optional[float] = None,
    task_class: Optional[str] = None,
    priority: int = 0,
    paused: bool = False,
    oom_retry: Optional[bool] = None,
) -> dict:
    """Checks a submission's arguments and returns the request the native
    half sends; every refusal is an `InvalidRequest` naming the field."""
    if isinstance(argv, (str, bytes)) or not argv:
        raise InvalidRequest("argv: a non-empty list of strings (the command is never run through a shell)")
    argv = [str(a) for a in argv]
    if items is not None and (not isinstance(items, int) or items < 1):
        raise InvalidRequest("items: a whole number of at least 1")
    batch_min = batch_max = None
    if batch is not None:
        if isinstance(batch, int):
            batch_min = batch_max = batch
        else:
            try:
                batch_min, batch_max = (int(b) for b in batch)
            except (TypeError, ValueError):
                raise InvalidRequest("batch: an int or a (min, max) pair") from None
        if batch_min < 1 or batch_max < batch_min:
            raise InvalidRequest(f"batch: needs 1 <= min <= max, got ({batch_min}, {batch_max})")
        if items is None:
            raise InvalidRequest("batch: only for a batched task (give items=N)")
    if timeout is not None and (not isinstance(timeout, (int, float)) or timeout <= 0):
        raise InvalidRequest("timeout: seconds, more than 0")
    if env is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise InvalidRequest("env: a mapping of str to str")
    return {
        "argv": argv,
        "name": name or "",
        "memory": 0 if mem is None else _native.parse_bytes(mem, "mem"),
        "memory_per_item": 0 if mem_per_item is None else _native.parse_bytes(mem_per_item, "mem_per_item"),
        "cpu_millis": None if cpus is None else _native.parse_cpus(cpus, "cpus"),
        "items": items,
        "batch_min": batch_min,
        "batch_max": batch_max,
        "class": task_class or "",
        "group": group or "",
        "env": list((env or {}).items()),
        "submit_env": environment_block(os.environ) if inherit_env else None,
        "cwd": os.path.abspath(cwd if cwd is not None else os.getcwd()),
        "timeout_ms": None if timeout is None else max(1, int(timeout * 1000)),
        "oom_retry": oom_retry,
        "priority": int(priority),
        "paused": bool(paused),
    }


class Client:
    """A connection to a running ``lardon daemon``.

    With no argument it finds the socket as the CLI does (``state_dir``
    is ``--state-dir``; else ``$LARDON_STATE_DIR``, ``$LARDON_SOCKET``,
    ``$XDG_RUNTIME_DIR``, ``$HOME``). Raises `DaemonUnreachable` naming
    the socket when no daemon answers. Safe to share between threads.
    """

    def __init__(self, socket: Optional[str] = None, *, state_dir: Optional[str] = None) -> None:
        path = socket if socket is not None else _native.default_socket(state_dir)
        self._conn = _native.Connection(str(path))

    @property
    def socket(self) -> str:
        """The socket this client uses."""
        return str(self._conn.socket)

    def submit(self, argv: Sequence[str], **options) -> Task:
        """Queues a command; returns the task as stored.

        Options (all keyword): ``name``, ``mem`` (``"2GiB"`` or bytes),
        ``mem_per_item``, ``cpus`` (``1``, ``0.5``, ``"750m"``), ``items``
        and ``batch=(min, max)`` for a batched task, ``group``, ``env``
        (added variables), ``inherit_env`` (default True: the task runs in
        this process's environment, as ``lardon submit``), ``cwd``,
        ``timeout`` (seconds per run), ``task_class`` (the learning key),
        ``priority``, ``paused``, ``oom_retry``.
        """
        task_id = self._conn.submit(build_spec(argv, **options))
        return self.status(task_id)

    def status(self, task: Optional[TaskRef] = None, *, group: Optional[str] = None):
        """One task (by id or `Task`), or every task (of ``group``) when
        no task is given."""
        if task is not None:
            return Task._from(self._conn.get(_id(task)))
        return [Task._from(t) for t in self._conn.list([], group or "")]

    def wait(
        self,
        tasks: Union[TaskRef, Iterable[TaskRef], None] = None,
        *,
        group: Optional[str] = None,
        timeout: Optional[float] = None,
        check: bool = False,
    ) -> List[Task]:
        """Blocks until the tasks (and ``group``'s) have all ended; returns
        them as they ended. ``timeout`` (seconds) raises `TimeoutError`;
        ``check=True`` raises `TaskFailed` for the first that did not
        complete."""
        ids = [] if tasks is None else _ids(tasks)
        if not ids and not group:
            raise InvalidRequest("tasks: give the tasks to wait for, or a group")
        ended = [Task._from(t) for t in self._conn.wait(ids, group or "", timeout)]
        if check:
            for t in ended:
                if t.state != "completed":
                    raise TaskFailed(f"task {t.id} {t.state}: {t.failure_reason}", t)
        return ended

    def cancel(self, tasks: Union[TaskRef, Iterable[TaskRef]]) -> List[Tuple[str, bool, str]]:
        """Cancels the tasks: ``(id, ok, why_not)`` for each."""
        return self._conn.cancel(_ids(tasks), "")

    def pause(self, tasks: Union[TaskRef, Iterable[TaskRef]]) -> List[Tuple[str, bool, str]]:
        """Pauses the tasks: ``(id, ok, why_not)`` for each."""
        return self._conn.pause(_ids(tasks))

    def resume(self, tasks: Union[TaskRef, Iterable[TaskRef]]) -> List[Tuple[str, bool, str]]:
        """Resumes the tasks: ``(id, ok, why_not)`` for each."""
        return self._conn.resume(_ids(tasks))

    def explain(self, task: TaskRef) -> Explanation:
        """Why the task is where it is: the Governor's last decision, what
        its estimate needs against what is free, its decision history."""
        return Explanation._from(self._conn.explain(_id(task)))

    def log(self, task: TaskRef) -> str:
        """The task's output so far (stdout and stderr as written),
        decoded as UTF-8 with bad bytes replaced; `log_bytes` for the raw
        bytes."""
        return self.log_bytes(task).decode("utf-8", "replace")

    def log_bytes(self, task: TaskRef) -> bytes:
        """The task's output so far, as bytes."""
        return self._conn.log(_id(task))

    def resources(self) -> Resources:
        """The host's budgets as the daemon's Governor counts them."""
        return Resources(**self._conn.resources())


_progress_lock = threading.Lock()
_progress_conn: Optional["_native.Connection"] = None


def progress(done: int, total: int = 0, message: str = "") -> bool:
    """Reports progress from inside a task (``lardon progress``): ``done``
    of ``total`` items (0 = unknown). Returns False, doing nothing, when
    this process is not a Lardon task (no ``$LARDON_TASK_ID``)."""
    global _progress_conn
    task_id = os.environ.get("LARDON_TASK_ID")
    if not task_id:
        return False
    if done < 0 or total < 0:
        raise InvalidRequest("done: progress counts are never negative")
    with _progress_lock:
        if _progress_conn is None:
            _progress_conn = _native.Connection(os.environ.get("LARDON_SOCKET") or str(_native.default_socket(None)))
        conn = _progress_conn
    conn.progress(task_id, int(done), int(total), str(message))
    return True
