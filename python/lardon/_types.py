"""Typed, read-only views of what the daemon answers (keys as in
``lardon status --json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

#: States a task never leaves.
TERMINAL = ("completed", "failed", "cancelled")


@dataclass(frozen=True)
class Decision:
    """One admission decision of the Governor."""

    kind: str  #: ``admit``, ``reduce_batch``, ``wait``, ``reject`` or ``none``
    reason_code: str  #: stable machine key, e.g. ``memory``, ``pressure_red``
    message: str  #: one human sentence
    batch: int  #: the granted batch (admit, reduce_batch)
    at_unix_ms: int

    @classmethod
    def _from(cls, d: Optional[Dict[str, Any]]) -> Optional["Decision"]:
        return None if d is None else cls(**d)


@dataclass(frozen=True)
class Progress:
    """Progress a task reported (``lardon.progress``)."""

    done: int
    total: int  #: 0 = unknown
    message: str
    eta_ms: Optional[int]


@dataclass(frozen=True)
class Contract:
    """What the Governor granted a running task."""

    batch: int
    memory: int  #: bytes: the run's hard limit under enforcement
    gpu_memory: int
    gpu_devices: Tuple[int, ...]
    cpu_millis: int
    io_slots: int
    item_offset: int


@dataclass(frozen=True)
class Learned:
    """What the task's class learned from measured runs."""

    samples: int
    fixed: Optional[int]
    per_item: Optional[int]
    lower_bound: Optional[int]
    batch_target: Optional[int]
    source: str
    key: str


@dataclass(frozen=True)
class Task:
    """A task as the daemon sees it."""

    id: str
    name: str
    state: str  #: pending, running, paused, completed, failed, cancelled
    argv: Tuple[str, ...]
    group: Optional[str]
    items: Optional[int]
    attempts: int
    created_unix_ms: int
    started_unix_ms: Optional[int]
    finished_unix_ms: Optional[int]
    exit_code: Optional[int]
    failure_reason: str
    cursor: int
    memory_retries: int  #: runs killed at their memory limit and run again
    overrun_note: str
    waiting_for: str
    host: str
    last_decision: Optional[Decision]
    progress: Progress
    contract: Optional[Contract]
    learned: Learned

    @property
    def done(self) -> bool:
        """Whether the task has ended (completed, failed or cancelled)."""
        return self.state in TERMINAL

    @classmethod
    def _from(cls, d: Dict[str, Any]) -> "Task":
        d = dict(d)
        d["argv"] = tuple(d["argv"])
        d["last_decision"] = Decision._from(d["last_decision"])
        d["progress"] = Progress(**d["progress"])
        c = d["contract"]
        if c is not None:
            c = dict(c)
            c["gpu_devices"] = tuple(c["gpu_devices"])
            d["contract"] = Contract(**c)
        d["learned"] = Learned(**d["learned"])
        return cls(**d)


@dataclass(frozen=True)
class Resources:
    """The host's budgets as the Governor counts them."""

    host: str
    memory_total: int
    memory_reserve: int
    memory_reserved: int
    memory_available: int
    cpus_logical: int
    cpu_pool: int
    cpu_millis_available: int
    running: int
    pending: int
    enforcement: str  #: the backend, e.g. ``ENFORCEMENT_BACKEND_CGROUP_V2``
    enforcement_why: str


@dataclass(frozen=True)
class HistoryEntry:
    """One decision that changed a task's course."""

    kind: str
    from_unix_ms: int
    to_unix_ms: Optional[int]
    batch: Optional[int]
    memory: Optional[int]
    cpu_millis: Optional[int]
    reason_code: str
    message: str


@dataclass(frozen=True)
class Explanation:
    """Why a task is where it is (``lardon explain``)."""

    task: Optional[Task]
    decision: Optional[Decision]
    needs: Dict[str, Any]
    available: Resources
    history: List[HistoryEntry] = field(default_factory=list)

    @classmethod
    def _from(cls, d: Dict[str, Any]) -> "Explanation":
        return cls(
            task=None if d["task"] is None else Task._from(d["task"]),
            decision=Decision._from(d["decision"]),
            needs=dict(d["needs"]),
            available=Resources(**d["available"]),
            history=[HistoryEntry(**h) for h in d["history"]],
        )
