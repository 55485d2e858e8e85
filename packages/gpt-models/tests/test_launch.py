"""A launch is checked before anything is written, the same for --dry-run, and a resumed run never
depends on its metrics: they are a record, the checkpoint is the state."""

import os
import shutil

import pandas as pd
import pytest

from gpt_models import main


@pytest.fixture(scope="module")
def finished(tmp_path_factory, small_args):
    """A 6-step run with checkpoints at steps 3 and 6, and its metrics as a table."""
    out = tmp_path_factory.mktemp("runs")
    assert main(["train", "--out", str(out), "--name", "base", *small_args]) == 0
    return out / "base", pd.read_csv(out / "base" / "metrics.csv")


def _copy(finished, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished[0], run)
    shutil.rmtree(run / "checkpoints" / "6")  # the resume retrains steps 4..6 from checkpoint 3
    return run


def _truncate_index(run):
    index = run / "metrics" / "run_0" / "lox-index.jsonl"
    text = index.read_text()
    index.write_text(text[: len(text) - 7])  # cut mid-line


DAMAGE = {
    "metrics folder deleted": (
        lambda run: shutil.rmtree(run / "metrics"),
        "there is no metrics/ folder; a new metrics log starts at step 4",
    ),
    "metrics index deleted": (
        lambda run: (run / "metrics" / "run_0" / "lox-index.jsonl").unlink(),
        "kept it as metrics-damaged/ and started a new metrics log at step 4",
    ),
    "metrics index cut mid-line": (
        _truncate_index,
        "the metrics index ends in an unfinished line; its events are dropped, and the steps "
        "after the checkpoint are logged again",
    ),
    "metrics.csv deleted": (
        lambda run: (run / "metrics.csv").unlink(),
        "there is no metrics.csv; it is written again from metrics/ when training ends",
    ),
}


@pytest.mark.parametrize("case", DAMAGE, ids=list(DAMAGE))
def test_resume_continues_bit_exact_whatever_became_of_the_metrics(
    finished, tmp_path, capsys, case
):
    run = _copy(finished, tmp_path)
    damage, said = DAMAGE[case]
    damage(run)
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0
    err = capsys.readouterr().err
    assert f"note: resuming {run}: " in err and said in err, err
    assert "Traceback" not in err
    again = pd.read_csv(run / "metrics.csv").dropna(subset=["loss"]).set_index("step").loss
    before = finished[1].dropna(subset=["loss"]).set_index("step").loss
    assert again.loc[3:5].tolist() == before.loc[3:5].tolist()  # steps 4..6, bit for bit
    if "kept it as" in said:
        assert (run / "metrics-damaged").is_dir()


def test_dry_run_refuses_what_the_launch_refuses(finished, tmp_path, capsys, small_args):
    out = finished[0].parent
    # A --name that already holds checkpoints.
    assert main(["train", "--dry-run", "--out", str(out), "--name", "base", *small_args]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'base'} already holds checkpoints (steps [3, 6])" in err
    # A --profile range past the run's steps.
    dry = ["train", "--dry-run", "--out", str(tmp_path), "--name", "p", *small_args]
    assert main([*dry, "--profile", "5:100"]) == 2
    assert "--profile 5:100 is not a range of this run's steps" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_a_resume_cannot_profile_steps_it_does_not_train(finished, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished[0], run)
    for flags in (["--profile", "2:5"], ["--dry-run", "--profile", "2:5"]):
        assert main(["train", "--resume", str(run), "--set", "train.steps=9", *flags]) == 2
        assert capsys.readouterr().err == (
            "gpt: error: --profile 2:5: this run resumes at step 6 (its newest checkpoint), so "
            "steps before it are not trained again and cannot be traced. Pick a range from step "
            "6 on, e.g. --profile 7:9.\n"
        )


def test_a_resume_into_a_read_only_subfolder_is_refused(finished, tmp_path, capsys, monkeypatch):
    run = _copy(finished, tmp_path)
    (run / "tensorboard").mkdir()
    access = os.access  # a read-only mount: access(2) says EROFS even to root
    monkeypatch.setattr(
        os, "access", lambda p, mode: "tensorboard" not in str(p) and access(p, mode)
    )
    assert main(["train", "--resume", str(run), "--set", "log.tensorboard=true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"gpt: error: --resume: {run / 'tensorboard'} is not writable (a read-only file system, "
        "or its permissions), and continuing the run writes into it."
    )


def test_a_launch_refused_before_its_first_step_leaves_no_folder(finished, tmp_path, capsys):
    source = tmp_path / "source"
    shutil.copytree(finished[0], source)
    shutil.rmtree(source / "checkpoints")  # a run folder without weights
    (source / "checkpoints").mkdir()
    ft = ["train", "--init-from", str(source), "--out", str(tmp_path), "--name", "ft"]
    assert main([*ft, "--set", "train.steps=2", "--set", "train.batch_size=8"]) == 2
    assert "checkpoint" in capsys.readouterr().err
    assert not (tmp_path / "ft").exists()
