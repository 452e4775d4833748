"""Every exception the package raises; all derive from `LardonError`.

Each also derives from the built-in a caller would catch without knowing
Lardon: a bad argument is a `ValueError`, an unreachable daemon a
`ConnectionError`, an unknown task a `LookupError`, a call killed at its
memory limit a `MemoryError`, a timed-out one a `TimeoutError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # pragma: no cover
    from ._types import Task


class LardonError(Exception):
    """Base of every Lardon error."""


class InvalidRequest(LardonError, ValueError):
    """An argument was refused; the message names the field first
    (``mem: ...``)."""


class DaemonUnreachable(LardonError, ConnectionError):
    """No daemon answered on the socket; the message names it and says how
    to start one."""


class TaskNotFound(LardonError, LookupError):
    """No task has this id."""


class TaskFailed(LardonError):
    """A task (or an Executor call) ended without a result.

    ``task`` is the task as the daemon last saw it, when known; ``reason``
    is the daemon's reason in one line.
    """

    def __init__(self, message: str, task: Optional["Task"] = None) -> None:
        super().__init__(message)
        self.task = task
        self.reason = task.failure_reason if task is not None else message


class MemoryLimitExceeded(TaskFailed, MemoryError):
    """Killed at the memory limit the Governor granted (its cgroup's), and
    not run again: the reason says the limit and the measured peak."""


class Rejected(TaskFailed):
    """The Governor refused the task: it can never fit this host (the
    reason names the budget)."""


class TaskTimeout(TaskFailed, TimeoutError):
    """Killed at its wall-clock timeout."""


class TaskCancelled(TaskFailed):
    """Cancelled while it ran (``lardon cancel``, or the Executor's
    shutdown with ``cancel_futures=True``)."""


class WorkerError(TaskFailed):
    """The worker process ended without a result and without a reason the
    Governor gave (it crashed, or its result could not be unpickled); the
    message carries the end of its output."""
