"""The bad-input catalogue of blox: wrong parameters, inputs and arguments.

Each case asserts the exception type and that the message says what was given, what was expected
and how to fix it: parameter lookups of missing names, params that do not fit a layer, layers
built or called with arguments of the wrong kind, inputs of the wrong shape or dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import blox as bx


def model():
    """A seeded rng and one initialised Linear(3 -> 4), params locked as after init."""
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    lin = bx.Linear(graph / "lin", 4, rng=rng)
    _, params = lin(rng.seed(bx.Params(), seed=0), jnp.ones((2, 3)))
    return graph, rng, lin, params.locked()


def missing_name():
    _, _, _, params = model()
    return params[("net", "lin", "kernal")]


def wrong_features():
    _, _, lin, params = model()
    return lin(params, jnp.ones((2, 5)))


def new_layer_on_locked_params():
    graph, rng, _, params = model()
    return bx.Linear(graph / "head", 2, rng=rng)(params, jnp.ones((2, 3)))


def unseeded_rng():
    graph = bx.Graph("net")
    return bx.Linear(graph / "lin", 4, rng=bx.Rng(graph / "rng"))(bx.Params(), jnp.ones((2, 3)))


def layer(make, *args, **kwargs):
    graph = bx.Graph("net")
    return lambda: make(graph / "layer", *args, rng=bx.Rng(graph / "rng"), **kwargs)


def call(make, x, *args, **kwargs):
    def run():
        graph = bx.Graph("net")
        rng = bx.Rng(graph / "rng")
        module = make(graph / "layer", *args, rng=rng, **kwargs)
        return module(rng.seed(bx.Params(), seed=0), x)

    return run


CASES = {
    # Params lookups and construction.
    "a missing parameter name": (
        missing_name,
        bx.MissingParamError,
        r"Parameter net/lin/kernal not found. Did you mean 'net/lin/kernel'",
    ),
    "a path written as a string": (
        lambda: model()[3][("net/lin/kernel")],
        TypeError,
        r"got the string 'net/lin/kernel'. Write \('net', 'lin', 'kernel'\) instead",
    ),
    "Params from a list of pairs": (
        lambda: bx.Params([(("net", "w"), jnp.zeros(3))]),
        TypeError,
        r"Params expects a mapping .* got list.*Params\(dict\(pairs\)\)",
    ),
    "Params with a non-tuple path": (
        lambda: bx.Params({3: 1.0}),
        TypeError,
        r"tuples of strings such as \('net', 'l1', 'kernel'\), got 3",
    ),
    "Param metadata that is not a mapping": (
        lambda: bx.Param(jnp.zeros(2), metadata=("embed",)),
        TypeError,
        r"metadata must be a mapping .* got tuple.*metadata=\{'logical_axes'",
    ),
    "Params.map of a non-function": (
        lambda: model()[3].map("trainable"),
        TypeError,
        r"Params.map expects fn\(param\) -> value, got 'trainable'.*Example: params.map\(",
    ),
    "Params.split of a non-function": (
        lambda: model()[3].split("trainable"),
        TypeError,
        r"Params.split expects pred\(path, param\) -> bool or None",
    ),
    "Params.merge of a dict": (
        lambda: model()[3].merge({("net", "w"): 1.0}),
        TypeError,
        r"expects another Params, got dict. Wrap a dict first: Params\(",
    ),
    # Params that do not fit the layer.
    "inputs with other features than the params": (
        wrong_features,
        bx.ParamShapeError,
        r"net/lin/kernel has shape \(3, 4\), but Linear net/lin asked for \(5, 4\).*re-initialise",
    ),
    "a new layer on locked params": (
        new_layer_on_locked_params,
        bx.LockedParamsError,
        r"tried to create parameter net/head/kernel, but the params are locked.*unlocked",
    ),
    "an Rng that was never seeded": (
        unseeded_rng,
        bx.RngError,
        r"Rng net/rng has no seed in these params.*params = rng.seed\(params, seed=0\)",
    ),
    "a float seed": (
        lambda: bx.Rng(bx.Graph("net") / "rng").seed(bx.Params(), seed=0.5),
        TypeError,
        r"got a float seed 0.5; seeds are integers or keys. Write rng.seed\(params, seed=int",
    ),
    # Building modules.
    "a module on the root node": (
        lambda: bx.Linear(bx.Graph("net"), 4, rng=bx.Rng(bx.Graph("x") / "rng")),
        bx.GraphError,
        r"cannot bind to the root node net.*Bind to a child instead: Linear\(graph / 'layer'",
    ),
    "a graph name that is not a string": (
        lambda: bx.Graph("net") / 3,
        TypeError,
        r"Graph node names are non-empty strings, got 3. Write Graph\('net'\)",
    ),
    "a layer given a string instead of a graph node": (
        lambda: bx.Linear("net", 4),
        TypeError,
        r"Linear takes a Graph node as its first argument, got str. Write Linear\(graph / 'name'",
    ),
    "a dropout rate of 1": (
        layer(bx.Dropout, 1.0),
        ValueError,
        r"rate must be in \[0, 1\), got 1.0.*1.0 would drop everything",
    ),
    "a Sequential of a non-callable": (
        lambda: bx.Sequential(bx.Graph("net") / "seq", [jnp.tanh, 3]),
        TypeError,
        r"layer 1 is a int, which is not callable. Layers are blox modules or functions",
    ),
    # Inputs of the wrong shape or dtype.
    "a scalar into Linear": (
        call(bx.Linear, jnp.float32(1.0), 4),
        ValueError,
        r"needs inputs with a feature axis, got a scalar. Use x\[None\]",
    ),
    "float ids into Embed": (
        call(bx.Embed, jnp.ones(3), 10, 4),
        TypeError,
        r"looks up integer ids, got dtype float32. Cast the ids with .astype\(jnp.int32\)",
    ),
    "a vector into attention": (
        call(bx.MultiHeadAttention, jnp.ones(8), 2, 4),
        ValueError,
        r"expects inputs \(..., T, features\), got x \(8,\).*For a single token use x\[None\]",
    ),
    "a vector into a 2-d convolution": (
        call(bx.Conv, jnp.ones((2, 3)), 4, (3, 3)),
        ValueError,
        r"2-d kernel \(3, 3\), so it expects inputs \(\*batch, 2 spatial dims, channels\)",
    ),
    "channels GroupNorm cannot split": (
        lambda: bx.GroupNorm(bx.Graph("net") / "gn", 4)(bx.Params(), jnp.ones((2, 6))),
        ValueError,
        r"channels divisible by num_groups=4; got shape \(2, 6\)",
    ),
    "a pooling window larger than the input": (
        lambda: bx.max_pool(jnp.ones((1, 4, 4, 1)), (5, 5)),
        ValueError,
        r"window \(5, 5\) is larger than the spatial shape \(4, 4\).*padding='SAME'",
    ),
    "a pooling window of size 0": (
        lambda: bx.avg_pool(jnp.ones((1, 4, 4, 1)), (0, 2)),
        ValueError,
        r"window_shape must be a positive int or a non-empty sequence of positive ints",
    ),
    "a vector into an LSTM": (
        lambda: bx.LSTM(bx.Graph("net") / "lstm", 4, rng=bx.Rng(bx.Graph("r") / "rng")).apply(
            bx.Params(), jnp.ones(3)
        ),
        ValueError,
        r"expects inputs \(..., T, features\), got shape \(3,\).*For a single step call",
    ),
    "display of a dict": (
        lambda: bx.display({"w": jnp.ones(2)}),
        TypeError,
        r"display shows blox Params, got dict. For other pytrees use jax.tree_util",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input(case):
    run, error, message = CASES[case]
    with pytest.raises(error, match="(?s)" + message):
        run()


def test_a_pooling_window_that_fits_once_padded_is_fine():
    x = jnp.ones((1, 4, 4, 1))
    assert bx.max_pool(x, (5, 5), padding=1).shape == (1, 1, 1, 1)
    assert bx.max_pool(x, (5, 5), padding="SAME").shape == (1, 1, 1, 1)
    assert jax.eval_shape(lambda v: bx.avg_pool(v, (4, 4)), x).shape == (1, 1, 1, 1)
