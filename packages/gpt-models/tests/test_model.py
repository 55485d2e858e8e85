import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx
from gpt_models import (
    GPT,
    PRESETS,
    flops_per_token,
    forward,
    gpt,
    init_params,
    loss_fn,
    param_count,
    param_specs,
)

BASE = dataclasses.replace(PRESETS["tiny"].model, seq_len=16, d_model=32, n_layers=2, n_heads=4)
VARIANTS = {
    "tiny-default": {},
    "gpt2-style": {"pos": "learned", "norm": "layernorm", "mlp": "gelu", "qk_norm": False},
    "gqa-swiglu-softcap-untied": {
        "n_kv_heads": 2,
        "mlp": "swiglu",
        "logit_softcap": 15.0,
        "tie_embeddings": False,
    },
    "mqa-remat": {"n_kv_heads": 1, "remat": "full"},
}


def _tokens(batch=2, length=16, seed=0):
    return jax.random.randint(jax.random.key(seed), (batch, length), 0, 256)


@pytest.mark.parametrize("name", VARIANTS)
def test_forward_shapes_and_causality(name):
    cfg = dataclasses.replace(BASE, **VARIANTS[name])
    params = init_params(cfg, jax.random.key(0))
    tokens = _tokens()
    logits = forward(params, tokens, cfg)
    assert logits.shape == (2, 16, 256) and logits.dtype == jnp.float32
    changed = tokens.at[:, 10:].set(7)  # the future must not change earlier logits
    np.testing.assert_allclose(forward(params, changed, cfg)[:, :10], logits[:, :10], atol=1e-5)
    if cfg.logit_softcap:
        assert float(jnp.abs(logits).max()) <= cfg.logit_softcap


def _at(params, *path):
    return params.get(("gpt", "model", *path))


def test_param_tree_follows_options():
    specs = param_specs(dataclasses.replace(BASE, **VARIANTS["gqa-swiglu-softcap-untied"]))
    assert isinstance(specs, bx.Params)
    assert _at(specs, "blocks", "block", "attn", "key").shape == (2, 32, 2, 8)
    assert _at(specs, "blocks", "block", "mlp", "gate_0", "kernel") is not None
    assert _at(specs, "unembed", "kernel").shape == (32, 256)
    assert _at(specs, "pos_embed", "embedding") is None
    assert _at(specs, "final_norm", "bias") is None
    gpt2 = param_specs(dataclasses.replace(BASE, **VARIANTS["gpt2-style"]))
    assert _at(gpt2, "pos_embed", "embedding").shape == (16, 32)
    assert _at(gpt2, "final_norm", "bias") is not None
    assert _at(gpt2, "unembed", "kernel") is None
    assert _at(gpt2, "blocks", "block", "attn", "query_norm", "scale") is None


def test_every_param_carries_logical_axes_with_a_layers_axis_on_blocks():
    specs = param_specs(dataclasses.replace(BASE, **VARIANTS["gqa-swiglu-softcap-untied"]))
    for path, p in specs.items():
        assert p.logical_axes is not None and len(p.logical_axes) == len(p.shape), path
        assert (p.logical_axes[0] == "layers") == ("blocks" in path), path
    out = _at(specs, "blocks", "block", "attn", "out")
    assert out.logical_axes == ("layers", "heads", "head_dim", "embed")


def test_model_is_built_from_blox_modules():
    model = gpt(BASE)
    assert isinstance(model, GPT) and isinstance(model, bx.Module)
    assert isinstance(model.blocks, bx.Repeat)
    assert isinstance(model.block.attn, bx.MultiHeadAttention)
    assert isinstance(model.block.mlp, bx.MLP) and isinstance(model.embed, bx.Embed)
    assert isinstance(model.final_norm, bx.RMSNorm)
    assert isinstance(gpt(dataclasses.replace(BASE, norm="layernorm")).final_norm, bx.LayerNorm)


def test_params_are_locked_so_a_changed_config_fails_by_name():
    params = init_params(BASE, jax.random.key(0))
    wider = dataclasses.replace(BASE, n_kv_heads=2)
    with pytest.raises(ValueError, match=r"gpt/model/blocks/block/attn/key has shape"):
        forward(params, _tokens(), wider)


def test_scan_and_remat_do_not_change_values():
    params = init_params(BASE, jax.random.key(0))
    batch = _tokens(length=17)
    ref = jax.value_and_grad(loss_fn)(params, batch, BASE)
    for change in ({"scan_layers": not BASE.scan_layers}, {"remat": "full"}, {"remat": "dots"}):
        cfg = dataclasses.replace(BASE, **change)
        got = jax.value_and_grad(loss_fn)(params, batch, cfg)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), got, ref)


def test_bf16_compute_keeps_fp32_params_and_logits():
    cfg = dataclasses.replace(BASE, dtype="bfloat16")
    params = init_params(cfg, jax.random.key(0))
    assert all(p.dtype == jnp.float32 for p in jax.tree.leaves(params))
    logits = forward(params, _tokens(), cfg)
    assert logits.dtype == jnp.float32
    ref = forward(params, _tokens(), BASE)
    assert float(jnp.abs(logits - ref).max()) < 0.1


def test_initial_loss_is_near_uniform():
    params = init_params(BASE, jax.random.key(0))
    loss = float(loss_fn(params, _tokens(length=17), BASE))
    assert abs(loss - np.log(256)) < 0.3


def test_counts():
    assert param_count(BASE) == sum(
        x.size for x in jax.tree.leaves(init_params(BASE, jax.random.key(0)))
    )
    assert flops_per_token(BASE) > 6 * 2 * (4 * 32 * 32 + 2 * 32 * 128)
