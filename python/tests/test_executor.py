"""`lardon.Executor` on a simulated host (this process's embedded engine;
the workers really run): results, exceptions, cancellation and the
`concurrent.futures` contract. The real-host rules are in
test_executor_realhost.py."""

from __future__ import annotations

import concurrent.futures
import os
import time

import pytest

import lardon

#: Every Executor of this process shares one engine, so one simulated host.
HOST = ("8GiB", 2)


class Odd(Exception):
    def __init__(self, value):
        super().__init__(f"odd value {value}")
        self.value = value


def square(x, plus=0):
    return x * x + plus


def fail_on_odd(x):
    if x % 2:
        raise Odd(x)
    return x


def wait_for(path, seconds=60):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.01)
    return "opened"


def report_progress():
    return lardon.progress(2, 4, "half")


def die():
    os._exit(3)


def sleep_for(seconds):
    time.sleep(seconds)


def test_submit_and_map_return_results_in_order():
    with lardon.Executor(simulate_host=HOST) as ex:
        assert ex.submit(square, 7, plus=1).result(timeout=60) == 50
        assert list(ex.map(square, range(20), chunks=3, batch=(2, 4))) == [x * x for x in range(20)]
        assert list(ex.map(square, [], chunks=3)) == []
        assert list(ex.map(square, [1, 2], [10, 20], chunks=1)) == [11, 24]


def test_an_exception_crosses_with_its_type_and_traceback():
    with lardon.Executor(simulate_host=HOST) as ex:
        future = ex.submit(fail_on_odd, 3)
        error = future.exception(timeout=60)
        assert isinstance(error, Odd) and error.value == 3
        assert any("fail_on_odd" in note for note in getattr(error, "__notes__", []))
        results = ex.map(fail_on_odd, [0, 2, 4, 5, 6, 8], chunks=2, batch=(1, 1))
        assert [next(results), next(results), next(results)] == [0, 2, 4]
        with pytest.raises(Odd):
            next(results)


def test_a_waiting_call_can_be_cancelled_a_running_one_cannot(tmp_path):
    gate = str(tmp_path / "gate")
    with lardon.Executor(simulate_host=HOST, cpus=2) as ex:
        running = ex.submit(wait_for, gate)
        waiting = ex.submit(square, 3)
        deadline = time.monotonic() + 30
        while not running.running():
            assert time.monotonic() < deadline, ex.tasks()
            time.sleep(0.01)
        assert not waiting.running()
        assert waiting.cancel()
        assert waiting.cancelled()
        assert not running.cancel()
        open(gate, "w").close()
        assert running.result(timeout=60) == "opened"
        done, _ = concurrent.futures.wait([running, waiting], timeout=60)
        assert done == {running, waiting}
        states = {t.id: t.state for t in ex.tasks()}
        assert states[waiting.task_id] == "cancelled"


def test_shutdown_cancel_futures_cancels_what_waits(tmp_path):
    gate = str(tmp_path / "gate")
    ex = lardon.Executor(simulate_host=HOST, cpus=2)
    first = ex.submit(wait_for, gate)
    rest = [ex.submit(square, i) for i in range(3)]
    while not first.running():
        time.sleep(0.01)
    open(gate, "w").close()
    ex.shutdown(wait=True, cancel_futures=True)
    assert first.result() == "opened"
    assert all(f.cancelled() or f.result() == i * i for i, f in enumerate(rest))
    assert any(f.cancelled() for f in rest)
    with pytest.raises(RuntimeError, match="after shutdown"):
        ex.submit(square, 1)


def test_governor_reasons_become_exceptions():
    with lardon.Executor(simulate_host=HOST) as ex:
        too_big = ex.submit(square, 1, mem="64GiB")
        with pytest.raises(lardon.Rejected, match="impossible on this host"):
            too_big.result(timeout=60)
        assert ex.explain(too_big).decision.kind == "reject"
        crashed = ex.submit(die)
        with pytest.raises(lardon.WorkerError):
            crashed.result(timeout=60)
    with lardon.Executor(simulate_host=HOST, timeout=0.5) as ex:
        slow = ex.submit(sleep_for, 30)
        error = slow.exception(timeout=60)
        assert isinstance(error, lardon.TaskTimeout) and isinstance(error, TimeoutError), error


def test_progress_inside_a_call_reaches_the_engine():
    with lardon.Executor(simulate_host=HOST) as ex:
        future = ex.submit(report_progress)
        assert future.result(timeout=60) is True
        [task] = [t for t in ex.tasks() if t.id == future.task_id]
        assert (task.progress.done, task.progress.total, task.progress.message) == (2, 4, "half")


def test_bad_arguments_name_their_field():
    with pytest.raises(lardon.InvalidRequest, match="^mem: "):
        lardon.Executor(simulate_host=HOST, mem="a lot")
    with pytest.raises(lardon.InvalidRequest, match="^simulate_host: "):
        lardon.Executor(simulate_host=("4GiB", 1))
    with lardon.Executor(simulate_host=HOST) as ex:
        with pytest.raises(lardon.InvalidRequest, match="^cpus: "):
            ex.submit(square, 1, cpus="many")
        with pytest.raises(lardon.InvalidRequest, match="^batch: "):
            ex.map(square, [1], batch=(4, 2))
        with pytest.raises(Exception, match="pickle|lambda|local"):
            ex.submit(lambda: 1)
