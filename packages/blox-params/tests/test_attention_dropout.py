"""MultiHeadAttention(dropout_rate=...): attention-probability dropout, keyed by the layer's Rng."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx

B, T, D = 2, 8, 16
COUNTER = ("net", "rng", "counter")


def layer(rate, implementation="auto", **kw):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mha = bx.MultiHeadAttention(
        graph / "attn", num_heads=4, head_dim=8, rng=rng, num_kv_heads=2, use_rope=True,
        causal_block=3, implementation=implementation, dropout_rate=rate, **kw,
    )  # fmt: skip
    x = jax.random.normal(jax.random.key(1), (B, T, D))
    _, params = mha(rng.seed(bx.Params(), seed=0), x, causal=True, is_training=False)
    return mha, params, x


def test_evaluation_and_rate_zero_are_the_layer_without_dropout():
    plain, params, x = layer(0.0)
    reference, _ = plain(params, x, causal=True)
    dropping, _, _ = layer(0.3)
    y, after = dropping(params, x, causal=True, is_training=False)
    np.testing.assert_array_equal(y, reference)
    y, after = plain(params, x, causal=True, is_training=True)  # rate 0 trains as it evaluates
    np.testing.assert_array_equal(y, reference)
    assert int(after[COUNTER].value) == int(params[COUNTER].value)  # and draws no key


def test_training_calls_draw_one_key_each_and_repeat_for_the_same_counter():
    mha, params, x = layer(0.3)
    evaluated, _ = mha(params, x, causal=True, is_training=False)
    first, after = mha(params, x, causal=True, is_training=True)
    again, _ = mha(params, x, causal=True, is_training=True)
    second, _ = mha(after, x, causal=True, is_training=True)
    assert int(after[COUNTER].value) == int(params[COUNTER].value) + 1
    np.testing.assert_array_equal(first, again)  # same counter, same masks
    assert not np.allclose(first, second)  # the next key, other masks
    assert not np.allclose(first, evaluated)


def test_the_kept_weights_are_scaled_so_the_expected_output_is_unchanged():
    mha, params, x = layer(0.5)
    evaluated, _ = mha(params, x, causal=True, is_training=False)

    def one(seed):
        return mha(mha.rng.seed(params, seed=seed), x, causal=True, is_training=True)[0]

    mean = jax.vmap(one)(jnp.arange(2000)).mean(axis=0)
    # Each output is a sum of ~T dropped terms of size ~1: the mean of 2000 draws is within a
    # few 1/sqrt(2000) ~ 0.02 of the expectation; without the 1/(1 - rate) scale it is ~half.
    np.testing.assert_allclose(mean, evaluated, atol=0.12)
    assert float(jnp.abs(evaluated).mean()) > 0.3  # so that an unscaled mean would fail


def test_dropped_causal_attention_still_ignores_the_future():
    mha, params, x = layer(0.3)
    changed = x.at[:, 5:].set(7.0)
    y, _ = mha(params, x, causal=True, is_training=True)
    y_changed, _ = mha(params, changed, causal=True, is_training=True)
    np.testing.assert_allclose(y[:, :5], y_changed[:, :5], atol=1e-6)
    assert not np.allclose(y[:, 5:], y_changed[:, 5:])


def test_gradients_flow_through_the_kept_weights():
    mha, params, x = layer(0.3)
    grad = jax.grad(lambda x: jnp.sum(mha(params, x, causal=True, is_training=True)[0] ** 2))(x)
    assert bool(jnp.all(jnp.isfinite(grad))) and float(jnp.abs(grad).max()) > 0


def test_cached_decoding_runs_without_dropout_when_not_training():
    mha, params, x = layer(0.3)
    reference, _ = mha(params, x, causal=True, is_training=False)
    cached = mha.init_cache(params, (B,), max_length=T)
    y, _ = mha(cached, x, decode=True, is_training=False)
    np.testing.assert_allclose(y, reference, atol=1e-5)


def test_auto_runs_the_blocked_core_while_dropping():
    (auto, params, x), (blocked, _, _) = layer(0.3, "auto"), layer(0.3, "blocked")
    jaxprs = [
        str(jax.make_jaxpr(lambda x, m=m: m(params, x, causal=True, is_training=True)[0])(x))
        for m in (auto, blocked)
    ]
    assert jaxprs[0] == jaxprs[1]


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="auto picks cudnn on NVIDIA GPUs only")
def test_auto_keeps_cudnn_when_not_dropping_on_gpu():
    dtype = {"dtype": jnp.bfloat16}
    (auto, params, x), (cudnn, _, _) = layer(0.3, "auto", **dtype), layer(0.0, "cudnn", **dtype)
    evaluate = [
        str(jax.make_jaxpr(lambda x, m=m: m(params, x, causal=True, is_training=False)[0])(x))
        for m in (auto, cudnn)
    ]
    assert evaluate[0] == evaluate[1]


@pytest.mark.parametrize("implementation", ["xla", "cudnn"])
def test_a_core_without_dropout_is_refused_naming_the_options(implementation):
    with pytest.raises(ValueError) as e:
        layer(0.1, implementation)
    assert (
        f"net/attn: dropout_rate=0.1 needs the blocked attention core, but "
        f"implementation='{implementation}' runs jax.nn.dot_product_attention, which has no "
        "dropout. Use implementation='auto'"
    ) in str(e.value)
    assert "or 'blocked', or dropout_rate=0." in str(e.value)


@pytest.mark.parametrize("rate", [1.0, -0.1, "high", None])
def test_a_rate_outside_0_1_is_refused(rate):
    with pytest.raises(ValueError, match=r"net/attn: dropout_rate must be in \[0, 1\), got"):
        layer(rate)


def test_dropout_without_an_rng_says_how_to_pass_one():
    with pytest.raises(bx.RngError, match=r"net/attn: dropout_rate=0.1 needs an Rng.*rng=rng"):
        bx.MultiHeadAttention(bx.Graph("net") / "attn", 2, 4, dropout_rate=0.1)


def test_a_call_that_does_not_say_whether_it_trains_is_refused():
    mha, params, x = layer(0.1)
    with pytest.raises(TypeError, match=r"dropout_rate=0.1, so its call needs is_training=True"):
        mha(params, x, causal=True)
