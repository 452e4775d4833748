"""`lardon.Client` against a real `lardon daemon` (the binary built from
this checkout, on a simulated host so that admission is deterministic;
the commands really run)."""

from __future__ import annotations

import sys

import pytest

import lardon


def test_submit_wait_status_log_and_explain(daemon):
    task = daemon.submit(["sh", "-c", "echo hello; echo oops >&2"], name="greet", mem="64MiB", cpus=0.5)
    assert isinstance(task, lardon.Task)
    assert task.name == "greet"
    [ended] = daemon.wait(task, timeout=60)
    assert ended.id == task.id
    assert ended.state == "completed" and ended.done
    assert ended.exit_code == 0
    assert daemon.status(task.id).state == "completed"
    assert "hello" in daemon.log(task) and "oops" in daemon.log(task)
    why = daemon.explain(task)
    assert why.task.id == task.id
    assert why.decision.kind == "admit", why
    assert any(h.kind == "admitted" for h in why.history), why.history
    assert why.available.memory_total == 8 << 30


def test_a_task_runs_in_the_submitters_environment(daemon, monkeypatch):
    monkeypatch.setenv("PYTEST_LARDON_BAR", "from-caller")
    task = daemon.submit(["sh", "-c", 'echo "$FOO/$PYTEST_LARDON_BAR"'], env={"FOO": "added"})
    daemon.wait(task, timeout=60, check=True)
    assert daemon.log(task).strip() == "added/from-caller"
    bare = daemon.submit(["sh", "-c", 'echo "[$PYTEST_LARDON_BAR]"'], inherit_env=False)
    daemon.wait(bare, timeout=60, check=True)
    assert daemon.log(bare).strip() == "[]"


def test_a_batched_task_runs_every_item(daemon):
    task = daemon.submit(
        ["sh", "-c", 'echo "$LARDON_ITEM_OFFSET+$LARDON_BATCH_SIZE"'],
        items=10,
        batch=(2, 5),
        mem="16MiB",
        mem_per_item="1MiB",
    )
    [ended] = daemon.wait(task, timeout=60, check=True)
    assert ended.cursor == 10
    covered = set()
    for line in daemon.log(task).split():
        offset, size = (int(x) for x in line.split("+"))
        assert 2 <= size <= 5 or offset + size == 10
        covered.update(range(offset, offset + size))
    assert covered == set(range(10))


def test_cancel_a_running_task_and_wait_for_a_group(daemon):
    sleeper = daemon.submit(["sleep", "60"], group="py-cancel")
    quick = [daemon.submit(["true"], group="py-cancel") for _ in range(3)]
    [(task_id, ok, why)] = daemon.cancel(sleeper)
    assert (task_id, ok) == (sleeper.id, True), why
    ended = daemon.wait(group="py-cancel", timeout=60)
    states = {t.id: t.state for t in ended}
    assert states[sleeper.id] == "cancelled"
    assert all(states[t.id] == "completed" for t in quick), states
    assert {t.id for t in daemon.status(group="py-cancel")} == {sleeper.id, *(t.id for t in quick)}


def test_progress_from_inside_a_task(daemon):
    code = "import lardon, sys; sys.exit(0 if lardon.progress(3, 10, 'three of ten') else 5)"
    task = daemon.submit([sys.executable, "-c", code])
    [ended] = daemon.wait(task, timeout=60, check=True)
    assert (ended.progress.done, ended.progress.total) == (3, 10)
    assert ended.progress.message == "three of ten"
    # Outside a task it says so and does nothing.
    assert lardon.progress(1, 2) is False


def test_errors_name_the_field(daemon, tmp_path):
    with pytest.raises(lardon.InvalidRequest, match=r"^mem: ") as bad:
        daemon.submit(["true"], mem="lots")
    assert isinstance(bad.value, ValueError)
    with pytest.raises(lardon.InvalidRequest, match=r"^cpus: "):
        daemon.submit(["true"], cpus=0)
    with pytest.raises(lardon.InvalidRequest, match=r"^argv: "):
        daemon.submit("echo hi")
    with pytest.raises(lardon.InvalidRequest, match=r"^batch: "):
        daemon.submit(["true"], items=4, batch=(3, 2))
    with pytest.raises(lardon.TaskNotFound):
        daemon.status("987654")
    failing = daemon.submit(["sh", "-c", "exit 3"])
    with pytest.raises(lardon.TaskFailed) as failed:
        daemon.wait(failing, timeout=60, check=True)
    assert failed.value.task.exit_code == 3
    missing = tmp_path / "nobody.sock"
    with pytest.raises(lardon.DaemonUnreachable, match="nobody.sock") as unreachable:
        lardon.Client(str(missing))
    assert isinstance(unreachable.value, ConnectionError)
    assert "lardon daemon" in str(unreachable.value)


def test_wait_timeout_raises_timeout_error(daemon):
    task = daemon.submit(["sleep", "30"])
    with pytest.raises(TimeoutError):
        daemon.wait(task, timeout=0.3)
    daemon.cancel(task)
