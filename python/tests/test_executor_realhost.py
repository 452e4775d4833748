"""`lardon.Executor` on the real host: each script runs in a fresh cgroup
limited to 1 GiB (conftest's `run_limited`), so the engine's budget, the
workers' cgroups, their measured peaks and the kills at their limits are
all real, and the machine's own load decides nothing. "Never
overcommits" is read off the kernel: no OOM kill in the limited cgroup
itself, whatever the calls' own limits killed."""

from __future__ import annotations

import re

LIMIT = 1 << 30

COMMON = '''
import json, os, time
import lardon

def hog(mib, hold):
    start = time.monotonic()
    data = b"x" * (mib << 20)
    time.sleep(hold)
    return len(data) >> 20, start, time.monotonic()

def hog_again(mib, hold):
    return hog(mib, hold)

held = []

def hold_item(i):
    held.append(b"y" * (8 << 20))
    return i * 2, int(os.environ["LARDON_BATCH_SIZE"])
'''


def overlap(spans):
    """The most calls that ran at once."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def test_honest_calls_share_the_budget_and_none_is_killed(run_limited):
    script = COMMON + '''
if __name__ == "__main__":
    with lardon.Executor(cpus="0.25") as ex:
        free = ex._conn.resources()["memory_available"]
        futures = [ex.submit(hog, 150, 1.0, mem="200MiB") for _ in range(8)]
        results = [f.result(timeout=180) for f in futures]
        tasks = ex.tasks()
    print(json.dumps({"free": free, "results": results,
                      "retries": sum(t.memory_retries for t in tasks),
                      "states": sorted({t.state for t in tasks})}))
'''
    out, oom_kills = run_limited(LIMIT, script)
    assert [r[0] for r in out["results"]] == [150] * 8
    assert out["states"] == ["completed"] and out["retries"] == 0
    assert oom_kills == 0
    fits = out["free"] // (200 << 20)
    most = overlap([(r[1], r[2]) for r in out["results"]])
    assert 2 <= most <= fits, (most, fits)


def test_a_lying_call_is_killed_at_its_grant_not_the_host(run_limited):
    script = COMMON + '''
if __name__ == "__main__":
    out = {}
    with lardon.Executor(cpus="0.25", retry_on_oom=False) as ex:
        error = ex.submit(hog, 300, 0, mem="100MiB").exception(timeout=180)
        out["type"] = type(error).__name__
        out["memory_error"] = isinstance(error, MemoryError)
        out["reason"] = getattr(error, "reason", str(error))
    with lardon.Executor(cpus="0.25") as ex:
        # Another function: nothing learned for it yet.
        future = ex.submit(hog_again, 300, 0, mem="100MiB")
        out["retried"] = future.result(timeout=180)[0]
        # The next call of it is sized by what the kill taught.
        later = ex.submit(hog_again, 300, 0, mem="100MiB")
        later.result(timeout=180)
        retries = {t.id: t.memory_retries for t in ex.tasks()}
        out["memory_retries"] = retries[future.task_id]
        out["later_retries"] = retries[later.task_id]
    print(json.dumps(out))
'''
    out, oom_kills = run_limited(LIMIT, script)
    assert out["type"] == "MemoryLimitExceeded" and out["memory_error"], out
    # The limit is the grant (the declared 100 MiB and the engine's
    # margin), far below what the call took: the call died, not the host.
    limit = re.search(r"memory limit of ([0-9.]+) MiB exceeded", out["reason"])
    assert limit and 100 <= float(limit.group(1)) < 300, out
    assert out["retried"] == 300
    assert out["memory_retries"] >= 1, out
    assert out["later_retries"] == 0, out
    assert oom_kills == 0


def test_map_batches_shrink_after_a_measured_overrun(run_limited):
    script = COMMON + '''
if __name__ == "__main__":
    with lardon.Executor(cpus="0.25") as ex:
        results = list(ex.map(hold_item, range(48), mem="16MiB", mem_per_item="1MiB",
                              batch=(1, 16), chunks=1))
        [task] = ex.tasks()
    print(json.dumps({"results": results, "memory_retries": task.memory_retries,
                      "learned": [task.learned.per_item, task.learned.source]}))
'''
    out, oom_kills = run_limited(LIMIT, script)
    assert [r[0] for r in out["results"]] == [i * 2 for i in range(48)]
    sizes = [r[1] for r in out["results"]]
    # The first batch took 16 items on the declared 1 MiB each and was
    # killed; every batch that completed was sized from what it learned.
    assert out["memory_retries"] >= 1, out
    assert max(sizes) < 16, sizes
    assert oom_kills == 0
