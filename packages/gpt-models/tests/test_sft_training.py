"""A run on chat examples end to end: gpt prepare, gpt train on packed rows, gpt eval.

The loss is the answers' (the loss mask), over the whole batch; the loss of every token of the
examples is logged and reported beside it. Examples too long for a row are left out, named by file
and line; a store made before gpt prepare recorded where examples came from trains as before.
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


# Completions of at most 23 tokens, but for three longer than a row of model.seq_len + 1 = 33 (the
# small run's): 54 tokens at line 5 and 74 at line 42 (both in the train split, whose split is a
# fixed hash of file name and line), 64 at line 7 (in the validation split).
LONG_AT = {5: 50, 7: 60, 42: 70}


def _completions(path):
    rows = [
        {"prompt": "x" * LONG_AT[n] + "=", "completion": " 1"}
        if n in LONG_AT
        else {"prompt": f"Q: {n} plus four?\nA:", "completion": f" {n + 4}"}
        for n in range(1, 81)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _left_out_notes(store, *, where):
    """The two notes on the long completions: where they came from, or (``where`` False: a store
    without origins) the note of before."""
    counts = json.loads((store / "manifest.json").read_text())["examples"]
    head = "longer than model.seq_len + 1 = 33 tokens and are left out"
    train = f"note: 2 of the {counts['train']} examples of the train split of {store} are {head}"
    val = f"note: 1 of the {counts['val']} examples of the val split of {store} are {head}"
    if not where:
        return [f"{train} (the longest has 74; examples are never cut).",
                f"{val} (the longest has 64; examples are never cut)."]  # fmt: skip
    return [
        f"{train} (the first is c.jsonl:5; the longest has 74 tokens, at c.jsonl:42; examples are "
        "never cut). To keep them, set --set model.seq_len=73 (or more), or shorten them.",
        f"{val} (it is c.jsonl:7, with 64 tokens; examples are never cut). To keep it, set "
        "--set model.seq_len=63 (or more), or shorten it.",
    ]


def test_examples_too_long_for_a_row_are_named_by_file_and_line(tmp_path, gpt_train, capsys):
    jsonl = _completions(tmp_path / "c.jsonl")
    store = tmp_path / "store"
    assert main(["prepare", str(jsonl), "--out", str(store), "--val-fraction", "0.2"]) == 0
    # The origins stream, as the data docs describe it: (input, line) per example, in store order.
    m = json.loads((store / "manifest.json").read_text())
    origins = np.fromfile(store / m["origin_shards"]["train"][0]["file"], "<u4").reshape(-1, 2)
    assert origins[:8].tolist() == [[0, n] for n in (1, 2, 3, 4, 5, 6, 8, 9)]
    capsys.readouterr()
    assert gpt_train("--set", f"data.path={store}", "--set", "train.steps=2") == 0
    err = capsys.readouterr().err
    for note in _left_out_notes(store, where=True):
        assert note in err.splitlines(), err
    assert len(lox.load(tmp_path / "run" / "metrics" / "run_0")["loss"]) == 2  # it trained


def test_a_store_made_before_origins_were_recorded_trains_as_before(tmp_path, gpt_train, capsys):
    from gpt_models import DataConfig, load_dataset, train_batch

    store = tmp_path / "store"
    assert main(["prepare", str(_completions(tmp_path / "c.jsonl")), "--out", str(store),
                 "--val-fraction", "0.2"]) == 0  # fmt: skip
    old = tmp_path / "old"
    shutil.copytree(store, old)
    manifest = json.loads((old / "manifest.json").read_text())
    for split in ("train", "val"):  # what an older gpt prepare wrote: no origins stream
        for rec in manifest["origin_shards"][split]:
            (old / rec["file"]).unlink()
    del manifest["origin_shards"]
    (old / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    # The same rows as the store with origins, and the note of before.
    kw = {"seed": 0, "batch_size": 8, "grad_accum": 1, "seq_len": 32}
    new_ds, old_ds = (load_dataset(DataConfig(path=str(s)), seq_len=32, vocab_size=256)
                      for s in (store, old))  # fmt: skip
    a, b = train_batch(new_ds.train, 1, **kw), train_batch(old_ds.train, 1, **kw)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    capsys.readouterr()
    assert gpt_train("--set", f"data.path={old}", "--set", "train.steps=2") == 0
    err = capsys.readouterr().err
    for note in _left_out_notes(old, where=False):
        assert note in err.splitlines(), err
    assert len(lox.load(tmp_path / "run" / "metrics" / "run_0")["loss"]) == 2
