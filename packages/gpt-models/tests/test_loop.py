import io
import os
import signal

import pytest

from gpt_models import TrainingInterrupted, UsageError, load_run, train


class _SignalOnStart(io.StringIO):
    """A progress stream that sends ``signum`` to this process at the first progress line."""

    def __init__(self, signum: int) -> None:
        super().__init__()
        self.signum, self.sent = signum, False

    def write(self, text: str) -> int:
        if not self.sent and text.startswith("step"):
            self.sent = True
            os.kill(os.getpid(), self.signum)
        return super().write(text)


@pytest.fixture
def handlers():
    """Start from Python's usual handlers whatever the launcher set (a background job ignores
    SIGINT), and put the launcher's back afterwards."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    for s, h in saved.items():
        signal.signal(s, h)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_finishes_the_step_saves_and_the_run_resumes(tmp_path, handlers, make_config,
                                                            signum):  # fmt: skip
    cfg = make_config(train={"checkpoint_every": 0}, mesh={"data": -1}, log={"every": 1})
    run = tmp_path / "run"
    with pytest.raises(TrainingInterrupted) as stop:
        train(cfg, run, stream=_SignalOnStart(signum), write_sample=False)
    assert stop.value.signum == signum and stop.value.step == 1
    assert load_run(run)[2] == 1  # the checkpoint of the finished step is restorable
    assert {s: signal.getsignal(s) for s in handlers} == handlers  # handlers put back
    result = train(cfg, run, resume=True, stream=io.StringIO(), write_sample=False)
    assert result.step == cfg.train.steps and load_run(run)[2] == cfg.train.steps


def test_an_ignored_sigint_stays_ignored(tmp_path, handlers, make_config):
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cfg = make_config(train={"checkpoint_every": 0}, mesh={"data": -1}, log={"every": 1})
    result = train(cfg, tmp_path / "run", stream=_SignalOnStart(signal.SIGINT), write_sample=False)
    assert result.step == cfg.train.steps  # the SIGINT sent at step 1 did not stop the run
    assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_a_folder_with_checkpoints_is_not_overwritten(tmp_path, make_config):
    cfg = make_config(train={"steps": 2, "eval_every": 2, "checkpoint_every": 0}, mesh={"data": -1})
    run = tmp_path / "run"
    train(cfg, run, stream=io.StringIO(), write_sample=False)
    with pytest.raises(UsageError) as info:
        train(cfg, run, stream=io.StringIO(), write_sample=False)
    assert f"{run} already holds checkpoints (steps [2]). Resume it with" in str(info.value)
    assert f"`gpt train --resume {run}`, or pick another --name" in str(info.value)
    assert load_run(run)[2] == 2


# `python -c` source: `gpt train ARGS` killed outright (os._exit, as kill -9 would) right after
# its second checkpoint is saved.
_KILLED_AFTER_SECOND_CHECKPOINT = """
import os, sys
from gpt_models.internal import training_loop as loop
real, saved = loop.StepLoop.save, []
def save_then_die(self, step, state):
    real(self, step, state)
    saved.append(step)
    if len(saved) == 2:
        self.ckpt.wait()
        os._exit(9)
loop.StepLoop.save = save_then_die
from gpt_models import main
sys.exit(main(sys.argv[1:]))
"""


def test_metrics_cover_every_checkpoint_after_kill_9(tmp_path, small_args, patience):
    # The metrics were written every 20 log calls and not at checkpoints: a run killed after
    # checkpoint 4 had no metrics/ folder, and --auto-resume started a new log at step 5.
    import sys

    import lox

    args = ["train", "--out", str(tmp_path), "--name", "run", *small_args,
            "--set", "train.steps=6", "--set", "train.checkpoint_every=2", "--set", "log.every=1"]  # fmt: skip
    proc = patience.run([sys.executable, "-c", _KILLED_AFTER_SECOND_CHECKPOINT, *args], text=True)
    assert proc.returncode == 9, proc.stderr
    logs = lox.load(tmp_path / "run" / "metrics" / "run_0")
    assert logs.steps["loss"]["step"].tolist() == [0, 1, 2, 3]  # every step up to checkpoint 4
