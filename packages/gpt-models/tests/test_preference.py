"""Preference tuning end to end: gpt prepare of prompt/chosen/rejected JSONL (both of TRL's shapes),
its bad lines, the [preference] section's refusals, and DPO runs: the first step's loss is ln 2,
TRL's metrics reach metrics.csv and gpt eval, a resumed run continues bit for bit, a precomputed
reference gives the losses of one computed in the step, LoRA's reference is its adapters off;
a pair longer than a row is left out and counted, named by file and line; a tuned run exports
merged or as an adapter.
"""

import csv
import dataclasses
import json
import math
import re
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lox
from gpt_models import (
    ConfigError,
    DataError,
    UsageError,
    forward,
    import_hf,
    load_run,
    main,
    prepare,
    resolve_run,
)

PAIRS = [
    {"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(a + b + 1)}
    for a in range(10)
    for b in range(6)
]
CHATS = [
    {
        "prompt": [{"role": "user", "content": f"Say {i}"}],
        "chosen": [{"role": "assistant", "content": str(i)}],
        "rejected": [{"role": "assistant", "content": "no"}],
    }
    for i in range(20)
]
LONG = {"prompt": "9" * 40 + "=", "chosen": "1", "rejected": "2"}
METRICS = [
    "rewards/chosen",
    "rewards/rejected",
    "rewards/margins",
    "rewards/accuracies",
    "logps/chosen",
    "logps/rejected",
]


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_both_shapes_prepare_into_a_preference_store_that_counts_the_answers(tmp_path):
    r = prepare([_jsonl(tmp_path / "p.jsonl", PAIRS)], tmp_path / "s", val_fraction=0.2)
    m = r.manifest
    assert (r.kind, m["pairs"]["train"] + m["pairs"]["val"]) == ("preference", len(PAIRS))
    assert m["examples"]["train"] == 2 * m["pairs"]["train"]
    # The byte tokenizer: each answer's bytes and its end-of-text token count, the prompt not.
    answers = sum(len(p["chosen"]) + len(p["rejected"]) + 2 for p in PAIRS)
    assert m["masked_tokens"]["train"] + m["masked_tokens"]["val"] == answers
    # Conversational (with and without a prompt list): only the last (assistant) turn counts.
    implicit = {
        "chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
        "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Go"}],
    }
    r = prepare(
        [_jsonl(tmp_path / "c.jsonl", [*CHATS, implicit])], tmp_path / "c", val_fraction=0.2
    )
    # (the byte tokenizer's end-of-text is one id, counted after each answer)
    counted = sum(len(c["chosen"][0]["content"]) + len("no") + 2 for c in CHATS) + 7 + 2
    masked = r.manifest["masked_tokens"]
    assert (r.kind, masked["train"] + masked["val"]) == ("preference", counted)


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ({"prompt": "a", "chosen": "b"}, 'the field "rejected" is missing'),
        ({"chosen": "b", "rejected": "c"}, 'the field "prompt" is missing'),
        ({"prompt": "a", "chosen": "b", "rejected": ["c"]}, '"chosen" is str'),
        (
            {"chosen": [{"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
             "rejected": [{"role": "assistant", "content": "d"}]},
            'the last turn of "chosen" is user',
        ),
    ],
)  # fmt: skip
def test_a_bad_preference_line_is_refused_by_file_and_line_and_nothing_is_written(
    tmp_path, line, says
):
    src = _jsonl(tmp_path / "p.jsonl", [PAIRS[0], line])
    with pytest.raises(DataError) as err:
        prepare([src], tmp_path / "out", val_fraction=0.0)
    text = str(err.value)
    assert f"{src}:2 is a preference line, but {says}" in text and "Nothing was written" in text
    assert "\n" not in text and not (tmp_path / "out").exists()


def test_pairs_whose_answers_are_the_same_are_left_out_with_a_note(tmp_path, capsys):
    same = {"prompt": "x", "chosen": "y", "rejected": "y"}
    src = _jsonl(tmp_path / "p.jsonl", [*PAIRS[:10], same, same])
    assert main(["prepare", str(src), "--out", str(tmp_path / "s"), "--val-fraction", "0"]) == 0
    assert (
        f"note: 2 preference pair(s) have a chosen answer identical to the rejected one (first "
        f"{src}:11) and were left out" in capsys.readouterr().err
    )
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["pairs"]["train"] == 10


def test_the_preference_section_refuses_bad_values(make_config):
    with pytest.raises(ConfigError) as err:
        make_config(preference={"loss": "simpo", "beta": 0.0, "precompute_ref": True})
    text = str(err.value)
    assert "preference.beta = 0.0 must be a finite number > 0" in text
    assert "preference.precompute_ref = true with preference.loss = 'simpo'" in text
    with pytest.raises(
        ConfigError, match=r"preference.label_smoothing = 0.5 must be in \[0, 0.5\)"
    ):
        make_config(preference={"loss": "dpo", "label_smoothing": 0.5})
    with pytest.raises(ConfigError, match=r"preference.loss = 'ppo' must be one of"):
        make_config(preference={"loss": "ppo"})


@pytest.fixture(scope="module")
def base_and_store(tmp_path_factory, tiny_llama_folder):
    """The tiny Llama folder to start from and a store of pairs."""
    tmp = tmp_path_factory.mktemp("pref")
    store = tmp / "store"
    # One pair longer than a row of seq_len + 1 = 33 ids: left out and counted, never cut.
    prepare([_jsonl(tmp / "p.jsonl", [*PAIRS, LONG])], store, val_fraction=0.2)
    return tiny_llama_folder, store


def _dpo_flags(store, *more):
    return ["--set", f"data.path={store}", "--set", "preference.loss=dpo", "--set",
            "train.steps=4", "--set", "train.batch_size=16", "--set", "train.grad_accum=2",
            "--set", "train.warmup_steps=0", "--set", "train.lr=3e-3", "--set",
            "train.eval_every=2", "--set", "train.eval_batches=1", "--set",
            "train.checkpoint_every=2", "--set", "sample.max_new_tokens=1", "--set",
            "mesh.data=-1", *more]  # fmt: skip


def test_a_dpo_run_starts_at_ln2_logs_trl_metrics_and_resumes_bit_for_bit(
    tmp_path, base_and_store, capsys
):
    base, store = base_and_store
    args = ["train", "--out", str(tmp_path), "--init-from", str(base)]
    assert main([*args, "--name", "dpo", *_dpo_flags(store)]) == 0
    assert re.search(
        r"note: 1 of the \d+ preference pairs of the (train|val) split of .* have prompt plus "
        r"answer longer than model\.seq_len \+ 1 = 33 tokens and are left out \(it is "
        r"p\.jsonl:61, with 43 tokens; examples are never cut\)\. To keep it, set --set "
        r"model\.seq_len=42 \(or more\), or shorten it\.",
        capsys.readouterr().err,
    )
    run = tmp_path / "dpo"
    logs = lox.load(run / "metrics" / "run_0")
    loss = [float(x) for x in logs["loss"]]
    assert loss[0] == pytest.approx(math.log(2), abs=1e-6)  # the policy is the reference
    assert float(logs["rewards/margins"][0]) == pytest.approx(0.0, abs=1e-6) and loss[-1] < loss[0]
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert set(METRICS) | {f"val_{k}" for k in METRICS} <= set(rows[0])
    capsys.readouterr()
    assert main(["eval", "--run", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("val_loss ") and " nats/pair (the preference loss) " in out[0]
    shown = dict(line.split(" ", 1) for line in out[1:])
    assert shown["val_rewards/accuracies"].endswith("(share of pairs)")
    assert shown["val_logps/chosen"].endswith(" nats")
    assert float(shown["val_logps/chosen"].split()[0]) == pytest.approx(
        float(logs["val_logps/chosen"][-1]), rel=1e-5
    )
    # Resumed from step 2 (as if interrupted there): bit-for-bit the uninterrupted run.
    final = load_run(run)[1]
    shutil.rmtree(run / "checkpoints" / "4")
    assert main(["train", "--resume", str(run)]) == 0
    jax.tree.map(np.testing.assert_array_equal, load_run(run)[1], final)
    # The tuned policy exports as any run: the folder imports back to its weights.
    assert main(["export", str(run), str(tmp_path / "hf")]) == 0
    (back_cfg, back), tokens = import_hf(tmp_path / "hf"), jnp.arange(20)[None] % 17
    np.testing.assert_allclose(
        forward(back, tokens, back_cfg), forward(final, tokens, load_run(run)[0]), atol=1e-5
    )


def test_pairs_too_long_for_a_row_are_named_by_file_and_line(tmp_path, base_and_store, capsys):
    base, _ = base_and_store
    # Two pairs longer than a row of 33 ids (43 and 53 ids with the prompt), at lines 17 and 42,
    # both in the train split (a fixed hash of the file's name and the line).
    rows = [*PAIRS[:16], LONG, *PAIRS[16:40], {**LONG, "prompt": "8" * 50 + "="}, *PAIRS[40:]]
    src, store = _jsonl(tmp_path / "p.jsonl", rows), tmp_path / "s"
    assert main(["prepare", str(src), "--out", str(store), "--val-fraction", "0.2"]) == 0
    pairs = json.loads((store / "manifest.json").read_text())["pairs"]["train"]
    capsys.readouterr()
    flags = _dpo_flags(store, "--set", "train.steps=2")
    assert main(["train", "--out", str(tmp_path), "--init-from", str(base), *flags]) == 0
    assert (
        f"note: 2 of the {pairs} preference pairs of the train split of {store} have prompt plus "
        "answer longer than model.seq_len + 1 = 33 tokens and are left out (the first is "
        "p.jsonl:17; the longest has 53 tokens, at p.jsonl:42; examples are never cut). To keep "
        "them, set --set model.seq_len=52 (or more), or shorten them."
    ) in capsys.readouterr().err.splitlines()


def test_lora_compares_with_its_adapters_off_in_the_step_or_precomputed(tmp_path, base_and_store):
    base, store = base_and_store
    losses = []
    for name, pre in (("lora", "false"), ("pre", "true")):
        flags = _dpo_flags(store, "--set", "lora.rank=4", "--set", "train.steps=2", "--set",
                           f"preference.precompute_ref={pre}")  # fmt: skip
        args = ["train", "--out", str(tmp_path), "--init-from", str(base), "--name", name]
        assert main([*args, *flags]) == 0
        losses.append([float(x) for x in lox.load(tmp_path / name / "metrics" / "run_0")["loss"]])
    assert losses[0][0] == pytest.approx(math.log(2), abs=1e-6) and losses[0][1] != losses[0][0]
    # The reference precomputed in one pass: the losses of the reference in the step.
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    # The tuned adapters export alone, as a PEFT adapter folder.
    assert main(["export", str(tmp_path / "lora"), str(tmp_path / "ad"), "--adapter"]) == 0
    assert (tmp_path / "ad" / "adapter_model.safetensors").is_file()


def test_preference_runs_without_their_data_or_reference_are_refused_in_one_line(
    tmp_path, base_and_store, capsys, error_line
):
    base, store = base_and_store
    text = tmp_path / "t.txt"
    text.write_text("plain text " * 200)
    out = ["train", "--out", str(tmp_path), "--name", "x"]
    cases = [
        (["--set", f"data.path={store}", "--set", "preference.loss=dpo"],
         "the run has no init.source. Add --init-from RUN_OR_HF_DIR"),
        (["--set", f"data.path={store}", "--init-from", str(base)],
         "is a preference store (chosen/rejected pairs), but preference.loss is not set"),
        (["--set", "preference.loss=dpo", "--init-from", str(base)],
         "trains on chosen/rejected pairs, but data.path = (the embedded corpus)"),
        (["--set", f'data.sources=[{{path="{store}", weight=1}}, {{path="{text}", weight=1}}]'],
         "mixes only with other preference stores"),
    ]  # fmt: skip
    for flags, says in cases:
        capsys.readouterr()
        assert main([*out, *flags]) == 2
        assert says in error_line(capsys.readouterr().err)
    assert not (tmp_path / "x").exists()


def test_resolve_run_refuses_dpo_without_init_from(tmp_path, base_and_store, make_config):
    _, store = base_and_store
    cfg = make_config(preference={"loss": "dpo"}, mesh={"data": -1})
    cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, path=str(store)))
    with pytest.raises(UsageError, match="has no init.source"):
        resolve_run(tmp_path / "run", cfg)
