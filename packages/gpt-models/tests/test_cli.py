import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from gpt_models import _config
from gpt_models._cli import main
from gpt_models._loop import load_run

# mesh.data=-1: data-parallel over every device present (the 8 fake CPU devices by default).
SMALL = [
    "--set", "model.seq_len=32", "--set", "model.d_model=32", "--set", "model.n_layers=2",
    "--set", "model.n_heads=2", "--set", "train.steps=6", "--set", "train.batch_size=8",
    "--set", "train.warmup_steps=1", "--set", "train.eval_every=3", "--set", "train.eval_batches=2",
    "--set", "train.checkpoint_every=3", "--set", "sample.max_new_tokens=8", "--set", "mesh.data=-1",
]  # fmt: skip


def _train(tmp_path, *extra):
    return main(["train", "--out", str(tmp_path), "--name", "run", *SMALL, *extra])


def _params(run):
    return jax.tree.map(np.asarray, load_run(run)[1])


def test_train_eval_sample_and_bit_exact_resume(tmp_path, capsys):
    assert _train(tmp_path) == 0
    run = tmp_path / "run"
    out = capsys.readouterr()
    assert "--- sample ---" in out.out and "val loss" in out.out
    for name in ("config.toml", "loss.png", "sample.txt", "metrics/run_0"):
        assert (run / name).exists(), name
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()) == [
        3,
        6,
    ]
    cfg = _config.load_config(str(run / "config.toml"))
    assert cfg.train.steps == 6 and cfg.model.d_model == 32

    assert main(["eval", "--run", str(run)]) == 0
    assert capsys.readouterr().out.startswith("val_loss ")
    greedy = ["--prompt", "The ", "--max-new-tokens", "5", "--temperature", "0"]
    assert main(["sample", "--run", str(run), *greedy]) == 0
    text = capsys.readouterr().out
    assert text.startswith("The ")
    assert main(["sample", str(run), *greedy]) == 0  # the older positional form still works
    assert capsys.readouterr().out == text
    assert main(["sample", "--run", str(run), "--prompt", "The ", "--max-new-tokens", "100"]) == 2
    assert "exceeds the model's context, model.seq_len = 32" in capsys.readouterr().err

    # Sampling reads only the params: without the optimizer state on disk it still works.
    shutil.rmtree(run / "checkpoints" / "6" / "train")
    assert main(["sample", "--run", str(run), *greedy]) == 0
    assert capsys.readouterr().out == text
    assert main(["eval", "--run", str(run)]) == 0

    # Resume from step 3 (as if interrupted there): the result is bit-for-bit the uninterrupted one.
    final = _params(run)
    shutil.rmtree(run / "checkpoints" / "6")
    assert main(["train", "--resume", str(run)]) == 0
    assert "Resumed from checkpoint step 3" in capsys.readouterr().err
    jax.tree.map(np.testing.assert_array_equal, _params(run), final)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "model.d_modle=3"], "Unknown config key 'model.d_modle'. Did you mean 'model.d_model'?"),
        (["--set", "train.lr=fast"], "train.lr got 'fast', expected a number"),
        (["--set", "model.norm=batchnorm"], "expected one of 'layernorm', 'rmsnorm'"),
        (["--set", "train.optimizer=sgd"], "train.optimizer got 'sgd', expected one of 'adamw', 'muon'"),
        (["--config", "gpt3"], "Unknown preset 'gpt3'"),
        (["--set", "data.path=/nonexistent/data.txt"], "Data path /nonexistent/data.txt does not exist"),
        (["--set", "mesh.data=3"], "Impossible mesh: mesh.data=3, mesh.fsdp=1, mesh.tensor=1"),
        pytest.param(
            ["--mesh", "data=4,tensor=2", "--set", "model.n_heads=3", "--set", "model.d_model=48"],
            "Impossible mesh for this model",
            marks=pytest.mark.min_devices(8, why="a data=4 x tensor=2 mesh that fits the devices"),
        ),
        (["--mesh", "dat=2"], "--mesh expects comma-separated AXIS=SIZE"),
        (["--name", "../escape"], "Run name '../escape' is not a plain folder name"),
    ],
)  # fmt: skip
def test_user_errors_exit_2_with_a_message(tmp_path, capsys, args, message):
    assert main(["train", "--out", str(tmp_path), *SMALL, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path.parent / "escape").exists()


def test_short_data_file(tmp_path, capsys):
    data = tmp_path / "tiny.txt"
    data.write_text("abc" * 20)
    assert _train(tmp_path, "--set", f"data.path={data}") == 2
    err = capsys.readouterr().err
    assert f"Data {data} is too short: its validation split has 6 tokens" in err
    assert "model.seq_len = 32 needs at least" in err and "--set model.seq_len=" in err
    assert "Traceback" not in err


def test_missing_data_file_lists_what_data_path_accepts(tmp_path, capsys):
    assert _train(tmp_path, "--set", f"data.path={tmp_path / 'nope.txt'}") == 2
    err = capsys.readouterr().err
    assert f"Data path {tmp_path / 'nope.txt'} does not exist" in err
    assert "a text file, a folder of text files, a nanoGPT uint16 .bin file" in err
    assert 'data.path="" for the embedded corpus' in err and "Traceback" not in err


def test_impossible_mesh_lists_shapes_that_fit(tmp_path, capsys):
    assert _train(tmp_path, "--set", "mesh.data=3") == 2
    err = capsys.readouterr().err
    n = jax.device_count()
    assert f"needs 3 devices, but {n} are available (cpu)" in err and "Shapes that fit:" in err
    assert "Traceback" not in err


def test_resume_needs_a_run_folder(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--resume {tmp_path}: not a run folder (has no config.toml)" in err
    assert "e.g. --resume runs/<name>" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["eval"], ["sample", "--prompt", "hi"]])
def test_sample_and_eval_name_a_missing_run_folder(tmp_path, capsys, command):
    (tmp_path / "tiny-1").mkdir()
    (tmp_path / "tiny-1" / "config.toml").write_text("")
    assert main([*command, "--run", str(tmp_path / "tiny-2")]) == 2
    err = capsys.readouterr().err
    assert f"--run {tmp_path / 'tiny-2'}: not a run folder (does not exist)" in err
    assert f"run folders in {tmp_path}: 'tiny-1'" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["eval"], ["sample", "--prompt", "hi"]])
def test_sample_and_eval_need_exactly_one_run_folder(tmp_path, capsys, command):
    assert main(command) == 2
    assert (
        f"gpt {command[0]} needs the run folder to read: none was given" in capsys.readouterr().err
    )
    assert main([*command, "--run", "runs/a", "runs/b"]) == 2
    err = capsys.readouterr().err
    assert "got two run folders, --run runs/a and runs/b" in err and "Traceback" not in err


def test_nan_after_a_checkpoint_keeps_the_last_good_one(tmp_path, capsys):
    # lr is 0 in the first step (warmup), then huge: step 2's update blows the params up.
    lr = ["--set", "train.lr=1e30", "--set", "train.grad_clip=0", "--set", "train.warmup_steps=5"]
    every = ["--set", "train.checkpoint_every=1", "--set", "train.steps=8"]
    assert _train(tmp_path, *lr, *every) == 1
    err = capsys.readouterr().err
    saved = load_run(tmp_path / "run")[2]
    assert f"the last good checkpoint (step {saved}) is intact" in err and saved >= 1
    assert "Training diverged: the loss is " in err and f"at step {saved + 1}." in err


def test_nan_loss_stops_with_a_clear_message(tmp_path, capsys):
    assert _train(tmp_path, "--set", "train.lr=1e30", "--set", "train.grad_clip=0") == 1
    err = capsys.readouterr().err
    assert "Training diverged: the loss is nan" in err and "Try --set train.lr=" in err


def test_argparse_errors_and_module_entry_point():
    proc = subprocess.run(
        [sys.executable, "-m", "gpt_models", "trian"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "invalid choice: 'trian'" in proc.stderr and "Traceback" not in proc.stderr


def test_wandb_flag_selects_a_local_wandb_logger(tmp_path):
    import lox
    from gpt_models._loop import _loggers

    cfg = _config.apply_overrides(_config.PRESETS["tiny"], {"log.wandb": "offline"})
    logger = _loggers(cfg, tmp_path)
    wandb = [x for x in logger.loggers if isinstance(x, lox.WandbLogger)]
    assert len(wandb) == 1 and wandb[0].init_kwargs["mode"] == "offline"
    assert wandb[0].init_kwargs["dir"] == str(tmp_path)  # wandb files stay in the run folder
    default = _loggers(_config.PRESETS["tiny"], tmp_path)
    assert not any(isinstance(x, lox.WandbLogger) for x in default.loggers)
