"""Linear and Embed."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def _setup():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    return graph, rng, rng.seed(bx.Params(), seed=0)


def test_linear_matches_matmul_and_metadata():
    graph, rng, params = _setup()
    lin = bx.Linear(
        graph / "lin",
        4,
        rng=rng,
        kernel_metadata={"logical_axes": ("embed", "mlp")},
        bias_metadata={"logical_axes": ("mlp",)},
    )
    x = jnp.arange(6.0).reshape(2, 3)
    y, params = lin(params, x)
    w, b = params[("net", "lin", "kernel")], params[("net", "lin", "bias")]
    np.testing.assert_allclose(y, x @ w.value + b.value, rtol=1e-6)
    assert w.logical_axes == ("embed", "mlp") and b.logical_axes == ("mlp",)


def test_linear_without_bias_and_leading_axes():
    graph, rng, params = _setup()
    lin = bx.Linear(graph / "lin", 2, rng=rng, use_bias=False)
    y, params = lin(params, jnp.ones((5, 7, 3)))
    assert y.shape == (5, 7, 2) and ("net", "lin", "bias") not in params


def test_linear_mixed_precision():
    graph, rng, params = _setup()
    lin = bx.Linear(graph / "lin", 2, rng=rng, dtype=jnp.bfloat16)
    y, params = lin(params, jnp.ones((1, 3)))
    assert y.dtype == jnp.bfloat16 and params[("net", "lin", "kernel")].dtype == jnp.float32
    half = bx.Linear(graph / "half", 2, rng=rng, param_dtype=jnp.bfloat16)
    y, params = half(params, jnp.ones((1, 3), jnp.bfloat16))
    assert y.dtype == jnp.bfloat16 and params[("net", "half", "kernel")].dtype == jnp.bfloat16


def test_linear_config_errors():
    graph = bx.Graph("net")
    with pytest.raises(ValueError, match=r"net/a: output_size must be a positive int, got 0"):
        bx.Linear(graph / "a", 0)
    lin = bx.Linear(graph / "b", 2, kernel_init=jax.nn.initializers.zeros)
    with pytest.raises(ValueError, match="got a scalar"):
        lin(bx.Params(), jnp.float32(1.0))


def test_embed_lookup_and_attend_tie_weights():
    graph, rng, params = _setup()
    embed = bx.Embed(graph / "embed", vocab_size=11, embed_dim=4, rng=rng)
    ids = jnp.array([[1, 2], [3, 10]])
    h, params = embed(params, ids)
    table = params[("net", "embed", "embedding")].value
    np.testing.assert_array_equal(h, table[ids])
    logits, params = embed.attend(params, h)
    assert logits.shape == (2, 2, 11)
    np.testing.assert_allclose(logits, h @ table.T, rtol=1e-6)


def test_embed_errors():
    graph, rng, params = _setup()
    embed = bx.Embed(graph / "embed", vocab_size=5, embed_dim=4, rng=rng)
    with pytest.raises(TypeError, match=r"Embed net/embed looks up integer ids, got dtype float32"):
        embed(params, jnp.ones(3))
    with pytest.raises(ValueError, match=r"attend: inputs have \(3,\) features.*expected 4"):
        embed.attend(params, jnp.ones((2, 3)))


def test_embed_attend_takes_nested_lists():
    graph = bx.Graph("lm")
    rng = bx.Rng(graph / "rng")
    embed = bx.Embed(graph / "embed", vocab_size=5, embed_dim=2, rng=rng)
    logits, _ = embed.attend(rng.seed(bx.Params(), seed=0), [[1.0, 0.0]])
    assert logits.shape == (1, 5)
