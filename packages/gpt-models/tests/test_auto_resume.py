"""`gpt train --auto-resume --name NAME`: start the run, then continue it on re-run."""

from gpt_models import main


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
