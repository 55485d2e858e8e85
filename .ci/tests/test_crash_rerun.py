"""The root conftest reports the first crash of a test's pytest-xdist worker as a rerun: the test
runs again in a new worker and passes or fails there; a second crash of the same test stands as a
failure. The summary names the test either way."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

ONCE = """
import os, signal
from pathlib import Path

def test_crashes_its_worker_the_first_time():
    mark = Path(__file__).with_name("crashed-once")
    if not mark.exists():
        mark.write_text("")
        os.kill(os.getpid(), signal.SIGSEGV)
"""

ALWAYS = """
import os, signal

def test_crashes_every_time():
    os.kill(os.getpid(), signal.SIGSEGV)
"""


@pytest.mark.parametrize("dist", ["worksteal", "load"])
@pytest.mark.parametrize(("source", "rc", "counts"), [(ONCE, 0, "1 passed, 1 rerun"),
                                                       (ALWAYS, 1, "failed, 1 rerun")])  # fmt: skip
def test_a_crashed_test_runs_again_and_only_a_second_crash_fails(
    tmp_path, source, rc, counts, dist
):
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")  # as the wheels session does
    (tmp_path / "test_crash.py").write_text(source)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
           dist, "--max-worker-restart=2", f"--rootdir={tmp_path}", f"--confcutdir={tmp_path}",
           str(tmp_path)]  # fmt: skip
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    out = done.stdout
    assert done.returncode == rc, out[-4000:]
    name = source.split("def ")[1].split("(")[0]
    said = f"worker crashed running test_crash.py::{name}; it ran again in a new worker"
    assert said in out and counts in out.splitlines()[-1], out[-4000:]
