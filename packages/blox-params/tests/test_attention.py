"""MultiHeadAttention: reference values, masks, GQA, RoPE, cross-attention."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def _mha(**kwargs):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mha = bx.MultiHeadAttention(graph / "attn", rng=rng, **kwargs)
    return mha, rng.seed(bx.Params(), seed=0)


def _reference(params, x, kv, mask, num_heads, num_kv_heads):
    p = {k[-1]: v.value for k, v in params.items() if k[1] == "attn"}
    q = np.einsum("btd,dhk->bthk", x, p["query"])
    k = np.einsum("bsd,dhk->bshk", kv, p["key"]).repeat(num_heads // num_kv_heads, axis=2)
    v = np.einsum("bsd,dhk->bshk", kv, p["value"]).repeat(num_heads // num_kv_heads, axis=2)
    logits = np.einsum("bthk,bshk->bhts", q, k) / np.sqrt(q.shape[-1])
    logits = np.where(mask, logits, -1e30)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    out = np.einsum("bhts,bshk->bthk", w, v)
    return np.einsum("bthk,hko->bto", out, p["out"])


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_matches_reference_with_causal_mask(kv_heads):
    mha, params = _mha(num_heads=4, head_dim=3, num_kv_heads=kv_heads)
    x = jax.random.normal(jax.random.key(1), (2, 5, 6))
    y, params = mha(params, x, causal=True)
    mask = np.tril(np.ones((5, 5), bool))[None, None]
    ref = _reference(params, np.asarray(x), np.asarray(x), mask, 4, kv_heads)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    assert params[("net", "attn", "key")].shape == (6, kv_heads, 3)


def test_causal_outputs_ignore_the_future():
    mha, params = _mha(num_heads=2, head_dim=4, use_rope=True)
    x = jax.random.normal(jax.random.key(1), (1, 6, 8))
    y, params = mha(params, x, causal=True)
    y2, _ = mha(params, x.at[:, 4:].set(0.0), causal=True)
    np.testing.assert_allclose(y[:, :4], y2[:, :4], rtol=1e-5)


def test_padding_mask_and_cross_attention():
    mha, params = _mha(num_heads=2, head_dim=4, output_size=3)
    x = jax.random.normal(jax.random.key(1), (2, 3, 8))
    kv = jax.random.normal(jax.random.key(2), (2, 5, 6))
    valid = jnp.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    y, params = mha(params, x, kv=kv, mask=valid[:, None, None, :])
    assert y.shape == (2, 3, 3)
    ref = _reference(params, np.asarray(x), np.asarray(kv), np.asarray(valid)[:, None, None], 2, 2)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    changed = kv.at[0, 3:].set(100.0)  # padded keys must not matter
    np.testing.assert_allclose(
        mha(params, x, kv=changed, mask=valid[:, None, None, :])[0][0], y[0], rtol=1e-5
    )


def test_bad_mask_shape_explains_padding_layout():
    mha, params = _mha(num_heads=2, head_dim=4)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 5\).*mask\[:, None, None, :\]"):
        mha(params, jnp.ones((2, 5, 8)), mask=jnp.ones((2, 5), bool))


def test_head_config_errors():
    with pytest.raises(ValueError, match=r"num_heads=4 must be .* of num_kv_heads=3"):
        _mha(num_heads=4, head_dim=2, num_kv_heads=3)
    with pytest.raises(ValueError, match="RoPE needs an even head_dim"):
        _mha(num_heads=4, head_dim=3, use_rope=True)
    for name, kwargs in [
        ("num_heads", {"num_heads": 0, "head_dim": 2}),
        ("head_dim", {"num_heads": 2, "head_dim": 0}),
        ("num_kv_heads", {"num_heads": 2, "head_dim": 2, "num_kv_heads": 0}),
        ("output_size", {"num_heads": 2, "head_dim": 2, "output_size": -4}),
    ]:
        got = next(v for k, v in kwargs.items() if k == name)
        with pytest.raises(ValueError, match=rf"{name} must be a positive int, got {got}\."):
            _mha(**kwargs)


def test_rope_preserves_norm_and_relative_positions():
    x = jax.random.normal(jax.random.key(0), (4, 1, 8))
    rotated = bx.rope(x, jnp.arange(4))
    np.testing.assert_allclose(
        jnp.linalg.norm(rotated, axis=-1), jnp.linalg.norm(x, axis=-1), rtol=1e-5
    )
    q, k = x[0:1], x[1:2]
    a = jnp.sum(bx.rope(q, jnp.array([2])) * bx.rope(k, jnp.array([5])))
    b = jnp.sum(bx.rope(q, jnp.array([10])) * bx.rope(k, jnp.array([13])))
    np.testing.assert_allclose(a, b, rtol=1e-4)


def test_batch_mismatch_between_x_and_kv_names_both_shapes():
    mha, params = _mha(num_heads=2, head_dim=4)
    with pytest.raises(ValueError, match=r"batch axes of x \(2, 5, 8\) and kv \(3, 7, 8\)"):
        mha(params, jnp.ones((2, 5, 8)), kv=jnp.ones((3, 7, 8)))
