"""Lardon from Python: work admitted only when the host can take it.

* `Executor`: a `concurrent.futures.Executor` whose calls run in worker
  processes admitted by Lardon's Governor against this host's real memory
  and CPUs, each under the limit it was granted; no daemon needed.
* `Client`: a running ``lardon daemon``'s tasks: submit, status, wait,
  cancel, explain, log.
* `progress`: a task's progress, from inside it.
"""

from ._types import Contract, Decision, Explanation, HistoryEntry, Learned, Progress, Resources, Task
from ._engine import shutdown as shutdown_engine
from .client import Client, progress
from .errors import (
    DaemonUnreachable,
    InvalidRequest,
    LardonError,
    MemoryLimitExceeded,
    Rejected,
    TaskCancelled,
    TaskFailed,
    TaskNotFound,
    TaskTimeout,
    WorkerError,
)
from .executor import Executor
from ._native import VERSION as __version__

__all__ = [
    "Client",
    "Contract",
    "DaemonUnreachable",
    "Decision",
    "Executor",
    "Explanation",
    "HistoryEntry",
    "InvalidRequest",
    "LardonError",
    "Learned",
    "MemoryLimitExceeded",
    "Progress",
    "Rejected",
    "Resources",
    "Task",
    "TaskCancelled",
    "TaskFailed",
    "TaskNotFound",
    "TaskTimeout",
    "WorkerError",
    "progress",
    "shutdown_engine",
]
