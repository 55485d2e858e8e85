"""Mixtures of preference stores (``data.sources`` of stores of chosen/rejected pairs): a mixture of
one store draws the batches of ``data.path``, each row comes from its source by weight and each
process reads its own rows; a DPO run on two stores trains, logs TRL's metrics and each source's
losses, resumes bit for bit, and takes a precomputed reference; the mixtures that cannot train a
preference run are refused in one line.
"""

import csv
import json
import math
import shutil

import jax
import numpy as np
import pytest

import lox
from gpt_models import (
    DataConfig,
    DataError,
    DataSource,
    load_dataset,
    load_run,
    main,
    prepare,
    train_batch,
)

SUMS = [
    {"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(a + b + 1)}
    for a in range(10)
    for b in range(6)
]
PRODUCTS = [
    {"prompt": f"{a}*{b}=", "chosen": str(a * b), "rejected": str(a * b + 2)}
    for a in range(8)
    for b in range(5)
]
METRICS = [
    "rewards/chosen",
    "rewards/rejected",
    "rewards/margins",
    "rewards/accuracies",
    "logps/chosen",
    "logps/rejected",
]
WEIGHTS = (0.7, 0.3)
SEQ = 32


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def base_and_stores(tmp_path_factory, tiny_llama_folder):
    """The tiny Llama folder to start from (window SEQ) and two preference stores of the byte
    tokenizer: sums (every prompt has a +) and products (every one a *)."""
    tmp = tmp_path_factory.mktemp("prefmix")
    stores = []
    for name, pairs in (("sums", SUMS), ("products", PRODUCTS)):
        prepare([_jsonl(tmp / f"{name}.jsonl", pairs)], tmp / name, val_fraction=0.2)
        stores.append(tmp / name)
    return tiny_llama_folder, stores


def _sources(*pairs):
    return tuple(DataSource(str(p), w) for p, w in pairs)


def _batch(ds, step, **more):
    kw = {"seed": 5, "batch_size": 8, "grad_accum": 2, "seq_len": SEQ} | more
    return train_batch(ds.train, step, **kw)


def test_a_mixture_of_one_preference_store_draws_the_batches_of_data_path(base_and_stores):
    _, (sums, _) = base_and_stores
    alone = load_dataset(DataConfig(path=str(sums)), seq_len=SEQ, vocab_size=256)
    mixed = load_dataset(DataConfig(sources=_sources((sums, 2.0))), seq_len=SEQ, vocab_size=256)
    for step in (0, 1, 7, 100):
        a, b = _batch(alone, step), _batch(mixed, step)
        assert a.keys() == b.keys() == {"tokens", "mask", "segments"}
        for key in a:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"{key}, step {step}")
    assert mixed.source.startswith("mixture of sums (1, ")


def test_each_row_comes_from_its_source_by_weight_and_each_process_reads_its_own(
    base_and_stores,
):
    _, (sums, products) = base_and_stores
    cfg = DataConfig(sources=_sources((sums, WEIGHTS[0]), (products, WEIGHTS[1])))
    ds = load_dataset(cfg, seq_len=SEQ, vocab_size=256)
    # Which source each row of a step draws: a pure function of (seed, step, row), by weight.
    which = np.concatenate([ds.train.row_sources(s, seed=5, batch_size=64) for s in range(400)])
    shares = np.bincount(which, minlength=2) / len(which)
    np.testing.assert_allclose(shares, WEIGHTS, atol=0.01)
    for step in range(6):
        batch = _batch(ds, step)
        rows = batch["tokens"].reshape(-1, batch["tokens"].shape[-1])
        drawn = ds.train.row_sources(step, seed=5, batch_size=8)
        # Each row holds its own source's pairs only: sums' prompts have a +, products' a *.
        for row, k in zip(rows, drawn, strict=True):
            assert (ord("+") in row, ord("*") in row) == ((True, False), (False, True))[k]
        # Two processes: each reads its half of each micro-batch, together the global batch.
        halves = [_batch(ds, step, process_index=p, process_count=2) for p in (0, 1)]
        for key in batch:
            np.testing.assert_array_equal(
                np.concatenate([h[key] for h in halves], axis=1), batch[key]
            )
        assert _batch(ds, step)["tokens"].tobytes() == batch["tokens"].tobytes()


def _dpo_flags(stores, *more):
    tables = ", ".join(
        f'{{path = "{p}", weight = {w}}}' for p, w in zip(stores, WEIGHTS, strict=True)
    )
    return ["--set", f"data.sources=[{tables}]", "--set", "preference.loss=dpo", "--set",
            "train.steps=4", "--set", "train.batch_size=16", "--set", "train.grad_accum=2",
            "--set", "train.warmup_steps=0", "--set", "train.lr=3e-3", "--set",
            "train.eval_every=2", "--set", "train.eval_batches=1", "--set",
            "train.checkpoint_every=2", "--set", "sample.max_new_tokens=1", "--set",
            "mesh.data=-1", *more]  # fmt: skip


def test_a_dpo_run_on_a_mixture_of_preference_stores_trains_and_resumes_bit_for_bit(
    tmp_path, base_and_stores, capsys
):
    base, stores = base_and_stores
    args = ["train", "--out", str(tmp_path), "--init-from", str(base), "--name", "mix"]
    assert main([*args, *_dpo_flags(stores)]) == 0
    run = tmp_path / "mix"
    logs = lox.load(run / "metrics" / "run_0")
    loss = [float(x) for x in logs["loss"]]
    assert all(math.isfinite(x) for x in loss) and loss[-1] < loss[0]
    assert loss[0] == pytest.approx(math.log(2), abs=1e-6)  # the policy is the reference
    # Each source's train loss at the first step: ln 2 too, the rows of that source only.
    for name in ("sums", "products"):
        assert float(logs[f"loss/{name}"][0]) == pytest.approx(math.log(2), abs=1e-6)
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    # TRL's metrics as a single store's run logs them, and each source's (val) loss and tokens.
    per_source = {f"{m}/{n}" for m in ("loss", "val_loss", "tokens") for n in ("sums", "products")}
    assert set(METRICS) | {f"val_{k}" for k in METRICS} | per_source <= set(rows[0])
    capsys.readouterr()
    assert main(["eval", "--run", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert " nats/pair (the preference loss), the weighted mean of its sources " in out[0]
    shown = dict(line.split(" ", 1) for line in out[1:])
    assert shown["val_loss/sums"].endswith("nats/pair (weight 0.7)")
    val = [float(shown[f"val_loss/{n}"].split()[0]) for n in ("sums", "products")]
    assert float(out[0].split()[1]) == pytest.approx(np.dot(WEIGHTS, val), rel=1e-6)
    # Resumed from step 2 (as if interrupted there): bit-for-bit the uninterrupted run.
    final = load_run(run)[1]
    shutil.rmtree(run / "checkpoints" / "4")
    assert main(["train", "--resume", str(run)]) == 0
    jax.tree.map(np.testing.assert_array_equal, load_run(run)[1], final)
    # The reference precomputed in one pass over each source's pairs: the same losses.
    pre = ["--set", "preference.precompute_ref=true", "--set", "train.steps=2"]
    assert main([*args[:-1], "pre", *_dpo_flags(stores, *pre)]) == 0
    again = [float(x) for x in lox.load(tmp_path / "pre" / "metrics" / "run_0")["loss"]]
    np.testing.assert_allclose(again, loss[:2], rtol=1e-5)


def test_mixtures_that_cannot_train_a_preference_run_are_refused_in_one_line(
    tmp_path, base_and_stores, capsys, error_line
):
    base, (sums, products) = base_and_stores
    text = tmp_path / "t.txt"
    text.write_text("plain text " * 200)
    other = tmp_path / "u.txt"
    other.write_text("more text " * 200)
    both = f'data.sources=[{{path="{sums}", weight=1}}, {{path="{products}", weight=1}}]'
    plain = f'data.sources=[{{path="{sums}", weight=1}}, {{path="{text}", weight=1}}]'
    texts = f'data.sources=[{{path="{text}", weight=1}}, {{path="{other}", weight=2}}]'
    out = ["train", "--out", str(tmp_path), "--name", "x", "--init-from", str(base)]
    cases = [
        (["--set", plain, "--set", "preference.loss=dpo"],
         f"data.sources[0] ('sums', {sums}) is a preference store (chosen/rejected pairs), but "
         f"data.sources[1] ('t', {text}) holds plain text or token ids, and a preference store "
         "mixes only with other preference stores (a step reads pairs from every source). "
         "Expected every source to be a store made by gpt prepare of prompt/chosen/rejected "
         "JSONL; prepare 't' so, or leave it out of data.sources."),
        (["--set", plain], "is a preference store (chosen/rejected pairs), but data.sources[1]"),
        (["--set", both],
         "data.sources (mixture of sums (0.5, ") ,
        (["--set", both],
         ") are preference stores (chosen/rejected pairs), but preference.loss is not set, and "
         "next-token training would learn the rejected answers too. Add --set "
         "preference.loss=dpo (or ipo, simpo)."),
        (["--set", texts, "--set", "preference.loss=dpo"],
         "preference.loss = 'dpo' trains on chosen/rejected pairs, but data.sources (mixture of "
         "t (0.333, "),
        (["--set", texts, "--set", "preference.loss=dpo"],
         " holds plain text or token ids. Prepare the pairs with gpt prepare PAIRS.jsonl --out "
         "DIR and give those stores as data.sources."),
    ]  # fmt: skip
    for flags, says in cases:
        capsys.readouterr()
        assert main([*out, *flags]) == 2
        assert says in error_line(capsys.readouterr().err)
    assert not (tmp_path / "x").exists()
    # Through the API too, before anything trains: the same line, as a DataError.
    with pytest.raises(DataError, match=r"^data.sources\[1\] \('sums', .*\) is a preference"):
        load_dataset(
            DataConfig(sources=_sources((text, 1), (sums, 1))), seq_len=SEQ, vocab_size=256
        )
