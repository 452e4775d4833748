"""`lardon.Executor` against `concurrent.futures.ProcessPoolExecutor` on
one memory-bound workload, each run alone in a fresh cgroup limited to
the same memory (the "host"): makespan, the most memory the cgroup held,
calls that completed, and the kernel's OOM kills. Run by
scripts/bench-python.sh (as root, after scripts/test-python.sh built the
package); prints a Markdown table and, with --json, one object per run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from cgroup_limit import LimitedCgroup  # noqa: E402

WORKLOAD = '''
import concurrent.futures, json, sys, time

def hog(mib, hold):
    data = b"x" * (mib << 20)      # written: really resident
    time.sleep(hold)
    return len(data)

if __name__ == "__main__":
    kind, workers, calls, mib, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    start = time.monotonic()
    if kind == "pool":
        ex = concurrent.futures.ProcessPoolExecutor(max_workers=workers)
    else:
        import lardon
        # An honest estimate: the call's data and an interpreter.
        ex = lardon.Executor(mem=f"{mib + 32}MiB", cpus="0.1")
    ok, errors = 0, []
    with ex:
        futures = [ex.submit(hog, mib, hold) for _ in range(calls)]
        for f in futures:
            try:
                f.result()
                ok += 1
            except Exception as e:
                errors.append(type(e).__name__)
    print(json.dumps({"makespan_s": time.monotonic() - start, "ok": ok, "errors": sorted(set(errors))}))
'''


def run(kind: str, workers: int, args) -> dict:
    cg = LimitedCgroup(args.limit_mib << 20)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            script = Path(tmp) / "workload.py"
            script.write_text(WORKLOAD)
            argv = [sys.executable, str(script), kind, str(workers), str(args.calls), str(args.mib), str(args.hold)]
            proc = subprocess.run(cg.join_argv(argv), capture_output=True, text=True, timeout=600, cwd=tmp)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode == 0 and lines:
            out = json.loads(lines[-1])
        else:
            out = {"makespan_s": None, "ok": 0, "errors": [f"the program itself exited {proc.returncode}"]}
        out.update(kind=kind, workers=workers, peak_mib=cg.peak() >> 20, oom_kills=cg.oom_kills())
        return out
    finally:
        cg.remove()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--limit-mib", type=int, default=2048, help="the cgroup's memory limit (the host)")
    p.add_argument("--calls", type=int, default=16)
    p.add_argument("--mib", type=int, default=300, help="memory each call writes")
    p.add_argument("--hold", type=float, default=1.0, help="seconds each call holds it")
    p.add_argument("--workers", default="2,4,8", help="ProcessPoolExecutor max_workers values")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    runs = [run("pool", int(w), args) for w in args.workers.split(",")] + [run("lardon", 0, args)]
    if args.json:
        for r in runs:
            print(json.dumps(r))
        return 0
    print(f"{args.calls} calls × {args.mib} MiB held {args.hold} s, in a cgroup limited to {args.limit_mib} MiB\n")
    print("| executor | makespan | peak memory | calls completed | OOM kills | errors |")
    print("|---|---|---|---|---|---|")
    for r in runs:
        name = f"ProcessPoolExecutor(max_workers={r['workers']})" if r["kind"] == "pool" else "lardon.Executor()"
        span = "—" if r["makespan_s"] is None else f"{r['makespan_s']:.2f} s"
        print(
            f"| {name} | {span} | {r['peak_mib']} MiB | {r['ok']}/{args.calls} | {r['oom_kills']} | "
            f"{', '.join(r['errors']) or '—'} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
