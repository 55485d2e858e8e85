"""A run on chat examples end to end: gpt prepare, gpt train on packed rows, gpt eval.

The loss is the answers' (the loss mask), over the whole batch; the loss of every token of the
examples is logged and reported beside it.
"""

import csv
import json
import math
import re
import shutil

import jax
import numpy as np
import pytest

import lox
from gpt_models import load_run, main

CHATS = [
    [{"role": "user", "content": f"What is {i} plus two?"},
     {"role": "assistant", "content": f"It is {i + 2}."}]
    for i in range(120)
]  # fmt: skip
# Rows of 64 + 1 tokens hold two or three of these examples; two micro-batches per step.
FLAGS = ["--set", "model.seq_len=64", "--set", "train.batch_size=16", "--set", "train.grad_accum=2"]


def test_a_chat_run_trains_on_the_answers_and_reports_both_losses(tmp_path, gpt_train, capsys):
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CHATS))
    store = tmp_path / "store"
    assert main(["prepare", str(jsonl), "--out", str(store), "--val-fraction", "0.2"]) == 0
    assert gpt_train("--set", f"data.path={store}", *FLAGS) == 0
    run = tmp_path / "run"
    metrics = lox.load(run / "metrics" / "run_0")
    loss, every = (list(map(float, metrics[k])) for k in ("loss", "loss/all_tokens"))
    assert len(loss) == len(every) == 6 and all(map(math.isfinite, loss + every))
    assert loss[-1] < loss[0]  # it learns the answers
    assert every[0] != loss[0]  # two different weightings of the same forward pass
    with open(run / "metrics.csv") as f:
        header = next(csv.reader(f))
    assert {"loss/all_tokens", "val_loss/all_tokens"} <= set(header)
    capsys.readouterr()
    assert main(["eval", str(run)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert re.fullmatch(
        r"val_loss \d+\.\d{6} nats/byte of the answers \(the loss mask\) on the validation split "
        rf"of {re.escape(str(store))} \(2 batch\(es\) of 8 x 64 tokens, train.eval_batches\), "
        r"step 6",
        out[0],
    ), out
    assert re.fullmatch(
        r"val_loss/all_tokens \d+\.\d{6} nats/byte of every token of the examples \(prompts "
        r"too\)",
        out[1],
    ), out
    logged = float(metrics["val_loss"][-1])  # the evaluation at the last step: the same number
    assert float(out[0].split()[1]) == pytest.approx(logged, rel=1e-5)
    every_val = float(metrics["val_loss/all_tokens"][-1])
    assert float(out[1].split()[1]) == pytest.approx(every_val, rel=1e-5)

    # Resumed from step 3 (as if interrupted there): bit-for-bit the uninterrupted run.
    final = load_run(run)[1]
    shutil.rmtree(run / "checkpoints" / "6")
    assert main(["train", "--resume", str(run)]) == 0
    jax.tree.map(np.testing.assert_array_equal, load_run(run)[1], final)


def test_a_dry_run_on_chat_examples_plans_the_packed_step(tmp_path, capsys, small_args):
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CHATS))
    store = tmp_path / "store"
    assert main(["prepare", str(jsonl), "--out", str(store), "--val-fraction", "0.2"]) == 0
    capsys.readouterr()
    flags = ["--dry-run", *small_args, "--set", f"data.path={store}", *FLAGS]
    assert main(["train", "--out", str(tmp_path), "--name", "plan", *flags]) == 0
    assert "tokens per step  1,024" in capsys.readouterr().out
    assert not (tmp_path / "plan").exists()
