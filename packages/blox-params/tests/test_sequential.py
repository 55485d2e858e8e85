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


def test_gated_mlp_is_swiglu():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mlp = bx.MLP(
        graph / "mlp", [16, 4], rng=rng, activation=jax.nn.silu, gated=True, use_bias=False
    )
    x = jax.random.normal(jax.random.key(1), (3, 4))
    y, params = mlp(rng.seed(bx.Params(), seed=0), x)
    w = {p[2]: v.value for p, v in params.items() if p[1] == "mlp"}
    assert set(w) == {"linear_0", "gate_0", "linear_1"}  # no gate on the (unactivated) last layer
    ref = (jax.nn.silu(x @ w["gate_0"]) * (x @ w["linear_0"])) @ w["linear_1"]
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


def test_mlp_per_layer_kernel_init_and_metadata():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mlp = bx.MLP(
        graph / "mlp",
        [8, 4],
        rng=rng,
        gated=True,
        kernel_init=[jax.nn.initializers.ones, jax.nn.initializers.zeros],
        kernel_metadata=[{"logical_axes": ("embed", "mlp")}, {"logical_axes": ("mlp", "embed")}],
    )
    _, params = mlp(rng.seed(bx.Params(), seed=0), jnp.ones((2, 4)))
    assert float(params[("net", "mlp", "gate_0", "kernel")].value.min()) == 1.0  # its layer's init
    assert float(jnp.abs(params[("net", "mlp", "linear_1", "kernel")].value).max()) == 0.0
    assert params[("net", "mlp", "gate_0", "kernel")].logical_axes == ("embed", "mlp")
    assert params[("net", "mlp", "linear_1", "kernel")].logical_axes == ("mlp", "embed")
    with pytest.raises(
        ValueError,
        match=r"kernel_init must be one value for every layer or a sequence with one per layer \(2\)",
    ):
        bx.MLP(graph / "bad", [8, 4], kernel_init=[jax.nn.initializers.ones])


@pytest.mark.parametrize("gated", [False, True])
def test_mlp_backward_keeps_only_the_layer_outputs_of_the_hidden_size(gated):
    # What reverse mode keeps for the backward pass (the vjp's residuals) is the memory of
    # training. The activation is recomputed from the hidden layer's outputs: a tanh GELU keeps
    # its input alone (gated: the gate's and the layer's outputs), not its tanh, cube and output.
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    x = jax.random.normal(jax.random.key(1), (4, 3))

    def hidden_residuals(remat_activation):
        mlp = bx.MLP(graph / f"mlp_{remat_activation}", [16, 3], rng=rng, gated=gated,
                     remat_activation=remat_activation)  # fmt: skip
        _, params = mlp(rng.seed(bx.Params(), seed=0), x)
        y, vjp = jax.vjp(lambda x: mlp(params, x)[0], x)
        return y, vjp(jnp.ones_like(y))[0], [r for r in jax.tree.leaves(vjp) if r.shape == (4, 16)]

    y, dx, kept = hidden_residuals(True)
    y_all, dx_all, kept_all = hidden_residuals(False)
    assert len(kept) == (2 if gated else 1) < len(kept_all)
    np.testing.assert_allclose(y, y_all, rtol=1e-6)
    np.testing.assert_allclose(dx, dx_all, rtol=1e-5, atol=1e-7)
