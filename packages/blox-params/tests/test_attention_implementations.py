"""MultiHeadAttention(implementation=...): every core gives the same outputs and gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx

B, T, D = 2, 8, 16


def layer(implementation, heads, kv_heads, **kw):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mha = bx.MultiHeadAttention(
        graph / "attn", num_heads=heads, head_dim=8, rng=rng, num_kv_heads=kv_heads,
        use_rope=True, implementation=implementation, causal_block=3, **kw,
    )  # fmt: skip
    return mha, rng.seed(bx.Params(), seed=0)


def padding(keys, valid):
    return (jnp.arange(keys) < valid)[None, None, None, :]  # a key padding mask, (1, 1, 1, S)


# name -> (keys S, causal, mask): the masks a caller passes, each with blocked's own special case.
MASKS = {
    "none": (T, False, None),
    "causal": (T, True, None),
    "padding": (T, False, padding(T, 5)),
    "causal+padding": (T, True, padding(T, 6)),
    "per-example": (T, False, jnp.array([[1] * 8, [1] * 3 + [0] * 5], bool)[:, None, None, :]),
    "cross, causal (S > T)": (12, True, None),
    "cross, padding (S > T)": (12, False, padding(12, 9)),
}
GQA = {"MHA": (4, 4), "GQA": (4, 2), "MQA": (4, 1)}


def outputs_and_grads(implementation, heads, case, qk_norm=False):
    """The layer's output and the gradients of a loss w.r.t. its inputs."""
    S, causal, mask = case
    mha, params = layer(implementation, *heads, qk_norm=qk_norm)
    x = jax.random.normal(jax.random.key(1), (B, T, D))
    kv = jax.random.normal(jax.random.key(2), (B, S, D)) if S != T else None

    def loss(x, kv):
        y, _ = mha(params, x, kv=kv, mask=mask, causal=causal)
        return jnp.sum(jnp.sin(y)), y

    # Eager: on a 2-core CPU compiling each case costs more than running it op by op.
    (_, y), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(x, kv)
    return y, grads


def assert_same(a, b):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(v, u, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("heads", GQA.values(), ids=GQA.keys())
@pytest.mark.parametrize("case", MASKS.values(), ids=MASKS.keys())
def test_xla_equals_blocked_outputs_and_gradients(case, heads):
    assert_same(outputs_and_grads("blocked", heads, case), outputs_and_grads("xla", heads, case))


def test_xla_equals_blocked_with_qk_norm():
    case, heads = MASKS["causal+padding"], GQA["GQA"]
    blocked = outputs_and_grads("blocked", heads, case, qk_norm=True)
    assert_same(blocked, outputs_and_grads("xla", heads, case, qk_norm=True))


def test_cached_decoding_agrees_across_implementations():
    outs = {}
    for impl in ("blocked", "xla"):
        mha, params = layer(impl, 4, 2)
        cached = mha.init_cache(params, (B,), max_length=6)
        x = jax.random.normal(jax.random.key(3), (B, 6, D))
        y0, cached = mha(cached, x[:, :4], decode=True)  # prefill 4, then one token at a time
        y1, cached = mha(cached, x[:, 4:5], decode=True)
        outs[impl] = jnp.concatenate([y0, y1], axis=1)
    np.testing.assert_allclose(outs["xla"], outs["blocked"], atol=2e-6, rtol=1e-5)


def test_auto_is_blocked_on_cpu():
    x = jax.random.normal(jax.random.key(1), (B, T, D))
    (mha_auto, params), (mha_blocked, _) = layer("auto", 4, 2), layer("blocked", 4, 2)
    jaxpr = str(jax.make_jaxpr(lambda x: mha_auto(params, x, causal=True)[0])(x))
    blocked = str(jax.make_jaxpr(lambda x: mha_blocked(params, x, causal=True)[0])(x))
    assert jaxpr == blocked


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="cudnn is refused only off GPU")
def test_cudnn_off_gpu_is_refused_naming_the_option():
    mha, params = layer("cudnn", 4, 2)
    with pytest.raises(
        ValueError, match=r"net/attn: implementation='cudnn' is NVIDIA's fused"
    ) as e:
        mha(params, jnp.ones((B, T, D)), causal=True)
    assert "implementation='auto' (picks per backend), 'blocked' or 'xla'" in str(e.value)


def test_unknown_implementation_lists_the_choices():
    with pytest.raises(ValueError, match=r"implementation='flash' is not an attention core") as e:
        layer("flash", 4, 2)
    assert "['auto', 'blocked', 'xla', 'cudnn']" in str(e.value)


def bf16_outputs_and_grads(implementation, heads, case):
    """``outputs_and_grads`` with the layer computing in bfloat16 (cudnn's input dtypes)."""
    S, causal, mask = case
    mha, params = layer(implementation, *heads, dtype=jnp.bfloat16)
    x = jax.random.normal(jax.random.key(1), (B, T, D))

    def loss(x):
        y, _ = mha(params, x, mask=mask, causal=causal)
        return jnp.sum(jnp.sin(y.astype(jnp.float32))), y

    (_, y), grads = jax.value_and_grad(loss, has_aux=True)(x)
    return y.astype(jnp.float32), grads


SELF_MASKS = {k: v for k, v in MASKS.items() if v[0] == T}  # cudnn: self-attention cases


def max_error(got, ref):
    pairs = zip(jax.tree.leaves(got), jax.tree.leaves(ref), strict=True)
    return max(float(np.max(np.abs(np.asarray(u, np.float32) - np.asarray(v)))) for u, v in pairs)


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="cudnn runs on NVIDIA GPUs only")
@pytest.mark.parametrize("heads", GQA.values(), ids=GQA.keys())
@pytest.mark.parametrize("case", SELF_MASKS.values(), ids=SELF_MASKS.keys())
def test_cudnn_is_as_close_to_float32_as_blocked_in_bfloat16(case, heads):
    # bfloat16 outputs of two cores differ by rounding (~1e-2 here); each is held to the float32
    # result instead: cudnn's error may not exceed twice the blocked core's.
    ref = outputs_and_grads("blocked", heads, case)
    ref = (ref[0], ref[1][0])  # the output and the gradient w.r.t. x
    blocked = max_error(bf16_outputs_and_grads("blocked", heads, case), ref)
    cudnn = max_error(bf16_outputs_and_grads("cudnn", heads, case), ref)
    assert cudnn <= 2 * blocked + 1e-3, (cudnn, blocked)


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="auto picks cudnn on NVIDIA GPUs only")
def test_auto_is_cudnn_for_16_bit_self_attention_on_gpu():
    x = jax.random.normal(jax.random.key(1), (B, T, D))
    (auto, params), (cudnn, _) = (layer(i, 4, 2, dtype=jnp.bfloat16) for i in ("auto", "cudnn"))
    jaxpr = str(jax.make_jaxpr(lambda x: auto(params, x, causal=True)[0])(x))
    assert jaxpr == str(jax.make_jaxpr(lambda x: cudnn(params, x, causal=True)[0])(x))
