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


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
@pytest.mark.parametrize("per_head", [True, False])
def test_user_mask_with_grouped_heads_and_causal(kv_heads, per_head):
    # A per-head mask is split over the KV groups; a head-shared one is broadcast, never copied.
    mha, params = _mha(num_heads=4, head_dim=3, num_kv_heads=kv_heads)
    x = jax.random.normal(jax.random.key(1), (2, 5, 6))
    shape = (2, 4, 5, 5) if per_head else (2, 1, 1, 5)
    user = jax.random.bernoulli(jax.random.key(3), 0.7, shape).at[..., 0].set(True)
    y, params = mha(params, x, mask=user, causal=True)
    mask = np.asarray(user) & np.tril(np.ones((5, 5), bool))
    ref = _reference(params, np.asarray(x), np.asarray(x), mask, 4, kv_heads)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_mask_that_would_add_batch_axes_is_refused():
    mha, params = _mha(num_heads=2, head_dim=4)
    with pytest.raises(ValueError, match=r"mask of shape \(3, 2, 2, 5, 5\) does not broadcast"):
        mha(params, jnp.ones((2, 5, 8)), mask=jnp.ones((3, 2, 2, 5, 5), bool))


def test_several_leading_batch_axes_equal_one_flattened_axis():
    mha, params = _mha(num_heads=2, head_dim=4)
    x = jax.random.normal(jax.random.key(1), (2, 3, 5, 8))
    y, params = mha(params, x, causal=True)
    flat, _ = mha(params, x.reshape(6, 5, 8), causal=True)
    np.testing.assert_allclose(y, flat.reshape(y.shape), rtol=1e-6)


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


@pytest.mark.parametrize("options", [
    {}, {"use_rope": True, "num_kv_heads": 2, "qk_norm": True},
    {"use_rope": True, "rope_scaling": bx.RopeScaling("llama3", 8.0, original_max_positions=16)},
])  # fmt: skip
def test_cached_decoding_equals_one_uncached_causal_call(options):
    mha, params = _mha(num_heads=4, head_dim=4, **options)
    x = jax.random.normal(jax.random.key(1), (2, 7, 8))
    full, params = mha(params, x, causal=True)
    params = params.locked()
    cached = mha.init_cache(params, (2,), max_length=9)
    assert cached.is_locked and not cached[("net", "attn", "cache_key")].trainable
    y, cached = mha(cached, x[:, :3], decode=True)  # prefill
    outs = [y]
    for t in range(3, 7):  # then one token per call, under jit like a decode loop
        y, cached = jax.jit(lambda p, x: mha(p, x, decode=True))(cached, x[:, t : t + 1])
        outs.append(y)
    np.testing.assert_allclose(jnp.concatenate(outs, axis=1), full, rtol=1e-5, atol=1e-5)
    assert int(cached[("net", "attn", "cache_index")].value) == 7
    # A new cache of another size replaces the old one.
    again = mha.init_cache(cached, (2,), max_length=4)
    assert again[("net", "attn", "cache_key")].shape == (2, 4, options.get("num_kv_heads", 4), 4)
    assert int(again[("net", "attn", "cache_index")].value) == 0


@pytest.mark.parametrize("implementation", ["blocked", "xla"])
def test_zero_queries_give_an_empty_output(implementation):
    mha, params = _mha(num_heads=2, head_dim=4, implementation=implementation)
    _, params = mha(params, jnp.ones((1, 3, 8)), causal=True)
    y, _ = mha(params, jnp.ones((1, 0, 8)), causal=True)
    assert y.shape == (1, 0, 8)
    y, _ = mha(params, jnp.ones((1, 0, 8)), kv=jnp.ones((1, 3, 8)))
    assert y.shape == (1, 0, 8)


def test_decode_without_a_cache_says_how_to_make_one():
    mha, params = _mha(num_heads=2, head_dim=4)
    _, params = mha(params, jnp.ones((1, 3, 8)))
    with pytest.raises(bx.MissingParamError, match=r"decode=True.*mha.init_cache\(params"):
        mha(params, jnp.ones((1, 1, 8)), decode=True)
    cached = mha.init_cache(params, (3,), max_length=4)
    with pytest.raises(ValueError, match=r"cache was made for batch shape \(3,\).*\(1,\)"):
        mha(cached, jnp.ones((1, 1, 8)), decode=True)


def test_qk_norm_normalises_queries_and_keys_with_learnt_scales():
    mha, params = _mha(num_heads=2, head_dim=4, qk_norm=True)
    x = 100.0 * jax.random.normal(jax.random.key(1), (1, 3, 8))
    y, params = mha(params, x, causal=True)
    assert params[("net", "attn", "query_norm", "scale")].shape == (4,)
    assert params[("net", "attn", "key_norm", "scale")].shape == (4,)
    # Logits stay bounded by head_dim**0.5 (unit-RMS q and k), so no row is one-hot.
    plain, plain_params = _mha(num_heads=2, head_dim=4)
    _, plain_params = plain(plain_params, x, causal=True)
    assert bool(jnp.all(jnp.isfinite(y)))
    assert not any(p[-1].endswith("norm") for p in plain_params)


def test_metadata_reaches_each_param_and_unknown_names_are_refused():
    axes = {
        "query": {"logical_axes": ("embed", "heads", "head_dim")},
        "key_norm": {"logical_axes": (None,)},
    }
    mha, params = _mha(num_heads=2, head_dim=4, qk_norm=True, metadata=axes)
    _, params = mha(params, jnp.ones((1, 3, 8)))
    assert params[("net", "attn", "query")].logical_axes == ("embed", "heads", "head_dim")
    assert params[("net", "attn", "key_norm", "scale")].logical_axes == (None,)
    assert params[("net", "attn", "out")].logical_axes is None
    with pytest.raises(ValueError, match=r"metadata names unknown parameters \['qurey'\].*'query'"):
        _mha(num_heads=2, head_dim=4, metadata={"qurey": {}})


def test_out_init_initialises_the_output_projection():
    mha, params = _mha(num_heads=2, head_dim=4, out_init=jax.nn.initializers.zeros)
    y, params = mha(params, jnp.ones((1, 3, 8)))
    assert float(jnp.abs(params[("net", "attn", "out")].value).max()) == 0.0
    assert float(jnp.abs(y).max()) == 0.0


@pytest.mark.parametrize(
    ("kv_heads", "mask", "T", "S"),
    [
        (4, "none", 7, 7),
        (2, "per_head", 7, 7),
        (4, "padding", 5, 8),
        (2, "none", 5, 8),
        (4, "per_head", 6, 4),
        (2, "padding", 6, 4),
    ],
)
def test_causal_blocks_equal_one_block_in_values_and_gradients(kv_heads, mask, T, S):
    # Blocks of 3 query rows: 7 rows -> 3 + 3 + 1; queries aligned to the end of longer keys;
    # more queries than keys (the first rows see no key) falls back to one block.
    mha, params = _mha(num_heads=4, head_dim=3, num_kv_heads=kv_heads, causal_block=3)
    one, _ = _mha(num_heads=4, head_dim=3, num_kv_heads=kv_heads, causal_block=64)
    x = jax.random.normal(jax.random.key(1), (2, T, 6))
    kv = jax.random.normal(jax.random.key(2), (2, S, 6))
    user = {
        "none": None,
        "per_head": jax.random.bernoulli(jax.random.key(3), 0.7, (2, 4, T, S)).at[..., 0].set(True),
        "padding": jnp.arange(S)[None, None, None, :] < jnp.array([S, S - 2])[:, None, None, None],
    }[mask]
    _, params = mha(params, x, kv=kv, causal=True)  # initialised once, used by both

    def loss(module, params, x, kv):
        y, _ = module(params, x, kv=kv, mask=user, causal=True)
        return jnp.sum(jnp.sin(y)), y

    (_, y), grads = jax.value_and_grad(loss, argnums=(2, 3), has_aux=True)(mha, params, x, kv)
    (_, y1), grads1 = jax.value_and_grad(loss, argnums=(2, 3), has_aux=True)(one, params, x, kv)
    np.testing.assert_allclose(y, y1, rtol=1e-5, atol=1e-6)
    for g, g1 in zip(grads, grads1):
        np.testing.assert_allclose(g, g1, rtol=1e-5, atol=1e-6)
    tri = np.arange(T)[:, None] + (S - T) >= np.arange(S)[None, :]
    full = tri if user is None else np.asarray(user) & tri
    ref = _reference(params, np.asarray(x), np.asarray(kv), full, 4, kv_heads)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_causal_block_must_be_a_positive_int():
    with pytest.raises(ValueError, match=r"causal_block must be a positive int, got 0\."):
        _mha(num_heads=2, head_dim=2, causal_block=0)
