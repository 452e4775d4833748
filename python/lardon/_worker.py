"""The worker process of `lardon.Executor`: ``python -m lardon._worker
MODE PREP JOB``, started by the engine as a task (in its own cgroup, under
the memory the Governor granted).

``PREP`` is the submitter's `multiprocessing.spawn` preparation data
(``sys.path``, the working directory, the ``__main__`` module to import as
``__mp_main__``), so that functions defined in the submitter's script
unpickle here as they do for a spawn-mode process pool. ``JOB`` is the
call's directory: ``call.pkl`` in; for ``MODE=call`` ``result.pkl`` out,
for ``MODE=map`` one ``out-OFFSET.pkl`` per batch, for the items from
``$LARDON_ITEM_OFFSET`` (``$LARDON_BATCH_SIZE`` of them). Every output is
written aside and renamed into place: a run killed midway leaves none.
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback


def _write(path: str, value) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        try:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:  # the result or the exception would not pickle
            f.seek(0)
            f.truncate()
            pickle.dump(("unpicklable", f"{type(e).__name__}: {e}", traceback.format_exc()), f)
    os.replace(tmp, path)


def _failure(exc: BaseException):
    tb = traceback.format_exc()
    try:
        pickle.dumps(exc)
        return ("err", exc, tb)
    except Exception:
        return ("unpicklable", f"{type(exc).__name__}: {exc}", tb)


def main(argv) -> int:
    if len(argv) != 4 or argv[1] not in ("call", "map"):
        print("usage: python -m lardon._worker call|map PREP JOB", file=sys.stderr)
        return 2
    mode, prep_path, job = argv[1], argv[2], argv[3]
    import multiprocessing.spawn

    with open(prep_path, "rb") as f:
        multiprocessing.spawn.prepare(pickle.load(f))
    with open(os.path.join(job, "call.pkl"), "rb") as f:
        call = pickle.load(f)
    if mode == "call":
        fn, args, kwargs = call
        try:
            result = ("ok", fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 -- every failure goes back to the caller
            _write(os.path.join(job, "result.pkl"), _failure(e))
            return 1
        _write(os.path.join(job, "result.pkl"), result)
        return 0
    fn, items = call
    offset = int(os.environ["LARDON_ITEM_OFFSET"])
    size = int(os.environ["LARDON_BATCH_SIZE"])
    values = []
    for index in range(offset, min(offset + size, len(items))):
        try:
            values.append(fn(*items[index]))
        except BaseException as e:  # noqa: BLE001
            _write(os.path.join(job, f"err-{index:012d}.pkl"), (index, _failure(e)))
            return 1
    _write(os.path.join(job, f"out-{offset:012d}.pkl"), (offset, size, values))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
