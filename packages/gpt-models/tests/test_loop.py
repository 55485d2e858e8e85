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
