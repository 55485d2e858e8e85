"""MultiHeadAttention's model-family options: sliding windows, logit scale and soft-cap, biases on
some projections, QK-norm over all heads, per-call RoPE base; RMSNorm's ``1 + w`` form; and
``Repeat(per_layer=...)``, which hands each copy its own window."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def _mha(**kwargs):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    options = {"num_kv_heads": 2, "use_rope": True, **kwargs}
    mha = bx.MultiHeadAttention(graph / "attn", 4, 8, rng=rng, **options)
    return mha, rng.seed(bx.Params(), seed=0)


def _reference(q, k, v, window, scale, softcap):
    """Causal softmax attention in numpy, heads repeated for the grouped keys."""
    T, S = q.shape[1], k.shape[1]
    k, v = (np.repeat(a, q.shape[2] // a.shape[2], axis=2) for a in (k, v))
    logits = np.einsum("bthd,bshd->bhts", q, k) * scale
    if softcap:
        logits = softcap * np.tanh(logits / softcap)
    t, s = np.arange(T)[:, None] + S - T, np.arange(S)[None, :]
    seen = (s <= t) & ((t - s < window) if window else True)
    logits = np.where(seen, logits, -np.inf)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("bhts,bshd->bthd", weights, v)


@pytest.mark.parametrize("implementation", ["blocked", "xla"])
def test_the_window_scale_and_softcap_match_a_reference(implementation):
    softcap = 0.5 if implementation == "blocked" else 0.0
    mha, params = _mha(use_rope=False, scale=0.3, logit_softcap=softcap,
                       implementation=implementation)  # fmt: skip
    x = jax.random.normal(jax.random.key(0), (2, 9, 16))
    out, params = mha(params, x, causal=True, window=3)
    w = {k[-1]: np.asarray(v.value) for k, v in params.items() if k[1] == "attn"}
    q, k, v = (np.einsum("btd,dhe->bthe", np.asarray(x), w[n]) for n in ("query", "key", "value"))
    want = np.einsum("bthe,hed->btd", _reference(q, k, v, 3, 0.3, softcap), w["out"])
    np.testing.assert_allclose(out, want, atol=1e-5)


def test_a_window_holds_in_every_core_and_while_decoding_past_it():
    x = jax.random.normal(jax.random.key(1), (2, 10, 16))
    outs = {}
    for implementation in ("blocked", "xla"):
        mha, params = _mha(implementation=implementation)
        outs[implementation], params = mha(params, x, causal=True, window=3)
    np.testing.assert_allclose(outs["blocked"], outs["xla"], atol=1e-5)
    plain, _ = mha(params, x, causal=True)
    assert not np.allclose(plain[:, 3:], outs["xla"][:, 3:], atol=1e-3)  # the window matters
    np.testing.assert_allclose(plain[:, :3], outs["xla"][:, :3], atol=1e-5)  # not yet past it
    cache = mha.init_cache(params, (2,), 10)
    steps = []
    for t in range(10):  # one token at a time, well past the window of 3
        y, cache = mha(cache, x[:, t : t + 1], decode=True, window=jnp.int32(3))
        steps.append(y)
    np.testing.assert_allclose(jnp.concatenate(steps, 1), outs["xla"], atol=1e-5)


def test_no_window_is_none_or_zero_and_the_rope_base_can_change_per_call():
    x = jax.random.normal(jax.random.key(2), (1, 6, 16))
    mha, params = _mha()
    plain, params = mha(params, x, causal=True)
    np.testing.assert_allclose(mha(params, x, causal=True, window=0)[0], plain, atol=1e-6)
    other, _ = mha(params, x, causal=True, rope_base=100.0)
    assert not np.allclose(other, plain, atol=1e-3)
    again, _ = _mha(rope_base=100.0)[0](params, x, causal=True)
    np.testing.assert_allclose(other, again, atol=1e-6)


def test_biases_on_some_projections_and_a_qk_norm_over_all_heads():
    mha, params = _mha(use_bias=("query", "key", "value"), qk_norm="all")
    _, params = mha(params, jnp.ones((1, 3, 16)), causal=True)
    shapes = {k[-2] if k[-1] == "scale" else k[-1]: v.value.shape for k, v in params.items()
              if k[1] == "attn"}  # fmt: skip
    assert shapes == {"query": (16, 4, 8), "key": (16, 2, 8), "value": (16, 2, 8),
                      "out": (4, 8, 16), "query_bias": (4, 8), "key_bias": (2, 8),
                      "value_bias": (2, 8), "query_norm": (4, 8), "key_norm": (2, 8)}  # fmt: skip
    gemma, params = _mha(qk_norm=True, qk_norm_offset=1.0)
    _, params = gemma(params, jnp.ones((1, 3, 16)), causal=True)
    assert float(jnp.abs(params[("net", "attn", "query_norm", "scale")].value).max()) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"use_bias": ("query", "ouput")}, "use_bias names ['ouput'], which are not projections"),
        ({"qk_norm": "heads"}, "qk_norm='heads' is not a QK-norm"),
        ({"logit_softcap": -1.0}, "logit_softcap must be a number >= 0, got -1.0"),
        ({"logit_softcap": 50.0, "implementation": "xla"}, "needs the blocked attention core"),
    ],
)
def test_bad_options_are_refused_by_name(kwargs, needle):
    with pytest.raises(ValueError, match=r"net/attn: ") as err:
        _mha(**kwargs)
    assert needle in str(err.value)


def test_rmsnorm_one_plus_w_is_the_plain_norm_with_the_scale_moved_by_one():
    x = jnp.array([[1.0, -2.0, 3.0]])
    plain, p = bx.RMSNorm(bx.Graph("a") / "n")(bx.Params(), x)
    gemma = bx.RMSNorm(bx.Graph("b") / "n", scale_offset=1.0)
    w = bx.Params({("b", "n", "scale"): bx.Param(jnp.array([0.5, -1.0, 0.0]))})
    y, _ = gemma(w, x)
    np.testing.assert_allclose(y, plain * jnp.array([1.5, 0.0, 1.0]), atol=1e-6)


class _Windowed(bx.Module):
    def __init__(self, graph, rng):
        super().__init__(graph)
        self.attn = bx.MultiHeadAttention(graph / "attn", 2, 4, rng=rng, use_rope=True)

    def __call__(self, params, x, window=None):
        y, params = self.attn(params, x, causal=True, window=window)
        return x + y, params


@pytest.mark.parametrize("is_static", [False, True])
def test_repeat_gives_each_copy_its_own_keyword(is_static):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    node = graph / "blocks"
    layer = _Windowed(node / "block", rng)
    stack = bx.Repeat(node, layer, 2, rng=rng, per_layer={"window": [2, 0]}, is_static=is_static)
    x = jax.random.normal(jax.random.key(0), (1, 6, 8))
    y, params = stack(rng.seed(bx.Params(), seed=0), x)
    by_hand = x
    for i, window in enumerate((2, 0)):
        one = params.map(lambda p, i=i: p.value[i] if p.value.ndim else p.value)
        by_hand, _ = layer(one, by_hand, window=window)
    np.testing.assert_allclose(y, by_hand, atol=1e-5)


def test_repeat_refuses_per_layer_values_of_the_wrong_length():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    node = graph / "blocks"
    with pytest.raises(ValueError, match=r"per_layer\['window'\] has 3 values, but the layer "):
        bx.Repeat(node, _Windowed(node / "block", rng), 2, rng=rng, per_layer={"window": [1, 2, 3]})
