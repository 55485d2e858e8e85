"""Bad input to ``gpt``, one case per test: exit status 2, a message naming the fix, no
traceback, and no file of the user's or of an existing run changed.

The commands run in-process through ``gpt_models.main``; the cases that need a signal or a kill are
in integration_tests/test_faults.py.
"""

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpt_models import main

TINY = [
    "--set", "model.seq_len=32", "--set", "model.d_model=32", "--set", "model.n_layers=1",
    "--set", "model.n_heads=2", "--set", "train.steps=2", "--set", "train.batch_size=8",
    "--set", "train.warmup_steps=1", "--set", "train.eval_every=2", "--set", "train.eval_batches=1",
    "--set", "train.checkpoint_every=1", "--set", "sample.max_new_tokens=4", "--set", "mesh.data=-1",
]  # fmt: skip


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished two-step run (checkpoints at steps 1 and 2), built once; tests copy it."""
    out = tmp_path_factory.mktemp("finished")
    assert main(["train", "--out", str(out), "--name", "base", *TINY]) == 0
    return out / "base"


@pytest.fixture
def run_copy(finished_run, tmp_path):
    run = tmp_path / "runs" / "base"
    shutil.copytree(finished_run, run, symlinks=True)
    return run


def _refused(capsys, argv, *needles):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


# --- run folders: ours only with our marker, untouched on a refused launch, no links ---------------


def test_train_refuses_a_folder_of_the_users_own_files(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    for name in ("sample.txt", "loss.png", "notes.txt"):
        (mine / name).write_text(f"my {name}")
    before = _snapshot(mine)
    _refused(capsys, ["train", "--out", str(tmp_path), "--name", "mine", *TINY],
             f"{mine} is an existing folder that is not a gpt run", "pick a new --name")  # fmt: skip
    assert _snapshot(mine) == before


def test_refused_launch_into_a_finished_run_leaves_its_config_toml(run_copy, capsys):
    before = _snapshot(run_copy)
    _refused(capsys, ["train", "--out", str(run_copy.parent), "--name", "base", *TINY,
                      "--set", "model.d_model=64"], "already holds checkpoints", "--resume")  # fmt: skip
    assert _snapshot(run_copy) == before


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        (["--set", "model.d_model=64"],
         ("--set model.d_model=64: a resumed run keeps its architecture, and this run has "
          "model.d_model = 32", "train the other architecture as a new run with --name")),
        (["--set", "train.steps=1"],
         ("is at step 2 (its newest checkpoint), past train.steps = 1; a resumed run cannot go "
          "back", "--set train.steps=N (N > 2)")),
    ],
)  # fmt: skip
def test_resume_refuses_what_the_checkpoint_cannot_continue(run_copy, capsys, flags, needles):
    # Refused before config.toml is rewritten: the run keeps the config it trained with.
    before = _snapshot(run_copy)
    _refused(capsys, ["train", "--resume", str(run_copy), *flags], *needles)
    assert _snapshot(run_copy) == before


def test_resuming_a_complete_run_says_nothing_was_trained(run_copy, capsys):
    # Re-running the command of a finished run (a requeued job) rewrites the run's end products.
    assert main(["train", "--resume", str(run_copy), "--set", "model.attention=xla"]) == 0
    out = capsys.readouterr().out
    assert "Nothing to train: the run was at step 2 = train.steps already" in out, out
    assert "train loss nan" not in out and f"--resume {run_copy} --set train.steps=N" in out


def test_a_lock_that_is_a_symlink_is_refused_and_its_target_untouched(run_copy, capsys):
    victim = run_copy.parent / "victim.txt"
    victim.write_text("precious")
    (run_copy / "lock").symlink_to("../victim.txt")
    _refused(capsys, ["train", "--resume", str(run_copy)], "lock", "is a symbolic link")
    assert victim.read_text() == "precious"


def test_symlinked_metrics_chunks_are_refused(run_copy, tmp_path, capsys):
    chunks = run_copy / "metrics" / "run_0" / "chunks"
    elsewhere = tmp_path / "elsewhere"
    shutil.move(chunks, elsewhere)
    chunks.symlink_to(elsewhere)
    before = _snapshot(elsewhere)
    _refused(capsys, ["train", "--resume", str(run_copy)], str(chunks), "symbolic link")
    assert _snapshot(elsewhere) == before


def test_symlinked_checkpoints_are_refused(run_copy, tmp_path, capsys):
    shutil.move(run_copy / "checkpoints", tmp_path / "ckpts")
    (run_copy / "checkpoints").symlink_to(tmp_path / "ckpts")
    _refused(capsys, ["train", "--resume", str(run_copy)], "checkpoints", "symbolic link")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to a read-only folder")
def test_a_read_only_run_folder_is_refused(run_copy, capsys):
    before = _snapshot(run_copy)
    run_copy.chmod(0o555)
    try:
        _refused(capsys, ["train", "--resume", str(run_copy)], "not writable", "chmod u+w")
    finally:
        run_copy.chmod(0o755)
    assert _snapshot(run_copy) == before


def test_a_garbage_metrics_index_is_set_aside_only_when_the_resume_starts(run_copy, capsys):
    (run_copy / "metrics" / "run_0" / "lox-index.jsonl").write_text("not json\n")
    before = _snapshot(run_copy)
    # A refused launch (train.steps below the newest checkpoint) leaves the run as it was.
    _refused(
        capsys, ["train", "--resume", str(run_copy), "--set", "train.steps=1"], "past train.steps"
    )
    assert _snapshot(run_copy) == before
    # The metrics are a record, not state: the resume goes on with a new log and says so.
    assert main(["train", "--resume", str(run_copy), "--set", "train.steps=8"]) == 0
    err = capsys.readouterr().err
    assert "metrics/ cannot be read (" in err and "lox-index.jsonl" in err, err
    assert "kept it as metrics-damaged/ and started a new metrics log" in err, err
    assert (run_copy / "metrics-damaged" / "run_0" / "lox-index.jsonl").read_text() == "not json\n"


# --- flags -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flag", ["--resume", "--config", "--out", "--coordinator", "--mesh", "--init-from"]
)
def test_an_empty_flag_is_refused(flag, tmp_path, capsys):
    _refused(capsys, ["train", "--out", str(tmp_path), flag, ""], f"{flag} '' is empty")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["config", "show", "--config", ""],
         "gpt config show --config '' is empty. Pass a value (e.g. --config tiny), or leave the "
         "flag out."),
        (["config", "show", "--run", " "],
         "gpt config show --run ' ' is empty. Pass a value (e.g. --run runs/<name>), or leave the "
         "flag out."),
        (["sample", "--run", ""],
         "gpt sample --run '' is empty. Pass a value (e.g. --run runs/<name>), or leave the flag out."),
        (["eval", ""], "gpt eval RUN '' is empty. Pass one, e.g. gpt eval --run runs/<name>."),
        (["eval", "--run", "runs/x", "--text", "@val", ""],
         "gpt eval --text '' is empty. Pass a value (e.g. --text @val), or leave the flag out."),
        (["eval", "--run", "runs/x", "--task", ""],
         "gpt eval --task '' is empty. Pass a value (e.g. --task tasks/mc.jsonl), or leave the flag "
         "out."),
        (["prepare", "", "--out", "store"],
         "gpt prepare SRC '' is empty. Pass one, e.g. gpt prepare corpus/ --out data/store."),
        (["prepare", "notes.txt", "--out", ""],
         "gpt prepare --out '' is empty. Pass one, e.g. --out data/store."),
        (["prepare", "notes.txt", "--out", "store", "--tokenizer", ""],
         "gpt prepare --tokenizer '' is empty. Pass a value (e.g. --tokenizer bpe), or leave the "
         "flag out."),
        (["import", "", "--name", "x"],
         "gpt import DIR '' is empty. Pass one, e.g. gpt import hf/gpt2 --name gpt2."),
        (["import", "hf", "--name", "x", "--out", ""],
         "gpt import --out '' is empty. Pass a value (e.g. --out runs), or leave the flag out."),
        (["export", "", "hf"],
         "gpt export RUN '' is empty. Pass one, e.g. gpt export runs/<name> hf/<name>."),
        (["export", "runs/x", ""],
         "gpt export OUT_DIR '' is empty. Pass one, e.g. gpt export runs/<name> hf/<name>."),
    ],
)  # fmt: skip
def test_an_empty_path_or_name_is_refused_not_read_as_the_default(
    argv, message, tmp_path, capsys, monkeypatch
):
    # '' is neither "not given" (config show used to show the tiny preset) nor the working
    # directory (prepare --out '' used to write its store among the files here).
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("some text")
    err = _refused(capsys, argv)
    assert err == f"gpt: error: {message}\n"
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_resume_and_name_together_are_refused(run_copy, capsys):
    before = _snapshot(run_copy)
    _refused(capsys, ["train", "--resume", str(run_copy), "--name", "other"],
             "--resume continues that run", "Pass one")  # fmt: skip
    assert _snapshot(run_copy) == before


def test_config_that_is_a_folder_is_refused(tmp_path, capsys):
    _refused(capsys, ["train", "--out", str(tmp_path), "--config", str(tmp_path)],
             "is a folder, not a TOML file", "config.toml")  # fmt: skip
    _refused(capsys, ["config", "show", "--config", str(tmp_path)], "is a folder")


def test_out_that_is_a_file_is_refused(tmp_path, capsys):
    out = tmp_path / "runs"
    out.write_text("a file")
    _refused(capsys, ["train", "--out", str(out)], "that is a file", "Pass a folder")
    assert out.read_text() == "a file"


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--coordinator", "localhost"], "expected HOST:PORT"),
        (["--coordinator", "localhost:99999"], "port number from 1 to 65535"),
        (["--num-processes", "2"], "gpt train --num-processes 2 needs --coordinator HOST:PORT"),
        (["--process-id", "1"], "gpt train --process-id 1 needs --coordinator HOST:PORT"),
        (["--coordinator", "localhost:1234", "--num-processes", "2", "--process-id", "5"],
         "--process-id 5: expected 0 to 1"),
        (["--coordinator", "localhost:1234", "--num-processes", "0"], "expected 1 or more"),
    ],
)  # fmt: skip
def test_bad_multi_process_flags_are_refused_before_waiting(flags, needle, tmp_path, capsys):
    _refused(capsys, ["train", "--out", str(tmp_path), *flags], needle)


@pytest.mark.parametrize(("n", "others"), [("2", "1"), ("4", "1 to 3, one each")])
def test_processes_without_a_coordinator_are_shown_the_command_that_starts_them(
    n, others, tmp_path, capsys
):
    err = _refused(capsys, ["train", "--out", str(tmp_path), "--num-processes", n])
    assert err == (
        f"gpt: error: gpt train --num-processes {n} needs --coordinator HOST:PORT, the address of "
        "process 0 that every process connects to (or JAX_COORDINATOR_ADDRESS): without it the "
        "processes cannot find each other. Start every process with the same --coordinator and "
        "--num-processes and its own --process-id, e.g. on the machine at 10.0.0.1: gpt train "
        f"--coordinator 10.0.0.1:1234 --num-processes {n} --process-id 0, and on the others the "
        f"same with --process-id {others}. For one process, leave the multi-process flags out.\n"
    )
    assert list(tmp_path.iterdir()) == []


# --- config values ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "needle"),
    [
        ("train.lr=inf", "train.lr = inf must be a finite number > 0"),
        ("train.lr=nan", "train.lr = nan must be a finite number > 0"),
        ("train.lr=0", "train.lr = 0.0 must be a finite number > 0"),
        ("train.beta2=1.5", "train.beta2 = 1.5 must be in [0, 1)"),
        ("train.beta1=-0.1", "train.beta1 = -0.1 must be in [0, 1)"),
        ("train.min_lr_ratio=2", "train.min_lr_ratio = 2.0 must be in [0, 1]"),
        ("train.weight_decay=nan", "train.weight_decay = nan must be a finite number >= 0"),
        ("train.grad_clip=-1", "train.grad_clip = -1.0 must be a finite number >= 0"),
    ],
)
def test_out_of_range_config_values_are_refused(setting, needle, tmp_path, capsys):
    err = _refused(capsys, ["train", "--out", str(tmp_path), "--set", setting], needle)
    assert "(1 problem)" in err, err  # one line per bad value
    assert list(tmp_path.iterdir()) == []


def test_odd_rope_head_dim_names_the_fix(tmp_path, capsys):
    _refused(capsys, ["train", "--out", str(tmp_path), "--set", "model.d_model=30",
                      "--set", "model.n_heads=2"],
             "= 15", "model.n_heads=N with N in [1, 3, 5]", "model.d_model=32",
             "model.pos=learned")  # fmt: skip


# --- sample ----------------------------------------------------------------------------------------


def test_sample_with_a_prompt_longer_than_the_context(finished_run, capsys):
    err = _refused(capsys, ["sample", "--run", str(finished_run), "--prompt", "x" * 100],
                   "100 tokens long", "model.seq_len) is 32", "at most 31")  # fmt: skip
    assert "max_new_tokens" not in err


def test_sample_with_an_empty_prompt_is_refused_before_compiling(finished_run, capsys):
    _refused(capsys, ["sample", "--run", str(finished_run), "--prompt", ""],
             "--prompt '' is empty", "at least one token", "--prompt ' '")  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--top-k", "-3"], "generate: top_k = -3 must be >= 0 (0 keeps every token)"),
        (["--temperature", "-1"], "generate: temperature = -1.0 must be a finite number >= 0"),
        (["--top-p", "2"], "generate: top_p = 2.0 must be in (0, 1] (1 keeps every token)"),
    ],
)
def test_sample_with_bad_sampling_flags_is_refused_before_compiling(
    finished_run, capsys, flags, needle
):
    # The memory pre-flight compiles the sampling program first: it checks the options as
    # generate does, instead of passing -3 on to lax.top_k.
    _refused(capsys, ["sample", "--run", str(finished_run), *flags], needle)


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--batch-size", "0"], "gpt eval --batch-size 0: it must be >= 1"),
        (["--batch-size", "-2"], "gpt eval --batch-size -2: it must be >= 1"),
        (["--stride", "4"], "gpt eval --stride applies to --text"),
        (["--format", "mc"], "gpt eval --format mc applies to --task; pass --task FILE.jsonl too."),
    ],
)
def test_eval_flags_that_cannot_apply_are_refused(flags, needle, finished_run, capsys):
    _refused(capsys, ["eval", "--run", str(finished_run), *flags], needle)


# --- damaged checkpoints: never loaded, the previous one used, resumed over cleanly ---------------


def _swap_step(run: Path, newer: int, older: int) -> None:
    # Files orbax decodes without complaint that hold other values: only the digest notices.
    for item in ("params", "train"):
        shutil.rmtree(run / "checkpoints" / str(newer) / item)
        shutil.copytree(run / "checkpoints" / str(older) / item,
                        run / "checkpoints" / str(newer) / item)  # fmt: skip


def _truncate_step(run: Path, step: int) -> None:
    for f in (run / "checkpoints" / str(step)).rglob("*"):
        if f.is_file() and f.stat().st_size > 64:
            f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])


def _flip_bytes(run: Path, step: int) -> None:
    # 64 bytes inverted in the middle of each data file of the step: bytes orbax decodes unnoticed.
    for f in (run / "checkpoints" / str(step)).rglob("*"):
        if f.is_file() and f.parent.name == "d" and f.stat().st_size > 1024:
            data = bytearray(f.read_bytes())
            middle = len(data) // 2
            data[middle : middle + 64] = bytes(b ^ 0xFF for b in data[middle : middle + 64])
            f.write_bytes(bytes(data))


def test_eval_never_loads_a_checkpoint_changed_on_disk(run_copy, capsys):
    _swap_step(run_copy, 2, 1)
    assert main(["eval", "--run", str(run_copy)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("val_loss ")
    assert "gpt: warning: Checkpoint step 2 " in err and "DigestMismatch: array params" in err, err
    assert "changed or damaged on disk" in err and "Traceback" not in err


def test_eval_never_loads_a_checkpoint_with_flipped_bytes(run_copy, capsys):
    _flip_bytes(run_copy, 2)
    assert main(["eval", "--run", str(run_copy)]) == 0
    out, err = capsys.readouterr()
    assert err.startswith("gpt: warning: Checkpoint step 2 ") and len(err.splitlines()) == 1, err
    shutil.rmtree(run_copy / "checkpoints" / "2")
    assert main(["eval", "--run", str(run_copy)]) == 0
    assert out == capsys.readouterr().out  # step 1's parameters, not the damaged step 2's (was nan)


def test_a_changed_model_config_is_one_message_naming_both_shapes(run_copy, capsys):
    # config.toml edited after the checkpoints were saved: refused before orbax reads anything
    # (was: 135 lines of tracebacks from its background reads after the message).
    toml = run_copy / "config.toml"
    toml.write_text(toml.read_text().replace("d_model = 32", "d_model = 64", 1))
    err = _refused(capsys, ["eval", "--run", str(run_copy)], "was saved with shape (256, 32), "
                   "but the config asks for (256, 64)", "config.toml or --set")  # fmt: skip
    assert len(err.splitlines()) < 8 and "Event loop is closed" not in err, err


@pytest.mark.parametrize("damage", [_swap_step, _truncate_step], ids=["changed", "truncated"])
def test_resume_after_a_damaged_newer_checkpoint_saves_that_step_again(run_copy, capsys, damage):
    damage(run_copy, 2, 1) if damage is _swap_step else damage(run_copy, 2)
    code = main(["train", "--resume", str(run_copy), "--set", "train.steps=3"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "gpt: warning: Checkpoint step 2 " in err, err
    assert "removed the damaged checkpoint step(s) [2]" in err
    assert "Resumed from checkpoint step 1" in err
    steps = sorted(int(p.name) for p in (run_copy / "checkpoints").iterdir() if p.name.isdigit())
    assert steps == [1, 2, 3]


def test_sample_with_a_truncated_newest_checkpoint_says_one_thing(run_copy, capsys):
    _truncate_step(run_copy, 2)
    assert main(["sample", "--run", str(run_copy), "--prompt", "a"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("gpt: warning: Checkpoint step 2 ") and len(err.splitlines()) == 1, err
    assert "restore-errors.log" in err and "Event loop is closed" not in err, err
    assert "Traceback" in (run_copy / "checkpoints" / "restore-errors.log").read_text()


def test_every_checkpoint_truncated_is_one_message(run_copy, capsys):
    for step in (1, 2):
        _truncate_step(run_copy, step)
    err = _refused(
        capsys, ["eval", "--run", str(run_copy)], "could be restored", "step 1", "step 2"
    )
    assert len(err.splitlines()) < 10 and "restore-errors.log" in err, err


def test_process_id_out_of_range_from_the_environment_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("JAX_COORDINATOR_ADDRESS", "localhost:1234")
    monkeypatch.setenv("JAX_NUM_PROCESSES", "2")
    monkeypatch.setenv("JAX_PROCESS_ID", "5")
    _refused(capsys, ["train", "--out", str(tmp_path)], "--process-id 5: expected 0 to 1")
    monkeypatch.setenv("JAX_PROCESS_ID", "one")
    _refused(capsys, ["train", "--out", str(tmp_path)], "JAX_PROCESS_ID='one' is not a whole")


# --- Hugging Face folders in and out: one table ------------------------------------------------------
# Each case builds its bad input under tmp_path and returns the command; the command must print one
# `gpt: error:` line holding the needle, exit 2, and leave tmp_path exactly as it was.

DATA = Path(__file__).parent / "data"


def _tree(folder: Path) -> dict[str, object]:
    """Every path below ``folder``: a file's bytes, a link's target, else its kind."""
    out: dict[str, object] = {}
    for p in sorted(folder.rglob("*")):
        key = str(p.relative_to(folder))
        if p.is_symlink():
            out[key] = os.readlink(p)
        elif p.is_file():
            out[key] = p.read_bytes()
        else:
            out[key] = "folder" if p.is_dir() else "special"
    return out


def _hf(tmp: Path, config: dict | None = None, edit=None) -> Path:
    """A copy of the GPT-2 golden folder (vocab 100, width 32, 2 layers), spoilt as asked."""
    import json

    src = Path(shutil.copytree(DATA / "hf_gpt2", tmp / "src"))
    if config:
        raw = json.loads((src / "config.json").read_text())
        (src / "config.json").write_text(json.dumps({**raw, **config}))
    if edit:
        from safetensors.numpy import load_file, save_file

        tensors = load_file(str(src / "model.safetensors"))
        edit(tensors)
        save_file(tensors, str(src / "model.safetensors"))
    return src


def _rows(n: int):
    def edit(t):
        t["transformer.wte.weight"] = np.zeros((n, 32), np.float32)

    return edit


def _import(src: Path, tmp: Path, name: str = "bad", out: Path | None = None) -> list[str]:
    return ["import", str(src), "--name", name, "--out", str(out or tmp / "runs")]


def _cut(src: Path, name: str, keep: int | None = None) -> Path:
    data = (src / name).read_bytes()
    (src / name).write_bytes(data[: len(data) // 2 if keep is None else keep])
    return src


def _fifo(src: Path, name: str) -> Path:
    (src / name).unlink(missing_ok=True)
    os.mkfifo(src / name)
    return src


def _sharded(tmp: Path, shard: str) -> Path:
    src = Path(shutil.copytree(DATA / "hf_llama", tmp / "src"))
    index = src / "model.safetensors.index.json"
    index.write_text(index.read_text().replace('"model-00001-of-00003.safetensors"', f'"{shard}"'))
    return src


def _file(path: Path) -> Path:
    path.write_text("the user's own file")
    return path


def _link(path: Path, target: Path) -> Path:
    path.parent.mkdir(exist_ok=True)
    path.symlink_to(target)
    return path


def _folder(path: Path, read_only=None) -> Path:
    path.mkdir()
    (path / "notes.txt").write_text("the user's own file")
    if read_only:
        read_only(path)
    return path


def _no_config(src: Path, run_folder: bool = False) -> Path:
    (src / "config.json").unlink()
    if run_folder:
        (src / "config.toml").touch()
    return src


HF_CASES = {
    "import: unknown architecture": (
        lambda t, run, ro: _import(_hf(t, {"architectures": ["BertForMaskedLM"]}), t),
        "architecture 'BertForMaskedLM' cannot be imported; supported: GPT2LMHeadModel"),
    "import: n_embd is a string": (
        lambda t, run, ro: _import(_hf(t, {"n_embd": "big", "n_layer": 2.5}), t),
        'cannot describe a GPT2LMHeadModel: n_embd = "big" (expected a positive integer); '
        "n_layer = 2.5 (expected a positive integer)"),
    "import: wte of 200 rows for 256 ids": (
        lambda t, run, ro: _import(_hf(t, {"vocab_size": 256}, _rows(200)), t),
        "tensor 'transformer.wte.weight' has shape (200, 32), but config.json (GPT2LMHeadModel: "
        "vocab_size 256, width 32, 2 layers, context 32) needs (256, 32)"),
    "import: wte of 300 rows for 256 ids": (
        lambda t, run, ro: _import(_hf(t, {"vocab_size": 256}, _rows(300)), t),
        "tensor 'transformer.wte.weight' has shape (300, 32), but config.json"),
    "import: c_attn of the wrong shape": (
        lambda t, run, ro: _import(_hf(t, edit=lambda x: x.update(
            {"transformer.h.1.attn.c_attn.weight": np.zeros((32, 64), np.float32)})), t),
        "tensor 'transformer.h.1.attn.c_attn.weight' has shape (32, 64), but config.json"),
    "import: wpe shorter than n_positions": (
        lambda t, run, ro: _import(_hf(t, {"n_positions": 64}), t),
        "tensor 'transformer.wpe.weight' has shape (32, 32), but config.json"),
    "import: a tensor missing": (
        lambda t, run, ro: _import(_hf(t, edit=lambda x: x.pop("transformer.h.1.mlp.c_fc.bias")), t),
        "tensor 'transformer.h.1.mlp.c_fc.bias' is missing (1 missing in all)"),
    "import: an extra tensor": (
        lambda t, run, ro: _import(_hf(t, edit=lambda x: x.update(
            {"transformer.h.2.mlp.c_fc.bias": np.zeros(128, np.float32)})), t),
        "tensor 'transformer.h.2.mlp.c_fc.bias' (1 unexpected in all) is not part of"),
    "import: safetensors cut in half": (
        lambda t, run, ro: _import(_cut(_hf(t), "model.safetensors"), t),
        "model.safetensors is not a readable safetensors file: tensor "),
    "import: safetensors of 5 bytes": (
        lambda t, run, ro: _import(_cut(_hf(t), "model.safetensors", 5), t),
        "model.safetensors is not a readable safetensors file (it holds 5 bytes"),
    "import: config.json is a named pipe": (
        lambda t, run, ro: _import(_fifo(_hf(t), "config.json"), t),
        "config.json is a named pipe, not a regular file"),
    "import: model.safetensors is a named pipe": (
        lambda t, run, ro: _import(_fifo(_hf(t), "model.safetensors"), t),
        "model.safetensors is a named pipe, not a regular file"),
    "import: tokenizer.json is a named pipe": (
        lambda t, run, ro: _import(_fifo(_hf(t), "tokenizer.json"), t),
        "tokenizer.json is a named pipe, not a regular file"),
    "import: a shard named outside the folder": (
        lambda t, run, ro: _import(_sharded(t, "../outside.safetensors"), t),
        "names the shard '../outside.safetensors' for tensor"),
    "import: no config.json": (
        lambda t, run, ro: _import(_no_config(_hf(t)), t),
        "config.json does not exist. Expected a Hugging Face model folder with config.json"),
    "import: a gpt run folder": (
        lambda t, run, ro: _import(_no_config(_hf(t), run_folder=True), t),
        "is a run folder made by gpt train (config.toml), not a Hugging Face model folder"),
    "import: not a folder": (
        lambda t, run, ro: _import(_file(t / "afile"), t),
        "afile is not a folder. Expected a Hugging Face model folder"),
    "import: --out is a file": (
        lambda t, run, ro: _import(_hf(t), t, out=_file(t / "afile")),
        "--out/--name {t}/afile/bad: {t}/afile is a file, not a folder, so nothing can be written"),
    "import: --name is a dangling link": (
        lambda t, run, ro: _import(_hf(t), t, name=_link(t / "runs" / "bad", t / "gone").name),
        "--out/--name {t}/runs/bad is a symbolic link (to {t}/gone, which does not exist)"),
    "import: --out on a read-only file system": (
        lambda t, run, ro: _import(_hf(t), t, out=_folder(t / "ro", ro)),
        "--out/--name {t}/ro/bad: writing failed (Read-only file system); nothing was left behind"),
    "train --init-from: truncated safetensors": (
        lambda t, run, ro: ["train", "--init-from", str(_cut(_hf(t), "model.safetensors")),
                            "--out", str(t / "runs"), "--name", "ft"],
        "model.safetensors is not a readable safetensors file: tensor "),
    "export: OUT_DIR below a file": (
        lambda t, run, ro: ["export", str(run), str(_file(t / "afile") / "hf")],
        "OUT_DIR {t}/afile/hf: {t}/afile is a file, not a folder, so nothing can be written"),
    "export: OUT_DIR is a dangling link": (
        lambda t, run, ro: ["export", str(run), str(_link(t / "hf", t / "gone"))],
        "OUT_DIR {t}/hf is a symbolic link (to {t}/gone, which does not exist)"),
    "export: OUT_DIR holds the user's files": (
        lambda t, run, ro: ["export", str(run), str(_folder(t / "hf"))],
        "OUT_DIR {t}/hf exists already (a folder); this writes a new folder"),
    "export: into a read-only folder": (
        lambda t, run, ro: ["export", str(run), str(_folder(t / "ro", ro) / "hf")],
        "OUT_DIR {t}/ro/hf: writing failed (Read-only file system); nothing was left behind"),
}  # fmt: skip


@pytest.fixture(scope="module")
def exportable_run(tmp_path_factory):
    """A GPT-2-shaped run at step 0 (the golden folder imported), built once."""
    out = tmp_path_factory.mktemp("imported")
    assert main(["import", str(DATA / "hf_gpt2"), "--name", "g", "--out", str(out)]) == 0
    return out / "g"


@pytest.mark.parametrize("case", list(HF_CASES))
def test_hf_folders_in_and_out_refuse_bad_input_leaving_nothing(
    case, tmp_path, exportable_run, read_only_below, capsys
):
    make, needle = HF_CASES[case]
    argv = make(tmp_path, exportable_run, read_only_below)
    before = _tree(tmp_path)
    capsys.readouterr()
    err = _refused(capsys, argv, needle.format(t=tmp_path))
    assert err.startswith("gpt: error: ") and len(err.splitlines()) == 1, err
    assert _tree(tmp_path) == before


# --- gpt prepare: never overwrites, never reads a damaged file as text, leaves nothing on refusal --


def _texts(path: Path, n: int) -> Path:
    path.write_text("".join(f'{{"text": "document {i}: lorem ipsum dolor"}}\n' for i in range(n)))
    return path


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def test_prepare_refuses_a_folder_holding_the_users_own_shard(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "train-00000.bin").write_bytes(b"mine")
    _refused(
        capsys,
        ["prepare", str(_texts(tmp_path / "a.jsonl", 50)), "--out", str(tmp_path / "out")],
        f"--out {tmp_path / 'out'} already holds files gpt prepare did not write ('train-00000.bin')",
        "only into a new or empty folder, or into its own unfinished output",
    )
    assert _files(tmp_path / "out") == ["train-00000.bin"]
    assert (tmp_path / "out" / "train-00000.bin").read_bytes() == b"mine"


def test_prepare_bpe_never_takes_a_tokenizer_json_it_did_not_write(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "tokenizer.json").write_text('{"not": "ours"}')
    src = _texts(tmp_path / "a.jsonl", 50)
    argv = ["prepare", str(src), "--out", str(tmp_path / "out"), "--tokenizer", "bpe",
            "--bpe-vocab-size", "300"]  # fmt: skip
    _refused(capsys, argv, "already holds files gpt prepare did not write ('tokenizer.json')")
    assert _files(tmp_path / "out") == ["tokenizer.json"]
    assert (tmp_path / "out" / "tokenizer.json").read_text() == '{"not": "ours"}'


def test_prepare_of_a_truncated_gzip_names_it_and_leaves_nothing(tmp_path, capsys):
    import gzip

    data = gzip.compress(_texts(tmp_path / "whole.jsonl", 3000).read_bytes())
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) // 2])
    argv = ["prepare", str(tmp_path / "cut.jsonl.gz"), "--out", str(tmp_path / "out")]
    err = _refused(capsys, argv, f"{tmp_path / 'cut.jsonl.gz'} ends early: it was cut short",
                   "EOFError", "fetch it again, or leave it out")  # fmt: skip
    assert err.count("gpt: error:") == 1 and not (tmp_path / "out").exists()


def test_prepare_of_random_bytes_named_parquet_names_it_and_leaves_nothing(tmp_path, capsys):
    pytest.importorskip("pyarrow", reason="the gpt-models[parquet] extra")
    (tmp_path / "r.parquet").write_bytes(bytes(range(256)) * 16)
    argv = ["prepare", str(tmp_path / "r.parquet"), "--out", str(tmp_path / "out")]
    _refused(capsys, argv, f"{tmp_path / 'r.parquet'} is damaged (ArrowInvalid: Parquet magic")
    assert not (tmp_path / "out").exists()


def test_prepare_refused_in_an_empty_folder_leaves_it_as_it_was(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / ".keep").write_text("")  # hidden files are not in the way
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "one"}\n{"text": "two"}\n{"oops": 3}\n')
    _refused(capsys, ["prepare", str(src), "--out", str(tmp_path / "out")],
             "a.jsonl:3 has no string field 'text'")  # fmt: skip
    assert _files(tmp_path / "out") == [".keep"]


def test_prepare_refuses_an_empty_validation_split_with_a_fraction_that_works(tmp_path, capsys):
    src = _texts(tmp_path / "a.jsonl", 12)
    err = _refused(
        capsys,
        ["prepare", str(src), "--out", str(tmp_path / "out")],
        "--val-fraction 0.01 leaves the validation split empty: all 12 documents went to the "
        "train split",
        "Nothing was written",
    )
    assert not (tmp_path / "out").exists()
    fraction = err.split("Fix: --val-fraction ")[1].split()[0]
    assert (
        main(["prepare", str(src), "--out", str(tmp_path / "out"), "--val-fraction", fraction]) == 0
    )
    out = capsys.readouterr().out
    assert " / 1 val documents" in out and "Train on it: gpt train" in out  # the fix works


def test_prepare_of_one_text_file_says_how_to_train_on_it(tmp_path, capsys):
    (tmp_path / "book.txt").write_text("a small corpus of one file. " * 40)
    _refused(
        capsys,
        ["prepare", str(tmp_path / "book.txt"), "--out", str(tmp_path / "out")],
        "the one document went to the train split",
        f"train on the text itself, gpt train --set data.path={tmp_path / 'book.txt'}",
    )
    assert not (tmp_path / "out").exists()


def test_prepare_without_a_validation_split_warns_instead_of_saying_train_on_it(tmp_path, capsys):
    src = _texts(tmp_path / "a.jsonl", 12)
    argv = ["prepare", str(src), "--out", str(tmp_path / "out"), "--val-fraction", "0"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "12 train / 0 val documents" in out and "Train on it" not in out
    assert f"gpt: warning: {tmp_path / 'out'} has no validation split (--val-fraction 0)" in err
    fix = re.search(r"--val-fraction (0\.\d+) puts (\d+) of the 12 documents", err)
    assert fix, err
    argv = ["prepare", str(src), "--out", str(tmp_path / "out2"), "--val-fraction", fix[1]]
    assert main(argv) == 0
    assert f" / {fix[2]} val documents" in capsys.readouterr().out  # the fix it names works


def test_prepare_lists_the_files_it_skips(tmp_path, capsys):
    (tmp_path / "mixed").mkdir()
    (tmp_path / "mixed" / "notes.txt").write_text("hello " * 200)
    for name in ("a.py", "b.py", "c.py", "d.py", "e.py", "f.py"):
        (tmp_path / "mixed" / name).write_text("print(1)\n")
    argv = [
        "prepare",
        str(tmp_path / "mixed"),
        "--out",
        str(tmp_path / "out"),
        "--val-fraction",
        "0",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert ("note: skipped 6 files (.py): mixed/a.py, mixed/b.py, mixed/c.py, mixed/d.py, "
            "mixed/e.py and 1 more (not a kind gpt prepare reads)") in err  # fmt: skip
    (tmp_path / "mixed" / "notes.txt").unlink()
    _refused(capsys, ["prepare", str(tmp_path / "mixed"), "--out", str(tmp_path / "out2")],
             "holds no file gpt prepare reads (skipped 6 files (.py): mixed/a.py")  # fmt: skip


# --- token stores: the manifest is checked whole before training; a bad one leaves no run --------


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A byte-level store of 300 documents in 2,000-token shards, made once; tests copy it."""
    folder = tmp_path_factory.mktemp("store")
    src = _texts(folder / "a.jsonl", 300)
    argv = ["prepare", str(src), "--out", str(folder / "st"), "--val-fraction", "0.2",
            "--shard-tokens", "2000"]  # fmt: skip
    assert main(argv) == 0
    return folder / "st"


def _edited_store(store: Path, tmp_path: Path, edit) -> Path:
    import json

    copy = tmp_path / "st"
    shutil.copytree(store, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def _outside(manifest):
    manifest["shards"]["train"][0]["file"] = "../outside.bin"


@pytest.mark.parametrize(
    ("edit", "needles"),
    [
        (_outside, ["shard train[0]: file = '../outside.bin' is not a plain file name inside "
                    "the store folder"]),
        (lambda m: m.pop("shards"), ['"shards" is missing']),
        (lambda m: m.update(dtype="uint32"),
         ["dtype = 'uint32', but the tokenizer's 256 ids are stored as uint16",
          "shard train-00000.bin holds 2,000 tokens in 4,000 bytes, not the 4 bytes a token of "
          "dtype uint32 (and"]),
    ],
    ids=["shard-outside-the-store", "no-shards", "dtype-uint16-edited-to-uint32"],
)  # fmt: skip
def test_training_on_an_edited_store_manifest_is_refused_and_leaves_no_run(
    store, tmp_path, capsys, edit, needles
):
    edited = _edited_store(store, tmp_path, edit)
    (tmp_path / "outside.bin").write_bytes(b"\x01\x00" * 2000)
    argv = ["train", "--out", str(tmp_path / "runs"), "--name", "x", *TINY,
            "--set", f"data.path={edited}"]  # fmt: skip
    _refused(capsys, argv, f"{edited / 'manifest.json'} does not describe a store gpt prepare "
             "wrote", *needles, "Prepare the store again")  # fmt: skip
    assert not (tmp_path / "runs").exists()


# --- gpt eval --task: results never share a file; undecodable task files are named -------------


def test_eval_tasks_of_one_file_name_keep_both_results(finished_run, tmp_path, capsys):
    import json

    for folder, row in (("a", {"context": "The sky is", "choices": [" blue", " loud"], "label": 0}),
                        ("b", {"context": "A cat", "target": " sat"})):  # fmt: skip
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "val.jsonl").write_text(json.dumps(row) + "\n")
    a, b = str(tmp_path / "a" / "val.jsonl"), str(tmp_path / "b" / "val.jsonl")
    assert main(["eval", "--run", str(finished_run), "--task", a, "--task", b]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[:2] for line in out.splitlines()[1:3]]
    assert rows == [[a, "mc"], [b, "cloze"]]  # one name: the table shows the paths
    saved = sorted((finished_run / "evals").glob("val-*-2.json"))
    assert len(saved) == 2 and all(f"saved {p} (" in out for p in saved)
    formats = {
        json.loads(p.read_text())["path"]: json.loads(p.read_text())["format"] for p in saved
    }
    assert formats == {a: "mc", b: "cloze"}
    shutil.rmtree(finished_run / "evals")


def test_eval_of_a_task_file_that_is_not_utf8_names_its_line(finished_run, tmp_path, capsys):
    (tmp_path / "t.jsonl").write_bytes(
        b'{"context": "x", "choices": ["a", "b"], "label": 0}\n'
        b'{"context": "caf\xe9", "choices": ["a"], "label": 0}\n'
    )
    _refused(capsys, ["eval", "--run", str(finished_run), "--task", str(tmp_path / "t.jsonl")],
             f"{tmp_path / 't.jsonl'}:2: not UTF-8 text (byte 0xe9 at column 17)",
             "convert the file")  # fmt: skip
    assert not (finished_run / "evals").exists()
