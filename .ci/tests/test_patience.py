"""The root conftest's ``patience``: subprocesses are waited on while they make progress.

A fixed timeout failed tests on a machine under load 9 (a slowed process, not a hung one); a
process that uses no CPU time and writes nothing for ``idle_s`` is hung, whatever the load.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

PRINTS = "import time\nfor i in range(8):\n    print(i, flush=True)\n    time.sleep(0.5)\n"
SPINS = (
    "import time\nt = time.process_time()\nwhile time.process_time() - t < 3: pass\nprint('done')\n"
)


def test_a_process_that_writes_or_computes_past_the_idle_limit_is_waited_for(patience):
    slow = type(patience)(idle_s=2.5)
    start = time.monotonic()
    out = slow.run([sys.executable, "-c", PRINTS], text=True, check=True).stdout
    assert out.split() == [str(i) for i in range(8)]
    assert slow.run([sys.executable, "-c", SPINS], text=True).stdout == "done\n"
    assert time.monotonic() - start > 2.5 * 2  # each ran past a fixed 2.5 s clock


def test_a_process_with_no_cpu_and_no_output_is_killed_and_fails_the_test(patience):
    proc = subprocess.Popen([sys.executable, "-c", "print('started', flush=True); input()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    with pytest.raises(pytest.fail.Exception) as failed:
        type(patience)(idle_s=2.0).communicate([proc])
    assert proc.poll() is not None  # killed, not left behind
    message = str(failed.value)
    assert message.startswith(
        "Waiting for their exit: the process(es) made no progress (no CPU time, no output) for 2 "
        "s, killed."
    )
    assert "started" in message  # the tail of what it wrote


def test_run_gives_what_subprocess_run_gives(patience):
    code = "import sys; print('out\\r\\nline'); print('err', file=sys.stderr); sys.exit(3)"
    mine = patience.run([sys.executable, "-c", code], text=True)
    theirs = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (mine.returncode, mine.stdout, mine.stderr) == (3, theirs.stdout, theirs.stderr)
    with pytest.raises(subprocess.CalledProcessError):
        patience.run([sys.executable, "-c", code], check=True)
    assert patience.run([sys.executable, "-c", "print(1)"]).stdout == b"1\n"


def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def test_peers_that_both_fail_keep_their_own_exit_codes(patience):
    # Two jax.distributed processes that refuse the same mesh exit 2 within milliseconds of each
    # other: the second is not killed for the first's failure.
    refuse = (
        "import sys, time; time.sleep({}); print('gpt: error: no', file=sys.stderr); sys.exit(2)"
    )
    procs = [_python(refuse.format(0.2)), _python(refuse.format(0.5))]
    outputs = type(patience)(peer_grace_s=5.0).communicate(procs, peers=True)
    assert [p.returncode for p in procs] == [2, 2]
    assert [err for _, err in outputs] == ["gpt: error: no\n"] * 2


def test_a_peer_left_waiting_for_a_failed_one_is_killed_after_the_grace(patience):
    waits = _python("import time; time.sleep(600)")
    fails = _python("import sys; sys.exit(3)")
    start = time.monotonic()
    type(patience)(peer_grace_s=1.0).communicate([waits, fails], peers=True)
    assert (waits.returncode, fails.returncode) == (-9, 3)
    assert 1.0 < time.monotonic() - start < 60
