"""`gpt train --auto-resume --name NAME`: start the run, then continue it on re-run."""

import asyncio
import gc
import shutil
import sys
from pathlib import Path

import jax
import pytest

from gpt_models import (
    Checkpointer,
    CheckpointWarning,
    abstract_state,
    load_config,
    main,
    make_mesh,
    make_optimizer,
    to_items,
)


def test_the_same_command_starts_then_continues(tmp_path, small_args, capsys):
    cmd = ["train", "--auto-resume", "--out", str(tmp_path), "--name", "job", *small_args]
    first = [*cmd, "--set", "train.steps=2", "--set", "train.checkpoint_every=2"]
    assert main(first) == 0
    assert "has no checkpoint yet; starting the run" in capsys.readouterr().err
    assert main(first) == 0  # requeued after it finished: continues from step 2 (nothing to do)
    err = capsys.readouterr().err
    assert "continuing from its newest checkpoint (step 2)" in err
    assert "Resumed from checkpoint step 2" in err


def test_a_different_config_is_refused_with_the_keys_that_differ(tmp_path, small_args, capsys):
    cmd = ["train", "--auto-resume", "--out", str(tmp_path), "--name", "job", *small_args]
    assert main([*cmd, "--set", "train.steps=2", "--set", "train.checkpoint_every=2"]) == 0
    before = (tmp_path / "job" / "config.toml").read_text()
    capsys.readouterr()
    status = main([*cmd, "--set", "train.steps=2", "--set", "train.checkpoint_every=2",
                   "--set", "train.lr=0.01"])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    assert "holds a run with a different config" in err and "1 key(s) differ" in err
    assert "train.lr: run has 0.003, this command gives 0.01" in err
    assert f"gpt train --resume {tmp_path / 'job'} --set KEY=VALUE" in err
    assert (tmp_path / "job" / "config.toml").read_text() == before


def test_auto_resume_needs_a_name(tmp_path, small_args, capsys):
    assert main(["train", "--auto-resume", "--out", str(tmp_path), *small_args]) == 2
    err = capsys.readouterr().err
    assert "--auto-resume needs --name NAME" in err and list(tmp_path.iterdir()) == []


def _truncate_largest_files(step_dir: Path) -> None:
    # The arrays' data files, cut in half; their metadata stays readable, so orbax starts one read
    # per array and the first read that fails leaves the others in flight.
    files = sorted((f for f in step_dir.rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)
    for f in files[-2:]:
        f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def test_falling_back_from_a_truncated_checkpoint_prints_no_traceback(
    tmp_path, small_args, capfd, monkeypatch
):
    # Orbax's reads left in flight by a failed restore used to be finalized whenever the garbage
    # collector ran, printing "Exception ignored in: <coroutine object
    # _read_array_index_and_device_put ...>" tracebacks in some runs. Each fallback below is
    # followed by a collection, so any such report would show in stderr at once.
    unraisable = []

    def hook(report):
        unraisable.append(report)
        sys.__unraisablehook__(report)  # printed as Python prints it, into the captured stderr

    monkeypatch.setattr(sys, "unraisablehook", hook)
    cmd = ["train", "--auto-resume", "--out", str(tmp_path), "--name", "job", *small_args,
           "--set", "train.steps=2", "--set", "train.checkpoint_every=1"]  # fmt: skip
    assert main(cmd) == 0
    run = tmp_path / "job"
    cfg = load_config(str(run / "config.toml"))
    targets = to_items(
        abstract_state(cfg, make_optimizer(cfg.train), make_mesh(cfg.mesh, jax.devices()[:1]))
    )
    pristine = tmp_path / "pristine"
    shutil.copytree(run, pristine)
    capfd.readouterr()
    for _ in range(19):  # the fallback auto-resume takes, on the run's own training state
        shutil.rmtree(run)
        shutil.copytree(pristine, run)
        _truncate_largest_files(run / "checkpoints" / "2")
        ckpt = Checkpointer(run / "checkpoints")
        with pytest.warns(CheckpointWarning, match="Checkpoint step 2 .* could not be restored"):
            _, _, step = ckpt.restore(targets)
        ckpt.close()
        assert step == 1
        gc.collect()
    shutil.rmtree(run)
    shutil.copytree(pristine, run)
    _truncate_largest_files(run / "checkpoints" / "2")
    assert main(cmd) == 0  # the 20th: gpt train --auto-resume itself
    gc.collect()
    err = capfd.readouterr().err
    assert "continuing from its newest checkpoint (step 2)" in err
    assert "gpt: warning: Checkpoint step 2 " in err and "Resumed from checkpoint step 1" in err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert not [u.object for u in unraisable if asyncio.iscoroutine(u.object)]
