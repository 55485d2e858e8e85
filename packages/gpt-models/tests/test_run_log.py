"""The run's error log: a failed run leaves a dated entry in ``RUN/errors.log`` with
its step and message (a crash: its traceback too), written only inside the run folder."""

import io
import re

import pytest

from gpt_models import Checkpointer, train


def _crash() -> RuntimeError:
    return RuntimeError("INTERNAL: the device fell over")


def test_a_crash_in_the_loop_is_logged_with_its_step_and_traceback(tmp_path, make_config,
                                                                   fail_train_step):  # fmt: skip
    fail_train_step(_crash(), at_call=3)
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="the device fell over"):
        train(make_config(mesh={"data": -1}), run, stream=io.StringIO(), write_sample=False)
    log = (run / "errors.log").read_text()
    header = log.splitlines()[0]
    assert re.fullmatch(
        r"--- \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ step 3 RuntimeError: INTERNAL: the device fell over",
        header,
    ), header
    assert "Traceback (most recent call last)" in log and "crashing" in log


def test_a_diverged_run_is_logged_without_a_traceback(tmp_path, capsys, gpt_train):
    assert gpt_train("--set", "train.lr=1e30", "--set", "train.grad_clip=0") == 1
    log = (tmp_path / "run" / "errors.log").read_text()
    assert re.match(r"--- \S+Z step \d+ TrainingDivergedError: Training diverged: the loss is", log)
    assert "Traceback" not in log and len(log.splitlines()) == 1


def test_the_log_never_follows_a_link_out_of_the_run(tmp_path, make_config, before_run_lock,
                                                     fail_train_step):  # fmt: skip
    # The run folder is created by train; a link planted as its errors.log before the crash.
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    run = tmp_path / "run"
    before_run_lock(lambda folder: (folder / "errors.log").symlink_to(victim))
    fail_train_step(_crash(), at_call=1)
    with pytest.raises(RuntimeError, match="the device fell over"):
        train(make_config(mesh={"data": -1}), run, stream=io.StringIO(), write_sample=False)
    assert victim.read_text() == "mine\n" and (run / "errors.log").is_symlink()


def test_what_orbax_logs_while_failing_goes_to_the_log_not_the_terminal(tmp_path, make_config,
                                                                         monkeypatch, caplog):  # fmt: skip
    # As when a peer dies during a save: orbax logs the failed barrier with its traceback, then
    # raises it from the save; the terminal gets one message, the log gets both.
    import logging

    def failing_save(self, step, *args, **kwargs):
        logging.getLogger("absl").error("Save Finalize thread failed.", exc_info=OSError("gone"))
        raise RuntimeError("INTERNAL: Barrier failed")

    monkeypatch.setattr(Checkpointer, "save", failing_save)
    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="Barrier failed"):
        train(make_config(mesh={"data": -1}), run, stream=io.StringIO(), write_sample=False)
    log = (run / "errors.log").read_text()
    assert "While stopping, the libraries logged:\nERROR absl: Save Finalize thread failed." in log
    assert "OSError: gone" in log
    assert not [r for r in caplog.records if "Save Finalize" in r.getMessage()]
