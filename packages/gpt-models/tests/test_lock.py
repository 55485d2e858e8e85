"""A run folder is trained in by one live process at a time (``train`` holds a lock on it)."""

import dataclasses
import json
import os
import socket
import subprocess
import sys

import pytest

from gpt_models import RunInUseError, main, train

# A live process holding the run's lock the way `gpt train` does, until its stdin closes.
HOLDER = """
import fcntl, json, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
job = sys.argv[2] if len(sys.argv) > 2 else None
os.write(fd, json.dumps({"pid": os.getpid(), "hostname": "node7", "started": "then",
                         "command": "gpt train --name x", "job": job}).encode())
print("locked", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def small(small):
    """Two steps over all 8 fake devices: enough to take, hold and release the lock."""
    return dataclasses.replace(
        small,
        mesh=dataclasses.replace(small.mesh, data=-1),
        train=dataclasses.replace(small.train, steps=2, checkpoint_every=0),
    )


@pytest.fixture(params=[None])
def held_run(tmp_path, patience, request):
    run = tmp_path / "run"
    run.mkdir()
    job = [request.param] if request.param else []
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run / "lock"), *job],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline() == "locked\n"
    yield run, holder.pid
    holder.stdin.close()
    patience.communicate([holder])


def test_train_refuses_a_run_folder_held_by_a_live_process(held_run, small):
    run, pid = held_run
    with pytest.raises(RunInUseError) as info:
        train(small, run)
    message = str(info.value)
    assert message.startswith(
        f"Run folder {run} is in use: pid {pid} on host node7 (started then: gpt train --name x)"
    )
    assert f"then `gpt train --resume {run}`; or start a new run with another --name" in message
    assert not (run / "config.toml").exists()  # nothing of the live run was touched


def test_a_live_run_that_already_checkpointed_is_refused_as_in_use(held_run, small):
    # A second launch arrives after the first saved a checkpoint: "in use" is the reason to give,
    # not "already holds checkpoints, resume it" (resuming a live run is refused too).
    run, pid = held_run
    (run / "checkpoints" / "5").mkdir(parents=True)
    for resume in (False, True):
        with pytest.raises(RunInUseError, match=f"is in use: pid {pid} on host node7"):
            train(small, run, resume=resume)


def test_cli_exits_2_for_a_live_run(held_run, capsys):
    run, pid = held_run
    assert main(["train", "--out", str(run.parent), "--name", "run"]) == 2
    err = capsys.readouterr().err
    assert f"gpt: error: Run folder {run} is in use: pid {pid}" in err and "Traceback" not in err


@pytest.mark.parametrize("held_run", ["10.0.0.9:1234 (2 processes)"], indirect=True)
def test_a_process_of_another_job_is_refused_and_one_of_the_same_job_joins(held_run):
    # A process > 0 takes no lock: it joins the run its job's process 0 holds. Held by another
    # job (a two-process job at 10.0.0.9 here; this single process's job is None), it is refused.
    from gpt_models.internal import runs_lock

    run, pid = held_run
    with pytest.raises(RunInUseError, match=f"Run folder {run} is in use: pid {pid} on host node7"):
        runs_lock.check_joinable(run)
    lock = json.loads((run / "lock").read_text())
    (run.parent / "other").mkdir()
    (run.parent / "other" / "lock").write_text(json.dumps({**lock, "job": None}))
    runs_lock.check_joinable(run.parent / "other")  # its own process 0 (not alive here): joins
    runs_lock.check_joinable(run.parent / "nothing")  # no folder yet: process 0 makes it


def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_notice(tmp_path, small, capsys):
    run = tmp_path / "run"
    run.mkdir()
    # What a kill -9 leaves: the file with its holder's details, but no process holding it.
    dead = {"pid": 999999, "hostname": socket.gethostname(), "started": "x", "command": "gpt"}
    (run / "lock").write_text(json.dumps(dead))
    result = train(small, run, stream=sys.stderr, write_sample=False)
    assert result.step == small.train.steps
    err = capsys.readouterr().err
    assert f"note: {run} was last held by pid 999999 on host {socket.gethostname()}" in err
    assert "which is no longer running; taking it over." in err
    assert not (run / "lock").exists()  # a clean exit removes it


def test_the_lock_names_this_process_while_training(tmp_path, small):
    seen = {}

    class Peek:
        def write(self, text):
            if "lock" not in seen and (tmp_path / "run" / "lock").exists():
                seen["lock"] = json.loads((tmp_path / "run" / "lock").read_text())

        def flush(self):
            pass

    train(small, tmp_path / "run", stream=Peek(), write_sample=False)
    assert seen["lock"]["pid"] == os.getpid()
    assert seen["lock"]["hostname"] == socket.gethostname()
    assert {"started", "command"} <= set(seen["lock"])


@pytest.mark.parametrize("flag", ["--init-timeout", "--heartbeat-timeout"])
@pytest.mark.parametrize("value", ["0", "-5", "soon", "inf"])
def test_timeouts_must_be_positive_seconds(capsys, flag, value):
    with pytest.raises(SystemExit) as info:
        main(["train", flag, value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: expected a positive number of seconds, got {value!r}" in err
