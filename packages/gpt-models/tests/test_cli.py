import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from gpt_models import PRESETS, load_config, load_run, main


def _params(run):
    return jax.tree.map(np.asarray, load_run(run)[1])


# With model.dropout the masks are keyed by the run's rng and the step: the resume stays exact.
@pytest.mark.parametrize("dropout", ["0", "0.1"], ids=["no-dropout", "dropout"])
def test_train_eval_sample_and_bit_exact_resume(tmp_path, capsys, gpt_train, dropout):
    assert gpt_train("--set", f"model.dropout={dropout}") == 0
    run = tmp_path / "run"
    out = capsys.readouterr()
    assert "--- sample ---" in out.out and "val loss" in out.out
    # Each loss of the final line with its unit (the train loss had none beside val's nats/byte).
    assert re.search(
        r"Done in [\d.]+ min: step 6, train loss \d+\.\d{4} nats/token, val loss \d+\.\d{4} "
        r"nats/byte, ",
        out.out,
    ), out.out
    for name in ("config.toml", "loss.png", "sample.txt", "metrics/run_0"):
        assert (run / name).exists(), name
    assert sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit()) == [
        3,
        6,
    ]
    cfg = load_config(str(run / "config.toml"))
    assert cfg.train.steps == 6 and cfg.model.d_model == 32 and cfg.model.dropout == float(dropout)

    assert main(["eval", "--run", str(run)]) == 0
    assert re.fullmatch(  # the unit, the data, the windows and the step it measured
        r"val_loss \d\.\d{6} nats/byte on the validation split of <embedded corpus: "
        r"pydoc_data.topics> \(2 batch\(es\) of 8 x 32 tokens, train.eval_batches\), step 6\n",
        capsys.readouterr().out,
    )
    greedy = ["--prompt", "The ", "--max-new-tokens", "5", "--temperature", "0"]
    assert main(["sample", "--run", str(run), *greedy]) == 0
    text = capsys.readouterr().out
    assert text.startswith("The ")
    assert main(["sample", str(run), *greedy]) == 0  # the older positional form still works
    assert capsys.readouterr().out == text
    # --seed: the same seed gives the same text, another seed other text.
    sampled = ["--prompt", "The ", "--max-new-tokens", "20", "--temperature", "1"]
    seeded = []
    for seed in ("1", "1", "2"):
        assert main(["sample", "--run", str(run), *sampled, "--seed", seed]) == 0
        seeded.append(capsys.readouterr().out)
    assert seeded[0] == seeded[1] != seeded[2], seeded
    # More new tokens than the context holds: capped, as --help says, with a note.
    assert main(["sample", "--run", str(run), "--prompt", "The ", "--max-new-tokens", "100"]) == 0
    assert capsys.readouterr().err == (
        "note: --max-new-tokens 100 capped to 28: the prompt (4 tokens) and the new tokens fill "
        "the model's context, model.seq_len = 32.\n"
    )

    # Without --prompt, sample.prompt of the run's config ("The "); --set changes [sample] keys.
    sets = ["--set", "sample.max_new_tokens=5", "--set", "sample.temperature=0"]
    assert main(["sample", "--run", str(run), *sets]) == 0
    assert capsys.readouterr().out == text
    assert main(["sample", "--run", str(run), *sets, "--set", "sample.prompt=Th"]) == 0
    assert capsys.readouterr().out.startswith("Th")

    # Sampling reads only the params: without the optimizer state on disk it still works.
    shutil.rmtree(run / "checkpoints" / "6" / "train")
    assert main(["sample", "--run", str(run), *greedy]) == 0
    assert capsys.readouterr().out == text
    assert main(["eval", "--run", str(run), "--set", "train.eval_batches=1"]) == 0
    assert capsys.readouterr().out.startswith("val_loss ")

    # Resume from step 3 (as if interrupted there): the result is bit-for-bit the uninterrupted one.
    final = _params(run)
    shutil.rmtree(run / "checkpoints" / "6")
    assert main(["train", "--resume", str(run)]) == 0
    assert "Resumed from checkpoint step 3" in capsys.readouterr().err
    jax.tree.map(np.testing.assert_array_equal, _params(run), final)


@pytest.mark.parametrize(
    ("command", "key", "allowed"),
    [
        ("sample", "model.d_model=64", "only sample.* can be set here"),
        ("eval", "sample.prompt=x", "only data.* and train.eval_batches can be set here"),
    ],
)
def test_sample_and_eval_refuse_keys_fixed_by_the_run(tmp_path, capsys, command, key, allowed):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.toml").write_text("")
    assert main([command, "--run", str(tmp_path / "run"), "--set", key]) == 2
    err = capsys.readouterr().err
    assert f"gpt {command} --set {key.split('=')[0]}: {allowed}" in err
    assert f"fixed by the run it trained ({tmp_path / 'run'}/config.toml)" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "model.d_modle=3"], "Unknown config key 'model.d_modle'. Did you mean 'model.d_model'?"),
        (["--set", "train.lr=fast"], "train.lr got 'fast', expected a number"),
        (["--set", "model.norm=batchnorm"], "model.norm = 'batchnorm' must be one of 'layernorm', 'rmsnorm'"),
        (["--set", "train.optimizer=sgd"], "train.optimizer = 'sgd' must be one of 'adamw', 'muon'"),
        (["--set", "train.warmup_steps=-1"], "train.warmup_steps = -1 must be >= 0"),
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
        (["--set", "model.d_model"], "--set expects KEY=VALUE, got 'model.d_model'"),
        (["--init-from", "/runs/a", "--set", "init.source=/runs/b"],  # it started from B
         "gpt train got --init-from /runs/a and --set init.source=/runs/b: both name the weights "
         "to start from. Pass one of them"),
    ],
)  # fmt: skip
def test_user_errors_exit_2_with_a_message(tmp_path, capsys, small_args, args, message):
    assert main(["train", "--out", str(tmp_path), *small_args, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path.parent / "escape").exists()
    assert not any(tmp_path.iterdir())  # nothing was written: no run folder


def test_short_data_file(tmp_path, capsys, gpt_train):
    data = tmp_path / "tiny.txt"
    data.write_text("abc" * 20)
    assert gpt_train("--set", f"data.path={data}") == 2
    err = capsys.readouterr().err
    assert f"Data {data} is too short: its validation split has 6 tokens" in err
    assert "model.seq_len = 32 needs at least" in err and "--set model.seq_len=" in err
    assert "Traceback" not in err


def test_missing_data_file_lists_what_data_path_accepts(tmp_path, capsys, gpt_train):
    assert gpt_train("--set", f"data.path={tmp_path / 'nope.txt'}") == 2
    err = capsys.readouterr().err
    assert f"Data path {tmp_path / 'nope.txt'} does not exist" in err
    assert "a text file, a folder of text files, a nanoGPT uint16 .bin file" in err
    assert 'data.path="" for the embedded corpus' in err and "Traceback" not in err


def test_impossible_mesh_lists_shapes_that_fit(capsys, gpt_train):
    assert gpt_train("--set", "mesh.data=3") == 2
    err = capsys.readouterr().err
    n = jax.device_count()
    assert f"needs 3 devices, but {n} are available (cpu)" in err and "Shapes that fit:" in err
    assert "Traceback" not in err


def test_resume_needs_a_run_folder(tmp_path, capsys):
    assert main(["train", "--resume", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"--resume {tmp_path}: not a run folder (has no config.toml)" in err
    assert "e.g. --resume runs/<name>" in err and "Traceback" not in err
    (tmp_path / "config.toml").write_text("")
    assert main(["train", "--resume", str(tmp_path), "--config", "tiny"]) == 2
    err = capsys.readouterr().err
    assert "--resume takes the run's own config.toml; do not pass --config with it" in err


@pytest.mark.parametrize("command", [["eval"], ["sample", "--prompt", "hi"]])
def test_sample_and_eval_name_a_missing_run_folder(tmp_path, capsys, command):
    (tmp_path / "tiny-1").mkdir()
    (tmp_path / "tiny-1" / "config.toml").write_text("")
    assert main([*command, "--run", str(tmp_path / "tiny-2")]) == 2
    err = capsys.readouterr().err
    assert f"--run {tmp_path / 'tiny-2'}: not a run folder (does not exist)" in err
    assert f"run folders in {tmp_path}: 'tiny-1'" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [["eval"], ["sample", "--prompt", "hi"]])
def test_sample_and_eval_need_exactly_one_run_folder(capsys, command):
    assert main(command) == 2
    assert (
        f"gpt {command[0]} needs the run folder to read: none was given" in capsys.readouterr().err
    )
    assert main([*command, "--run", "runs/a", "runs/b"]) == 2
    err = capsys.readouterr().err
    assert "got two run folders, --run runs/a and runs/b" in err and "Traceback" not in err


def test_nan_after_a_checkpoint_keeps_the_last_good_one(tmp_path, capsys, gpt_train):
    # lr is 0 in the first step (warmup), then huge: step 2's update blows the params up.
    lr = ["--set", "train.lr=1e30", "--set", "train.grad_clip=0", "--set", "train.warmup_steps=5"]
    every = ["--set", "train.checkpoint_every=1", "--set", "train.steps=8"]
    assert gpt_train(*lr, *every) == 1
    err = capsys.readouterr().err
    saved = load_run(tmp_path / "run")[2]
    assert f"the last good checkpoint (step {saved}) is intact" in err and saved >= 1
    assert "Training diverged: the loss is " in err and f"at step {saved + 1}." in err


def test_nan_loss_stops_with_a_clear_message(capsys, gpt_train):
    assert gpt_train("--set", "train.lr=1e30", "--set", "train.grad_clip=0") == 1
    err = capsys.readouterr().err
    assert "Training diverged: the loss is nan" in err and "Try --set train.lr=" in err


def test_a_run_shorter_than_its_warmup_trains_with_a_note(tmp_path, capsys, gpt_train):
    # The tiny preset warms up for 30 steps; a 5-step run cuts that to 10% of the run, and says so.
    assert gpt_train("--set", "train.warmup_steps=30", "--set", "train.steps=5") == 0
    err = capsys.readouterr().err
    assert (
        "note: train.warmup_steps = 30 does not fit in train.steps = 5; this run warms up for 0 "
        in err
    )
    assert load_config(str(tmp_path / "run" / "config.toml")).train.warmup_steps == 0
    assert load_run(tmp_path / "run")[2] == 5


def test_argparse_errors_and_module_entry_point(patience):
    proc = patience.run([sys.executable, "-m", "gpt_models", "trian"], text=True)
    assert proc.returncode == 2
    assert "invalid choice: 'trian'" in proc.stderr and "Traceback" not in proc.stderr


def test_version_names_the_stack_and_jax(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"gpt-models {version('gpt-models')} (") and out.count("\n") == 1, out
    for name in ("core-primitives", "lox-logging", "blox-params", "paramspec-sharding", "jax"):
        assert f"{name} {version(name)}" in out, out
    assert f"Python {sys.version.split()[0]})" in out


def test_train_help_points_to_config_show(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "every config key with its value and meaning: gpt config show" in out
    assert f"a preset ({', '.join(PRESETS)}) or a TOML file" in out and "llama-tiny" in out


@pytest.mark.parametrize("flag", [["--wandb", "offline"], ["--set", "log.wandb=online"]])
def test_wandb_without_the_extra_exits_2_before_creating_the_run(tmp_path, capsys, monkeypatch,
                                                                 gpt_train, flag):  # fmt: skip
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    assert gpt_train(*flag) == 2
    err = capsys.readouterr().err
    assert "needs the wandb package, which is not installed" in err
    assert "pip install 'gpt-models[wandb]'" in err and "lox-logging" not in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


def test_wandb_flag_selects_a_wandb_logger_in_the_run_folder(tmp_path, monkeypatch, gpt_train):
    import lox

    class Stop(Exception):
        pass

    made = []

    def fake_wandb_logger(**kwargs):
        made.append(kwargs)
        raise Stop  # the logger's arguments are all this test needs: stop before training

    monkeypatch.setattr(lox, "WandbLogger", fake_wandb_logger)
    with pytest.raises(Stop):
        gpt_train("--wandb", "offline")
    assert len(made) == 1 and made[0]["mode"] == "offline" and made[0]["name"] == "run"
    assert made[0]["dir"] == str(tmp_path / "run")  # wandb files stay in the run folder
    assert made[0]["config"]["train"]["steps"] == 6


_COMMANDS = ("train", "prepare", "sample", "eval", "import", "export", "config")


# The front door answers without JAX: importing it takes seconds, and --help, --version and every
# command's --help need none of it (the public names load when first used).
@pytest.mark.parametrize(
    "argv",
    [["--help"], ["--version"], *([c, "--help"] for c in _COMMANDS)],
    ids=lambda a: " ".join(a),
)
def test_help_and_version_do_not_import_jax(argv):
    code = (
        "import sys\nfrom gpt_models import main\ntry:\n    main(sys.argv[1:])\n"
        "except SystemExit as e:\n    assert e.code in (0, None), e.code\n"
        "assert 'jax' not in sys.modules, sorted(m for m in sys.modules if m.startswith('jax'))[:5]"
    )
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), "printed nothing"


def test_prepare_loads_no_jax(tmp_path):
    # Each command imports its own module only: gpt prepare needs none of the training code.
    for i in range(40):
        (tmp_path / "docs" / f"{i}.txt").parent.mkdir(exist_ok=True)
        (tmp_path / "docs" / f"{i}.txt").write_text(f"document {i}\n")
    code = (
        "import sys\nfrom gpt_models import main\n"
        "assert main(['prepare', sys.argv[1], '--out', sys.argv[2], '--val-fraction', '0.2']) == 0\n"
        "assert 'jax' not in sys.modules, sorted(m for m in sys.modules if m.startswith('jax'))[:5]"
    )
    args = [str(tmp_path / "docs"), str(tmp_path / "store")]
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "store").is_dir()


def test_public_names_load_on_first_use():
    code = (
        "import sys, gpt_models\nassert 'jax' not in sys.modules\n"
        "assert sorted(dir(gpt_models)) == sorted(gpt_models.__all__)\n"
        "gpt_models.train\nassert 'jax' in sys.modules\n"
        "assert gpt_models.train is __import__('gpt_models').train\n"
        "try:\n    gpt_models.trian\nexcept AttributeError as e:\n    print(e)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "module 'gpt_models' has no attribute 'trian'" in done.stdout
