"""``gpt train`` under faults: kill -9, concurrent launches, missing and dying peers, a full disk.

Every run is a ``gpt`` subprocess (one fake CPU device each, a model of ~10k parameters) waited on
while it makes progress (the root conftest's ``patience``), so a hang fails the test instead of
blocking CI, and a loaded machine does not; an explicit ``timeout`` is a bound on gpt's own
reaction (a heartbeat, a start-up timeout), not on the machine. Each test prints a row of the
fault table (fault, tries, outcome, seconds to exit); run with ``-s`` to see them.
"""

from __future__ import annotations

import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

_patience = None  # the root conftest's, for this module's helpers


@pytest.fixture(autouse=True)
def _set_patience(patience):
    global _patience
    _patience = patience


TINY = [
    "--set", "model.seq_len=16", "--set", "model.d_model=16", "--set", "model.n_layers=1",
    "--set", "model.n_heads=1", "--set", "train.batch_size=2", "--set", "train.warmup_steps=1",
    "--set", "train.eval_every=100000", "--set", "train.eval_batches=1",
    "--set", "sample.max_new_tokens=2",
]  # fmt: skip
CHECK_FAILURE = "Check failure stack trace"


@pytest.fixture(scope="module", autouse=True)
def _compile_cache(tmp_path_factory):
    # Every test starts the same tiny model a dozen times: a persistent compilation cache shared by
    # the subprocesses halves each start-up on a loaded 2-core machine.
    global _CACHE
    _CACHE = str(tmp_path_factory.mktemp("jax-cache"))


_CACHE = ""


def _env() -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=1"
    env |= {"JAX_COMPILATION_CACHE_DIR": _CACHE, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
    for var in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        env.pop(var, None)
    return env


def _start(*args: str, code: str | None = None, env: dict | None = None) -> subprocess.Popen:
    head = ["-c", code] if code else ["-m", "gpt_models"]
    return subprocess.Popen(
        [sys.executable, *head, *args], env={**_env(), **(env or {})}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_interruptible,
    )  # fmt: skip


def _interruptible() -> None:
    # A run started with SIGINT ignored keeps ignoring it (gpt honours that, as shells expect of
    # background jobs), and a test suite launched in the background hands that on: the Ctrl-C
    # tests would wait forever. The runs here are started as from a terminal.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _finish(proc: subprocess.Popen, timeout: float | None = None) -> tuple[int, str]:
    if timeout is None:
        ((out, err),) = _patience.communicate([proc])
        return proc.returncode, out + err
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"gpt hung (killed after {timeout} s):\n{out[-2000:]}\n{err[-4000:]}")
    return proc.returncode, out + err


def _gpt(*args: str) -> tuple[int, str]:
    return _finish(_start(*args))


def _steps(run: Path) -> list[int]:
    folder = run / "checkpoints"
    return (
        sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []
    )


def _partial(run: Path) -> set[str]:
    """Checkpoint folders orbax has not finished (it renames them when complete)."""
    folder = run / "checkpoints"
    return (
        {p.name for p in folder.iterdir() if p.name.endswith("tmp")} if folder.is_dir() else set()
    )


def _wait_for(predicate, proc: subprocess.Popen, what: str) -> None:
    def seen() -> bool:
        if predicate():
            return True
        if proc.poll() is not None:
            pytest.fail(
                f"gpt exited ({proc.returncode}) before {what}:\n{''.join(proc.communicate())[-4000:]}"
            )
        return False

    _patience.wait_for(seen, [proc], what)


def _row(fault: str, tries: int, outcome: str, seconds: list[float]) -> None:
    shown = f"{min(seconds):.1f}-{max(seconds):.1f}" if seconds else "-"
    print(f"\n| {fault} | {tries} | {outcome} | {shown} s |")


# ------------------------------------------------------------------------------------------------
# kill -9 at random moments, saves included: always restorable, and resume continues


def test_kill_9_at_random_moments_always_resumes(tmp_path):
    rng = random.Random(18)
    run = tmp_path / "run"
    steps, tries = 600, 10
    launch = ["train", "--out", str(tmp_path), "--name", "run", *TINY,
              "--set", f"train.steps={steps}", "--set", "train.checkpoint_every=3"]  # fmt: skip
    resumed_from, mid_save, exits = [], 0, []
    for i in range(tries):
        before, partial_before = _steps(run), _partial(run)
        proc = _start(*(launch if i == 0 else ["train", "--resume", str(run)]))
        newest = (before or [0])[-1]
        _wait_for(
            lambda n=newest: bool(_steps(run)) and _steps(run)[-1] > n, proc, "a new checkpoint"
        )
        time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        rc, out = _finish(proc)
        exits.append(time.monotonic() - t0)
        assert rc == -signal.SIGKILL, out[-3000:]
        mid_save += bool(_partial(run) - partial_before)  # a save this kill interrupted
        if i:
            found = re.search(r"Resumed from checkpoint step (\d+)", out)
            assert found, out[-3000:]
            resumed_from.append(int(found.group(1)))
            # The kill -9 before left the lock file behind; it is taken over, with a notice.
            assert "which is no longer running; taking it over" in out, out[-3000:]
            assert resumed_from[-1] == before[-1], (resumed_from, before)
    last = _steps(run)[-1]
    rc, out = _gpt("train", "--resume", str(run))
    assert rc == 0, out[-4000:]
    assert f"Resumed from checkpoint step {last} " in out, out[-3000:]
    assert _steps(run)[-1] == steps
    assert not (run / "lock").exists()
    assert resumed_from == sorted(resumed_from) and len(resumed_from) == tries - 1
    # Kills during saves count most: with a save every 3 steps most moments hit one.
    assert mid_save >= 1, "no kill landed during a checkpoint save; raise the number of tries"
    _row(
        "kill -9 at random moments",
        tries,
        f"restorable {tries}/{tries} ({mid_save} mid-save)",
        exits,
    )


# ------------------------------------------------------------------------------------------------
# two launches into one run folder, two seconds apart


def test_concurrent_launch_into_one_run_is_refused(tmp_path):
    run = tmp_path / "run"
    launch = ["train", "--out", str(tmp_path), "--name", "run", *TINY,
              "--set", "train.steps=100000", "--set", "train.checkpoint_every=5"]  # fmt: skip
    first = _start(*launch)
    time.sleep(2.0)
    second = _start(*launch)
    # Whichever takes the lock first trains; the other must be refused (exit 2) and name it.
    t0 = time.monotonic()
    _patience.wait_for(lambda: first.poll() is not None or second.poll() is not None,
                       [first, second], "one of two launches to exit")  # fmt: skip
    loser, winner = (first, second) if first.poll() is not None else (second, first)
    rc, out = _finish(loser)
    took = time.monotonic() - t0
    assert rc == 2, out[-3000:]
    assert f"Run folder {run} is in use: pid {winner.pid} on host {socket.gethostname()}" in out
    assert "Traceback" not in out
    _wait_for(lambda: _steps(run), winner, "a checkpoint")
    # Resuming a live run is refused the same way; reading it (eval) is fine.
    rc, out = _gpt("train", "--resume", str(run))
    assert rc == 2 and f"is in use: pid {winner.pid}" in out, out[-3000:]
    # The winner keeps saving every 5 steps and deleting old steps while eval reads.
    for _ in range(3):
        rc, out = _gpt("eval", "--run", str(run))
        assert rc == 0 and out.startswith("val_loss "), out[-3000:]
        assert "Traceback" not in out and "could not be restored" not in out, out[-3000:]
    winner.kill()
    _finish(winner)
    _row("concurrent launch / resume of a live run", 2, "clear error (exit 2)", [took])


# ------------------------------------------------------------------------------------------------
# multi-process start-up that never completes


def test_missing_coordinator_or_peer_times_out_with_a_message(tmp_path, free_ports):
    base = ["train", "--out", str(tmp_path), "--name", "mp", *TINY, "--init-timeout", "3"]
    # Process 1 with no coordinator at all; process 0, task 0 of a 2-task SLURM job, whose peer
    # never comes. Two distinct ports: with the same one, process 1 would find process 0's
    # coordinator and both would train.
    nobody, coordinator = free_ports(2)
    lone_1 = _start(*base, "--coordinator", f"127.0.0.1:{nobody}", "--num-processes", "2",
                    "--process-id", "1")  # fmt: skip
    slurm = {"SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "localhost", "SLURM_NTASKS": "2",
             "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "JAX_COORDINATOR_PORT": str(coordinator)}  # fmt: skip
    lone_0 = _start(*base, env=slurm)
    t0 = time.monotonic()
    times = []
    task_0 = f"process 0 of 2 (SLURM job 4242, coordinator localhost:{coordinator})"
    for proc, waiting, expected in (
        (lone_1, "process 1 of 2: waiting for all 2 processes to join the coordinator at "
         "127.0.0.1:", "process 1 of 2: no coordinator is listening at 127.0.0.1:"),
        (lone_0, f"{task_0}: waiting for all 2 processes to join (giving up after 3 s",
         f"{task_0}: gave up after 3 s waiting for all 2 processes to join the coordinator at "
         "localhost:"),
    ):  # fmt: skip
        rc, out = _finish(proc, timeout=120)
        times.append(time.monotonic() - t0)
        assert rc == 3, out[-3000:]
        assert waiting in out, out[-3000:]
        assert expected in out and "raise --init-timeout" in out, out[-3000:]
        assert CHECK_FAILURE not in out and "Traceback" not in out, out[-3000:]
    assert "Check that SLURM job 4242 started all 2 tasks with the same command (the " in out
    assert "SLURM_NTASKS, SLURM_PROCID and SLURM_STEP_NODELIST tell each process its place" in out
    _row("missing coordinator / peer at start-up", 2, "clear error (exit 3)", times)


# ------------------------------------------------------------------------------------------------
# a peer killed mid-run


def _two_processes(tmp_path: Path, name: str, every: int, port: int) -> list[subprocess.Popen]:
    args = ["train", "--out", str(tmp_path), "--name", name, *TINY, "--mesh", "data=2",
            "--set", "train.steps=100000", "--set", f"train.checkpoint_every={every}",
            "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2",
            "--heartbeat-timeout", "10"]  # fmt: skip
    return [_start(*args, "--process-id", str(i)) for i in range(2)]


@pytest.mark.parametrize("victim", [1, 0], ids=["worker", "coordinator"])
def test_peer_killed_mid_run_stops_the_others_and_stays_restorable(tmp_path, victim, free_ports):
    run = tmp_path / "mp"
    procs = _two_processes(tmp_path, "mp", every=200, port=free_ports(1)[0])
    survivor = procs[1 - victim]
    _wait_for(lambda: 200 in _steps(run), survivor, "checkpoint 200")
    # Well between saves (~200 steps apart): the survivor is in a training step's collective.
    time.sleep(0.5)
    procs[victim].kill()
    t0 = time.monotonic()
    rc, out = _finish(survivor, timeout=60)
    took = time.monotonic() - t0
    _finish(procs[victim])
    if victim == 1:
        # The survivor's collective fails: our message, naming the lost process.
        assert rc == 3, out[-3000:]
        assert "process 0 of 2 lost contact with process 1 of the run" in out
        assert f"gpt train --resume {run}" in out and CHECK_FAILURE not in out
        outcome = "clear error (exit 3)"
    else:
        # Losing the coordinator, JAX's client aborts the process at once from C++: its message
        # names the leader task (we cannot intercept that abort in-process).
        assert rc in (3, -signal.SIGABRT), out[-3000:]
        assert "lost contact with process 0" in out or "leader task" in out, out[-3000:]
        outcome = "clear error (exit 3)" if rc == 3 else "JAX's abort naming the leader"
    # The last committed checkpoint stays restorable (on one process: orbax reshards).
    assert _steps(run), out[-3000:]
    rc, out = _gpt("eval", "--run", str(run))
    assert rc == 0 and out.startswith("val_loss "), out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    _row(
        f"peer killed mid-run ({['coordinator', 'worker'][victim]})",
        1,
        f"{outcome}, restorable",
        [took],
    )


def test_peer_killed_during_a_save_stops_the_other_within_the_heartbeat(tmp_path, free_ports):
    # Killed while checkpoints are being written (one every 2 steps), the survivor may be waiting
    # in orbax's barrier rather than a collective: JAX's heartbeat (10 s here) then stops it.
    run = tmp_path / "mp"
    procs = _two_processes(tmp_path, "mp", every=2, port=free_ports(1)[0])
    _wait_for(lambda: 10 in _steps(run), procs[0], "checkpoint 10")
    procs[1].kill()
    t0 = time.monotonic()
    rc, out = _finish(procs[0], timeout=60)
    took = time.monotonic() - t0
    _finish(procs[1])
    assert rc in (3, -signal.SIGABRT), out[-3000:]
    named = "lost contact with process 1" in out or "stopped sending heartbeats):\n1" in out
    assert named, out[-3000:]
    if rc == 3:  # orbax's traceback of the failed barrier is in the run's error log, not here
        assert "Traceback" not in out and f"The full error chain: {run}/errors.log" in out, out
        assert "Traceback" in (run / "errors.log").read_text()
    rc, out = _gpt("eval", "--run", str(run))
    assert rc == 0 and out.startswith("val_loss "), out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    _row("peer killed during a save (worker)", 1, "stopped, lost process named, restorable", [took])


# ------------------------------------------------------------------------------------------------
# a full disk


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir()
    cmd = ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]
    try:
        return _patience.run(cmd).returncode == 0
    except OSError:  # no mount command
        return False


@pytest.fixture
def small_tmpfs(tmp_path):
    where = tmp_path / "disk"
    if os.geteuid() != 0 or not _mount_tmpfs(where, "3m"):
        pytest.skip("needs root to mount a small tmpfs (a real full disk for orbax's writers)")
    yield where
    _patience.run(["umount", "-l", str(where)])


def test_disk_full_during_checkpoint_keeps_the_run_resumable(small_tmpfs):
    run = small_tmpfs / "run"
    t0 = time.monotonic()
    rc, out = _gpt("train", "--out", str(small_tmpfs), "--name", "run", *TINY,
                   "--set", "train.steps=200", "--set", "train.checkpoint_every=5",
                   "--set", "train.keep_checkpoints=1000")  # fmt: skip
    took = time.monotonic() - t0
    assert rc == 4, out[-3000:]
    last = _steps(run)[-1]
    assert f"gpt: error: The disk is full: writing {run}" in out, out[-3000:]
    assert " free on that filesystem" in out
    assert f"The newest complete checkpoint, step {last} in {run / 'checkpoints'}, is intact" in out
    # One message, not orbax's tracebacks and late reports around it (once 470 lines).
    assert "Traceback" not in out and "Event loop is closed" not in out, out[-3000:]
    _patience.run(["mount", "-o", "remount,size=40m", str(small_tmpfs)], check=True)
    rc, out = _gpt("train", "--resume", str(run))
    assert rc == 0, out[-3000:]
    assert f"Resumed from checkpoint step {last}" in out
    assert _steps(run)[-1] == 200
    _row("disk full during checkpoint (tmpfs)", 1, "clear error (exit 4), restorable", [took])


# A filesystem shim: every write under metrics/ fails with ENOSPC once ``FULL_AFTER`` have worked.
METRICS_SHIM = """
import builtins, errno, os, sys
real_open, real_os_open, count = builtins.open, os.open, [0]
def _full(file):
    if "/metrics/" in str(file):
        count[0] += 1
        if count[0] > int(os.environ["FULL_AFTER"]):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))
def full_open(file, mode="r", *args, **kwargs):
    if "w" in mode or "a" in mode:
        _full(file)
    return real_open(file, mode, *args, **kwargs)
def full_os_open(path, flags, *args, **kwargs):
    if flags & (os.O_WRONLY | os.O_RDWR):  # lox writes through os.open (no symlinks followed)
        _full(path)
    return real_os_open(path, flags, *args, **kwargs)
builtins.open, os.open = full_open, full_os_open
from gpt_models import main
sys.exit(main(sys.argv[1:]))
"""


def test_disk_full_during_metrics_write_keeps_the_run_resumable(tmp_path, monkeypatch):
    run = tmp_path / "run"
    monkeypatch.setenv("FULL_AFTER", "2")
    t0 = time.monotonic()
    rc, out = _finish(_start("train", "--out", str(tmp_path), "--name", "run", *TINY,
                             "--set", "train.steps=200", "--set", "train.checkpoint_every=10",
                             "--set", "log.every=1", code=METRICS_SHIM))  # fmt: skip
    took = time.monotonic() - t0
    assert rc == 4, out[-3000:]
    assert f"gpt: error: The disk is full: writing {run / 'metrics'}" in out, out[-3000:]
    assert "Traceback" not in out.split("gpt: error:")[-1]
    last = _steps(run)[-1]
    monkeypatch.delenv("FULL_AFTER")
    rc, out = _gpt("train", "--resume", str(run))
    assert rc == 0, out[-3000:]
    assert f"Resumed from checkpoint step {last}" in out and _steps(run)[-1] == 200
    # The run's error log keeps the stop: its step, the message and the chain.
    log = (run / "errors.log").read_text()
    assert re.match(r"--- \S+Z step \d+ DiskFullError: The disk is full: writing ", log), log
    assert "Traceback (most recent call last)" in log, log
    _row("disk full during metrics write (shim)", 1, "clear error (exit 4), restorable", [took])


# ------------------------------------------------------------------------------------------------
# interruptions: a double Ctrl-C, SIGTERM after the last step


def test_double_ctrl_c_waits_for_the_save_and_leaves_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    proc = _start("train", "--out", str(tmp_path), "--name", "run", *TINY,
                  "--set", "train.steps=100000", "--set", "train.checkpoint_every=50")  # fmt: skip
    _wait_for(lambda: bool(_steps(run)), proc, "a first checkpoint")
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)  # the usual impatient double Ctrl-C
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    rc, out = _finish(proc)
    assert rc == 128 + signal.SIGINT, out[-3000:]
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out[-3000:]
    assert "already stopping" in out and "checkpoint saved" in out, out[-3000:]
    stopped = int(re.search(r"after step (\d+)", out).group(1))
    assert _steps(run)[-1] == stopped and not _partial(run)
    assert not (run / "lock").exists()
    log = (run / "errors.log").read_text()  # one line: the signal and the step it stopped after
    assert re.fullmatch(
        rf"--- \S+Z step \d+ TrainingInterrupted: signal 2 at step {stopped}\n", log
    )
    _row("Ctrl-C twice, 50 ms apart", 1, f"saved step {stopped}, exit 130", [time.monotonic() - t0])


def test_sigterm_after_the_last_step_says_what_was_skipped_and_leaves_no_lock(
    tmp_path, gpt_sigterm_after_loss_plot
):
    # gpt train whose loss plot sends it SIGTERM: the signal lands after the last step, every time.
    run = tmp_path / "run"
    t0 = time.monotonic()
    rc, out = _finish(_start("train", "--out", str(tmp_path), "--name", "run", *TINY,
                             "--set", "train.steps=4", code=gpt_sigterm_after_loss_plot))  # fmt: skip
    assert rc == 128 + signal.SIGTERM, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "after the last step (4); its checkpoint is saved, but sample.txt was not" in out
    assert f"gpt sample --run {run}" in out
    assert not (run / "lock").exists() and not (run / "sample.txt").exists()
    assert (run / "loss.png").exists() and _steps(run)[-1] == 4
    took = [time.monotonic() - t0]
    _row("SIGTERM after the last step", 1, "exit 143, lock gone, skip named", took)


# ------------------------------------------------------------------------------------------------
# kill -9 in the middle of a data mixture: the resumed run equals the uninterrupted one


def _metrics_by_step(run: Path) -> dict[str, dict[str, str]]:
    import csv

    with open(run / "metrics.csv", newline="") as f:
        return {row["step"]: row for row in csv.DictReader(f)}  # a re-logged step: the later row


def test_kill_9_mid_mixture_run_resumes_bit_exact(tmp_path):
    import jax
    import numpy as np

    from gpt_models import load_run

    (tmp_path / "web.txt").write_text("the quick brown fox jumps over the lazy dog. " * 300)
    (tmp_path / "code.txt").write_text("def f(x):\n    return x * 2\n" * 300)
    sources = ", ".join(f'{{path = "{tmp_path / n}", weight = {w}}}'
                        for n, w in (("web.txt", 0.8), ("code.txt", 0.2)))  # fmt: skip
    launch = [*TINY, "--set", f"data.sources=[{sources}]", "--set", "train.steps=300",
              "--set", "train.checkpoint_every=10", "--set", "train.eval_every=100"]  # fmt: skip
    rc, out = _gpt("train", "--out", str(tmp_path), "--name", "whole", *launch)
    assert rc == 0, out[-3000:]
    run = tmp_path / "cut"
    proc = _start("train", "--out", str(tmp_path), "--name", "cut", *launch)
    _wait_for(lambda: bool(_steps(run)) and _steps(run)[-1] >= 50, proc, "a checkpoint at step 50")
    proc.send_signal(signal.SIGKILL)
    t0 = time.monotonic()
    rc, out = _finish(proc)
    took = [time.monotonic() - t0]
    assert rc == -signal.SIGKILL and _steps(run)[-1] < 300, out[-3000:]
    killed_at = _steps(run)[-1]
    rc, out = _gpt("train", "--resume", str(run))
    assert rc == 0 and f"Resumed from checkpoint step {killed_at} " in out, out[-3000:]
    (_, resumed, _), (_, whole, _) = load_run(run), load_run(tmp_path / "whole")
    jax.tree.map(np.testing.assert_array_equal, resumed, whole)
    keys = ["loss", "loss/web", "loss/code", "tokens/web", "tokens/code", "val_loss/web"]
    ours, want = _metrics_by_step(run), _metrics_by_step(tmp_path / "whole")
    assert [[ours[s][k] for k in keys] for s in want] == [[want[s][k] for k in keys] for s in want]
    _row("kill -9 mid mixture (0.8/0.2)", 1, f"resumed from {killed_at}, bit-exact", took)
