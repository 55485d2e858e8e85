"""The open-world journey as a user walks it, through the `gpt` command in subprocesses.

A model comes in from a Hugging Face folder (`gpt import`), a corpus becomes a token store (`gpt
prepare`), the imported weights are fine-tuned on it (`gpt train --init-from`), the fine-tune is
evaluated on its validation split and on a task (`gpt eval --text @val`, `--task`), and it goes back
out as a Hugging Face folder (`gpt export`), which transformers reloads with the same logits when
it is installed. Evaluation and export run from another directory than the one that made the runs:
every command reads the run's config.toml, whose paths are absolute.
"""

import importlib.util
import json
import os
import re
import sys

import numpy as np
import pytest

SHAPE = [
    "--set", "model.seq_len=32", "--set", "model.d_model=32", "--set", "model.n_layers=2",
    "--set", "model.n_heads=4",
]  # fmt: skip
STEPS = [
    "--set", "train.steps=4", "--set", "train.batch_size=8", "--set", "train.grad_accum=1",
    "--set", "train.warmup_steps=1",
    "--set", "train.eval_every=2", "--set", "train.eval_batches=1", "--set", "sample.max_new_tokens=4",
]  # fmt: skip


_patience = None  # the root conftest's, for this module's helpers


@pytest.fixture(autouse=True)
def _set_patience(patience):
    # Subprocesses are waited on while they make progress, not for a fixed time.
    global _patience
    _patience = patience


def gpt(*args: str, cwd) -> str:
    """Run `gpt ARGS` in `cwd`; its stdout and stderr (the test fails on a nonzero exit)."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=1"}  # fmt: skip
    done = _patience.run([sys.executable, "-m", "gpt_models", *args], cwd=cwd, env=env, text=True)
    assert done.returncode == 0, f"gpt {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout + done.stderr


@pytest.mark.slow
def test_import_prepare_finetune_eval_export_from_another_directory(tmp_path):
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    # A Hugging Face GPT-2 folder to start from (made here by exporting a short GPT-2 run: no
    # downloads), with its tokenizer.json, tokenizer_config.json and generation_config.json.
    gpt("train", "--config", "gpt2-small", *SHAPE, *STEPS, "--name", "pre", cwd=home)
    gpt("export", "runs/pre", "hf", cwd=home)
    assert json.loads((home / "hf" / "config.json").read_text())["eos_token_id"] == 0

    gpt("import", "hf", "--name", "base", cwd=home)
    lines = [json.dumps({"text": f"Note {i}: the cat sat on the mat. " * 4}) for i in range(80)]
    (home / "notes.jsonl").write_text("\n".join(lines) + "\n")
    gpt("prepare", "notes.jsonl", "--out", "store", "--val-fraction", "0.2", cwd=home)
    said = gpt("train", "--init-from", "runs/base", "--set", "data.path=store", *STEPS, "--name",
               "ft", cwd=home)  # fmt: skip
    assert "Baseline before the first step: val loss" in said

    run = "../home/runs/ft"
    val = gpt("eval", "--run", run, cwd=elsewhere)
    assert re.search(
        rf"val_loss \d+\.\d+ nats/byte on the validation split of {home / 'store'}", val
    )
    text = gpt("eval", "--run", run, "--text", "@val", cwd=elsewhere)
    assert f"text: the validation split of {home / 'store'}:" in text and "bits_per_byte" in text
    task = home / "task.jsonl"
    item = {"context": "the cat sat on the", "choices": [" mat", " sky"], "label": 0}
    task.write_text("\n".join(json.dumps(item) for _ in range(4)) + "\n")
    scores = gpt("eval", "--run", run, "--task", "../home/task.jsonl", cwd=elsewhere)
    assert re.search(r"task\s+format\s+examples\s+acc", scores)
    gpt("export", run, "out", cwd=elsewhere)
    out = elsewhere / "out"
    assert {p.name for p in out.iterdir()} >= {
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
        "generation_config.json",
    }  # fmt: skip
    if (
        importlib.util.find_spec("transformers") is None
        or importlib.util.find_spec("torch") is None
    ):
        return  # the interop extra is absent: the files above are what can be checked
    import jax.numpy as jnp
    import torch
    import transformers

    import gpt_models

    cfg, params, _ = gpt_models.load_run(home / "runs" / "ft")
    model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    tokens = np.random.default_rng(0).integers(0, 256, (2, 16)).astype(np.int32)
    ours = np.asarray(gpt_models.forward(params, jnp.asarray(tokens), cfg))
    with torch.no_grad():
        theirs = model(torch.tensor(tokens).long()).logits.float().numpy()
    assert float(np.abs(ours - theirs).max()) <= 1e-4
