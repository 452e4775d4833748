"""The README's "From Python" programs, run as shown: the Executor one on
this host, the Client one against a real daemon (found through
``$LARDON_STATE_DIR``, as the CLI finds it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO


def readme_programs():
    text = (REPO / "README.md").read_text()
    section = text.split("\n## From Python\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def run(code, cwd, env=None):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=cwd, env=env)
    assert proc.returncode == 0, f"exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_the_readme_has_both_programs():
    assert len(readme_programs()) == 2


def test_the_executor_program_runs_as_shown(tmp_path):
    (tmp_path / "example.py").write_text(readme_programs()[0])
    proc = subprocess.run([sys.executable, "example.py"], capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["(0, 67108864)", "16 tiles"]


def test_the_client_program_runs_as_shown(daemon, tmp_path):
    state = os.path.dirname(daemon.socket)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LARDON_")}
    env["LARDON_STATE_DIR"] = state
    lines = run(readme_programs()[1], tmp_path, env).splitlines()
    assert lines[0] == "completed 0"
    assert lines[1] == "hello"
    assert lines[2], lines
