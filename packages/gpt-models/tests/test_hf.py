"""Hugging Face interop: the GPT-2/Llama architectures, import/export, padded vocabularies.

The golden folders and ``.npz`` files under tests/data are written by ``data/make_hf_golden.py``
with torch + transformers (not needed here): transformers' logits, loss and greedy continuation of
small random models whose every weight, biases included, is non-zero.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import stat
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from gpt_models import (
    PRESETS,
    BPETokenizer,
    CheckpointFormatError,
    ModelConfig,
    default_corpus,
    export_hf,
    forward,
    generate,
    import_hf,
    init_params,
    load_run,
    loss_fn,
    main,
    make_optimizer,
)

DATA = Path(__file__).parent / "data"
GOLDEN = ("hf_gpt2", "hf_llama")


def test_gpt2_presets_are_gpt2_and_llama_tiny_is_llama():
    m = PRESETS["gpt2-small"].model
    assert (m.bias, m.norm_eps, m.vocab_size, m.vocab_real) == (True, 1e-5, 50304, 50257)
    assert (m.pos, m.mlp, m.norm, m.tie_embeddings) == ("learned", "gelu", "layernorm", True)
    llama = PRESETS["llama-tiny"].model
    assert (llama.norm, llama.mlp, llama.pos, llama.tie_embeddings, llama.bias) == (
        "rmsnorm", "swiglu", "rope", False, False,
    )  # fmt: skip
    assert llama.kv_heads < llama.n_heads


def test_padded_ids_are_never_scored_or_sampled():
    cfg = ModelConfig(vocab_size=64, vocab_real=50, seq_len=16, d_model=32, n_layers=1, n_heads=2)
    params = init_params(cfg, jax.random.key(0))
    logits = forward(params, jnp.zeros((1, 4), jnp.int32), cfg)
    assert bool(jnp.all(jnp.isneginf(logits[..., 50:]))) and bool(
        jnp.all(jnp.isfinite(logits[..., :50]))
    )
    out = generate(params, jnp.zeros((4, 1), jnp.int32), cfg, max_new_tokens=12, temperature=2.0,
                   key=jax.random.key(1))  # fmt: skip
    assert int(jnp.max(out)) < 50
    assert bool(jnp.isfinite(loss_fn(params, jnp.zeros((2, 5), jnp.int32), cfg)))


def test_weight_decay_skips_biases_and_norms_by_logical_axes():
    cfg = dataclasses.replace(PRESETS["gpt2-small"].model, vocab_size=64, vocab_real=0,
                              seq_len=8, d_model=16, n_layers=2, n_heads=2)  # fmt: skip
    params = init_params(cfg, jax.random.key(0))
    params = params.map(lambda p: jnp.ones_like(p.value))
    t = dataclasses.replace(PRESETS["tiny"].train, weight_decay=0.5, warmup_steps=0, grad_clip=0.0)
    opt = make_optimizer(t)
    zeros = params.map(lambda p: jnp.zeros_like(p.value))
    updates, _ = opt.update(zeros, opt.init(params), params)
    decayed = {k[-2:]: bool(jnp.any(u.value != 0)) for k, u in updates.items()}
    assert decayed[("attn", "query")] and decayed[("linear_0", "kernel")]
    assert decayed[("embed", "embedding")] and decayed[("pos_embed", "embedding")]
    assert not decayed[("attn", "query_bias")]  # (layers, heads, head_dim): rank 3, still a bias
    assert not decayed[("linear_0", "bias")] and not decayed[("attn_norm", "scale")]
    assert isinstance(opt, optax.GradientTransformation)


@pytest.mark.parametrize("name", GOLDEN)
def test_import_matches_transformers(name):
    gold = np.load(DATA / f"{name}.npz")
    cfg, params = import_hf(DATA / name)
    vocab = gold["logits"].shape[-1]
    assert cfg.model.real_vocab == vocab and cfg.model.vocab_size % 64 == 0
    logits = np.asarray(forward(params, jnp.asarray(gold["tokens"]), cfg))
    assert np.abs(logits[..., :vocab] - gold["logits"]).max() <= 1e-4
    assert np.all(np.isneginf(logits[..., vocab:]))
    loss = float(loss_fn(params, jnp.asarray(gold["tokens"]), cfg))
    assert abs(loss - float(gold["loss"])) <= 1e-5
    prompt = jnp.asarray(gold["tokens"][:1, :4])
    for cache in (True, False):
        out = generate(params, prompt, cfg, max_new_tokens=20, temperature=0.0,
                       key=jax.random.key(0), use_cache=cache)  # fmt: skip
        assert np.asarray(out)[0, -20:].tolist() == gold["greedy"].tolist()


@pytest.mark.parametrize("name", GOLDEN)
def test_round_trip_is_bit_exact(name, tmp_path):
    cfg, params = import_hf(DATA / name)
    export_hf(cfg, params, tmp_path / "out")
    again_cfg, again = import_hf(tmp_path / "out")
    assert again_cfg == cfg
    assert all(np.array_equal(again[k].value, params[k].value) for k in params)
    export_hf(cfg, params, tmp_path / "bf16", dtype="bfloat16")
    _, half = import_hf(tmp_path / "bf16", dtype="bfloat16")
    key = ("gpt", "model", "embed", "embedding")
    assert half[key].value.dtype == jnp.bfloat16
    assert np.array_equal(half[key].value, params[key].value.astype(jnp.bfloat16))


def test_gpt_import_and_export_commands(tmp_path, capsys):
    assert main(["import", str(DATA / "hf_gpt2"), "--name", "g", "--out", str(tmp_path)]) == 0
    cfg, params, step = load_run(tmp_path / "g")
    want_cfg, want = import_hf(DATA / "hf_gpt2")
    assert step == 0 and cfg.model == want_cfg.model
    assert all(np.array_equal(params[k].value, want[k].value) for k in want)
    assert main(["export", str(tmp_path / "g"), str(tmp_path / "hf")]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == [
        "GPT2LMHeadModel"
    ]
    capsys.readouterr()
    assert main(["import", str(DATA / "hf_gpt2"), "--name", "g", "--out", str(tmp_path)]) == 2
    assert "exists already" in capsys.readouterr().err


def test_export_refuses_a_model_without_hf_equivalent(tmp_path):
    tiny = PRESETS["tiny"].model
    cfg = dataclasses.replace(tiny, d_model=32, n_layers=1, n_heads=2, seq_len=8)
    refused = "is neither GPT-2 .* nor Llama .*, nor one of their variants \\(Qwen2, "
    with pytest.raises(CheckpointFormatError, match=refused) as err:
        export_hf(cfg, init_params(cfg, jax.random.key(0)), tmp_path / "out")
    gpt2_flags = ("--set model.norm=layernorm --set model.pos=learned --set model.mlp=gelu "
                  "--set model.bias=true --set model.qk_norm=false")  # fmt: skip
    llama_flags = "--set model.mlp=swiglu --set model.qk_norm=false"
    assert f"train one with {gpt2_flags} (GPT-2) or {llama_flags} (Llama)" in str(err.value)
    # Following the hint gives a model that exports.
    for flags in (gpt2_flags, llama_flags):
        settings = dict(re.findall(r"--set model\.(\w+)=(\S+)", flags))
        fixed = dataclasses.replace(
            cfg, **{k: {"false": False, "true": True}.get(v, v) for k, v in settings.items()}
        )
        export_hf(fixed, init_params(fixed, jax.random.key(0)), tmp_path / fixed.mlp)
    # Llama with a QK-norm is Qwen3; with an output soft-cap too, no family has it.
    cfg = dataclasses.replace(cfg, mlp="swiglu")
    export_hf(cfg, init_params(cfg, jax.random.key(0)), tmp_path / "qwen3")
    assert '"Qwen3ForCausalLM"' in (tmp_path / "qwen3" / "config.json").read_text()
    cfg = dataclasses.replace(cfg, logit_softcap=30.0)
    with pytest.raises(CheckpointFormatError, match="model.logit_softcap = 30.0 has no Qwen3ForC"):
        export_hf(cfg, init_params(cfg, jax.random.key(0)), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _source_folder(tmp_path: Path) -> Path:
    """A GPT-2-shaped Hugging Face folder whose vocabulary holds the byte tokenizer's ids."""
    cfg = dataclasses.replace(PRESETS["gpt2-small"].model, vocab_size=320, vocab_real=300,
                              seq_len=32, d_model=32, n_layers=1, n_heads=2)  # fmt: skip
    return export_hf(cfg, init_params(cfg, jax.random.key(3)), tmp_path / "src")


def test_train_init_from_a_hf_folder_starts_at_its_weights(tmp_path, capsys):
    source = _source_folder(tmp_path)
    args = ["train", "--init-from", str(source), "--out", str(tmp_path), "--name", "ft",
            "--set", "train.steps=3", "--set", "train.batch_size=8", "--set",
            "train.eval_batches=1", "--set", "sample.max_new_tokens=4",
            "--set", "model.dropout=0.1"]  # fmt: skip
    assert main(args) == 0
    cfg, params, step = load_run(tmp_path / "ft")
    src_cfg, src = import_hf(source)
    # The source's architecture; scan_layers (how, not what) comes from the base config (tiny),
    # dropout (a training option, not the architecture) from --set.
    expected = dataclasses.replace(src_cfg.model, scan_layers=False, dropout=0.1)
    assert step == 3 and cfg.model == expected
    assert cfg.init.source == str(source.absolute())
    assert f'source = "{source.absolute()}"' in (tmp_path / "ft" / "config.toml").read_text()
    key = ("gpt", "model", "pos_embed", "embedding")
    moved = np.abs(np.asarray(params[key].value) - np.asarray(src[key].value)).max()
    assert 0 < moved < 0.1  # three small steps away from the source, not a fresh init


def test_init_from_refuses_an_architecture_change_and_a_larger_vocabulary(tmp_path, capsys):
    source = _source_folder(tmp_path)
    args = ["train", "--init-from", str(source), "--out", str(tmp_path), "--name", "x"]
    assert main([*args, "--set", "model.n_layers=2"]) == 2
    err = capsys.readouterr().err
    assert "model.n_layers = 2 changes the architecture of init.source" in err
    assert "which has model.n_layers = 1" in err
    small = tmp_path / "small"
    shutil.copytree(DATA / "hf_gpt2", small)
    assert main(["train", "--init-from", str(small), "--out", str(tmp_path), "--name", "y"]) == 2
    assert "has 256 ids but init.source" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


# The flags that make `gpt train` train a GPT-2-shaped model small enough for a test.
GPT2_TINY = [
    "--set", "model.norm=layernorm", "--set", "model.pos=learned", "--set", "model.mlp=gelu",
    "--set", "model.bias=true", "--set", "model.qk_norm=false", "--set", "model.seq_len=32",
    "--set", "model.d_model=32", "--set", "model.n_layers=1", "--set", "model.n_heads=2",
    "--set", "train.batch_size=8", "--set", "train.warmup_steps=1", "--set", "train.eval_batches=1",
    "--set", "sample.max_new_tokens=4", "--set", "mesh.data=-1",
]  # fmt: skip


def test_export_modes_follow_the_umask(tmp_path):
    cfg = dataclasses.replace(PRESETS["gpt2-small"].model, vocab_size=320, vocab_real=300,
                              seq_len=32, d_model=32, n_layers=1, n_heads=2)  # fmt: skip
    tok = BPETokenizer.train([default_corpus()[:20_000]], vocab_size=300)
    old = os.umask(0o027)
    try:
        out = export_hf(cfg, init_params(cfg, jax.random.key(0)), tmp_path / "new" / "hf",
                        tokenizer=tok)  # fmt: skip
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (out, out.parent, *out.iterdir())}
    assert modes == {
        "hf": 0o750, "new": 0o750, "config.json": 0o640, "model.safetensors": 0o640,
        "generation_config.json": 0o640, "tokenizer.json": 0o640, "tokenizer_config.json": 0o640,
    }  # fmt: skip
    assert sorted(p.name for p in tmp_path.rglob("*")) == sorted(modes)  # no partial folder left


@pytest.mark.interop
def test_transformers_generate_stops_at_the_end_of_text(tmp_path, capsys):
    """A byte-level run trained on a store of one short document learns to end it with NUL; the
    export names NUL as eos, so transformers' generate stops right after the document's end."""
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch")
    docs = tmp_path / "docs.jsonl"
    docs.write_text('{"text": "the cat sat."}\n' * 400)
    assert (
        main(["prepare", str(docs), "--out", str(tmp_path / "store"), "--val-fraction", "0.1"]) == 0
    )
    args = ["train", "--out", str(tmp_path), "--name", "cat", *GPT2_TINY, "--set",
            f"data.path={tmp_path / 'store'}", "--set", "train.steps=60", "--set", "train.lr=1e-2"]  # fmt: skip
    assert main(args) == 0
    assert main(["export", str(tmp_path / "cat"), str(tmp_path / "hf")]) == 0
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    assert tok("héllo Ā").input_ids == list("héllo Ā".encode())  # the byte tokenizer's ids
    prompt = tok("the cat", return_tensors="pt")
    out = model.generate(**prompt, max_new_tokens=20, do_sample=False)[0].tolist()
    assert out[prompt.input_ids.shape[1] :] == list(b" sat.\0")  # stopped at eos, not after 20
