"""A fine-tune trains at a window (``data.seq_len``) shorter than its base's positions and keeps
them: it trains, resumes bit for bit and evaluates at the window; it samples and exports with the
base's positions (a learned table keeps every row)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import jax
import numpy as np
import pandas as pd
import pytest

from gpt_models import PRESETS, export_hf, flops_per_token, init_params, load_config, load_run, main

SMALL = {"vocab_size": 256, "vocab_real": 0, "seq_len": 256, "d_model": 32, "n_layers": 1,
         "n_heads": 2, "n_kv_heads": 0, "d_ff": 64}  # fmt: skip
RUN = ["--set", "train.batch_size=8", "--set", "train.warmup_steps=0", "--set", "mesh.data=-1",
       "--set", "train.eval_every=2", "--set", "train.eval_batches=1",
       "--set", "train.checkpoint_every=2", "--set", "sample.max_new_tokens=4"]  # fmt: skip
POS = ("gpt", "model", "pos_embed", "embedding")


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """Two 256-position Hugging Face folders, untrained: Llama (RoPE) and GPT-2 (a learned table)."""
    out = tmp_path_factory.mktemp("bases")
    for name, preset in (("llama", "llama-tiny"), ("gpt2", "gpt2-small")):
        model = dataclasses.replace(PRESETS[preset].model, **SMALL)
        export_hf(model, init_params(model, jax.random.key(0)), out / name)
    return out


def _train(bases, out, base, name, *flags):
    args = ["train", "--init-from", str(bases / base), "--out", str(out), "--name", name]
    return main([*args, *RUN, *flags])


def test_a_256_position_base_fine_tuned_at_64_trains_resumes_evaluates_and_exports_256(
    bases, tmp_path, capsys
):
    assert _train(bases, tmp_path, "llama", "ft", "--set", "model.seq_len=64",
                  "--set", "train.steps=4") == 0  # fmt: skip
    err = capsys.readouterr().err
    assert (
        "note: --set model.seq_len=64 on a fine-tune sets its training window, data.seq_len = 64; "
        f"the model keeps the 256 positions of init.source {bases / 'llama'}"
    ) in err
    assert " val tokens, windows of 64 of the model's 256 positions) -> " in err
    run = tmp_path / "ft"
    cfg, params, step = load_run(run)
    assert (step, cfg.model.seq_len, cfg.data.seq_len, cfg.window) == (4, 256, 64, 64)

    # Evaluated at the window; sampled with the model's whole context (past 64 tokens).
    assert main(["eval", "--run", str(run)]) == 0
    assert "(1 batch(es) of 8 x 64 tokens, train.eval_batches), step 4" in capsys.readouterr().out
    sample = ["sample", "--run", str(run), "--max-new-tokens", "300", "--temperature", "0"]
    assert main(sample) == 0
    assert (
        "capped to 252: the prompt (4 tokens) and the new tokens fill the model's context, "
        "model.seq_len = 256." in capsys.readouterr().err
    )

    # Resumed from checkpoint 2: steps 3 and 4 again, bit for bit, at the recorded window.
    again = tmp_path / "again"
    shutil.copytree(run, again)
    shutil.rmtree(again / "checkpoints" / "4")
    assert main(["train", "--resume", str(again), "--set", "model.seq_len=128"]) == 2
    err = capsys.readouterr().err
    assert "a resumed run keeps its architecture, and this run has model.seq_len = 256." in err
    assert "A shorter training window is --set data.seq_len=N, N from 1 to 256." in err
    assert main(["train", "--resume", str(again)]) == 0
    resumed = load_run(again)
    assert resumed[0] == cfg and resumed[2] == 4
    assert all(np.array_equal(params[k].value, resumed[1][k].value) for k in params)
    losses = [pd.read_csv(r / "metrics.csv").dropna(subset=["loss"]).set_index("step").loss
              for r in (run, again)]  # fmt: skip
    assert losses[0].loc[2:3].tolist() == losses[1].loc[2:3].tolist()

    # Exported with the base's positions.
    assert main(["export", str(run), str(tmp_path / "hf")]) == 0
    assert (
        json.loads((tmp_path / "hf" / "config.json").read_text())["max_position_embeddings"] == 256
    )


def test_a_learned_position_table_keeps_its_rows(bases, tmp_path, capsys):
    assert _train(bases, tmp_path, "gpt2", "ft", "--set", "data.seq_len=32",
                  "--set", "train.steps=1") == 0  # fmt: skip
    cfg, params, _ = load_run(tmp_path / "ft")
    assert (cfg.model.seq_len, cfg.window) == (256, 32) and params[POS].value.shape == (256, 32)
    assert main(["export", str(tmp_path / "ft"), str(tmp_path / "hf")]) == 0
    hf = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (hf["n_positions"], hf["n_ctx"]) == (256, 256)


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        (["--set", "model.seq_len=512"], ["model.seq_len = 512 is longer than the 256 positions "
                                          "of init.source", "N from 1 to 256"]),
        (["--set", "data.seq_len=300"], ["data.seq_len = 300 is longer than the 256 positions",
                                         "--set data.seq_len=N with N from 1 to 256"]),
        (["--set", "model.seq_len=64", "--set", "data.seq_len=32"],
         ["--set model.seq_len=64 and --set data.seq_len=32 both set the training window",
          "Pass only --set data.seq_len=N, N from 1 to 256."]),
    ],
    ids=["model.seq_len", "data.seq_len", "both"],
)  # fmt: skip
def test_a_window_past_the_base_is_refused_in_one_line(
    bases, tmp_path, capsys, error_line, flags, needles
):
    assert _train(bases, tmp_path, "llama", "x", *flags) == 2
    line = error_line(capsys.readouterr().err)
    assert all(n in line for n in needles), line
    assert not (tmp_path / "x").exists()


def test_a_config_file_that_cuts_the_positions_points_at_data_seq_len(bases, tmp_path, capsys):
    """A config file's model section (not --set) with fewer positions: refused, pointing at the
    key that sets the window (a --set model.seq_len is taken as that window instead)."""
    model = "\n".join(f"{k} = {v}" for k, v in {**SMALL, "seq_len": 64}.items())
    (tmp_path / "c.toml").write_text(f'preset = "llama-tiny"\n[model]\n{model}\n')
    args = ["train", "--config", str(tmp_path / "c.toml"), "--set",
            f"init.source={bases / 'llama'}", "--out", str(tmp_path), "--name", "x"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "model.seq_len = 64 changes the 256 positions of init.source" in err
    assert "set data.seq_len = 64 and leave model.seq_len at 256" in err


def test_old_run_configs_without_the_window_read_and_flops_count_it(tmp_path, capsys):
    assert main(["config", "show", "--config", "tiny"]) == 0
    shown = capsys.readouterr().out
    old = "\n".join(line for line in shown.splitlines() if not line.startswith("seq_len = 0"))
    assert old != shown.strip()  # the window's line was there, and is gone
    (tmp_path / "old.toml").write_text(old)
    tiny = PRESETS["tiny"]
    assert load_config(str(tmp_path / "old.toml"), run_folder=True) == tiny
    assert tiny.window == tiny.model.seq_len
    short = dataclasses.replace(tiny, data=dataclasses.replace(tiny.data, seq_len=32))
    m = tiny.model  # the attention term: 12 * layers * d_model * window
    gap = 12 * m.n_layers * m.d_model * (m.seq_len - 32)
    assert flops_per_token(tiny) - flops_per_token(short) == gap
    assert flops_per_token(tiny.model) == flops_per_token(tiny)
