"""Sequential and MLP."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def test_sequential_routes_keyword_arguments():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    seq = graph / "seq"
    model = bx.Sequential(
        seq,
        [
            bx.Linear(seq / "l1", 8, rng=rng),
            jax.nn.relu,
            bx.Dropout(seq / "drop", 0.5, rng=rng),
            bx.BatchNorm(seq / "bn"),
        ],
    )
    params = rng.seed(bx.Params(), seed=0)
    y, params = model(params, jnp.ones((4, 3)), is_training=True)
    y_eval, _ = model(params, jnp.ones((4, 3)), is_training=False)
    assert y.shape == y_eval.shape == (4, 8)
    with pytest.raises(TypeError, match=r"keyword arguments \['is_trainig'\] that none"):
        model(params, jnp.ones((4, 3)), is_training=True, is_trainig=True)


def test_sequential_rejects_non_callables():
    with pytest.raises(TypeError, match="layer 0 is a int"):
        bx.Sequential(bx.Graph("net") / "seq", [3])  # type: ignore[list-item]


def test_mlp_layers_activation_and_dropout():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mlp = bx.MLP(graph / "mlp", [5, 2], rng=rng, activation=jax.nn.relu, dropout_rate=0.5)
    params = rng.seed(bx.Params(), seed=0)
    x = jnp.ones((3, 4))
    y, params = mlp(params, x, is_training=False)
    p = {k[-2:]: v.value for k, v in params.items()}
    h = jax.nn.relu(x @ p[("linear_0", "kernel")] + p[("linear_0", "bias")])
    np.testing.assert_allclose(
        y, h @ p[("linear_1", "kernel")] + p[("linear_1", "bias")], rtol=1e-5
    )
    with pytest.raises(TypeError, match=r"MLP net/mlp has dropout.*is_training=True"):
        mlp(params, x)


@pytest.mark.parametrize("sizes", [[], (), 8])
def test_mlp_needs_one_size_per_layer(sizes):
    with pytest.raises(
        ValueError, match=r"MLP net/mlp: output_sizes must list one size per layer.*got "
    ):
        bx.MLP(bx.Graph("net") / "mlp", sizes)


def test_mlp_accepts_any_iterable_of_sizes():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mlp = bx.MLP(graph / "mlp", (s for s in [4, 2]), rng=rng)
    y, _ = mlp(rng.seed(bx.Params(), seed=0), jnp.ones((1, 3)))
    assert y.shape == (1, 2)


def test_sequential_reports_a_misspelt_keyword_before_running_layers():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    model = bx.Sequential(graph / "seq", [bx.Dropout(graph / "seq" / "drop", 0.5, rng=rng)])
    params = rng.seed(bx.Params(), seed=0)
    with pytest.raises(TypeError, match=r"\['is_trainig'\] that none.*Did you mean 'is_training'"):
        model(params, jnp.ones(3), is_trainig=True)
