"""Repeat: stacked params and lax.scan over layers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def _stack(num_layers=3, **kwargs):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    blocks = graph / "blocks"
    layer = bx.Linear(
        blocks / "layer", 4, rng=rng, kernel_metadata={"logical_axes": ("embed", "mlp")}
    )
    return bx.Repeat(blocks, layer, num_layers, rng=rng, **kwargs), rng


def test_equals_python_loop_over_slices():
    stack, rng = _stack()
    x = jax.random.normal(jax.random.key(0), (2, 4))
    y, params = stack(rng.seed(bx.Params(), seed=0), x)
    kernel = params[("net", "blocks", "layer", "kernel")]
    bias = params[("net", "blocks", "layer", "bias")].value
    assert kernel.shape == (3, 4, 4)
    assert kernel.logical_axes == (None, "embed", "mlp")
    h = x
    for i in range(3):
        h = h @ kernel.value[i] + bias[i]
    np.testing.assert_allclose(y, h, rtol=1e-5)
    assert len({float(k.sum()) for k in kernel.value}) == 3  # distinct init per layer


def test_locked_reuse_grad_and_remat():
    stack, rng = _stack(remat=True, logical_axis="layers")
    x = jnp.ones((2, 4))
    _, params = stack(rng.seed(bx.Params(), seed=0), x)
    params = params.locked()
    assert params[("net", "blocks", "layer", "kernel")].logical_axes[0] == "layers"
    trainable, rest = params.split()
    grads = jax.jit(jax.grad(lambda t: jnp.sum(stack(t.merge(rest), x)[0])))(trainable)
    assert grads[("net", "blocks", "layer", "kernel")].shape == (3, 4, 4)


def test_init_jaxpr_does_not_grow_with_depth():
    def size(n):
        stack, rng = _stack(n)
        jaxpr = jax.make_jaxpr(lambda x: stack(rng.seed(bx.Params(), seed=0), x)[1])(jnp.ones(4))
        return len(jaxpr.eqns)

    assert size(2) == size(50)


def test_layer_must_be_below_and_locked_init_fails():
    graph = bx.Graph("net")
    with pytest.raises(bx.GraphError, match="must be a module bound below this node"):
        bx.Repeat(graph / "blocks", bx.Linear(graph / "other", 2), 3)
    blocks = graph / "stack"
    with pytest.raises(ValueError, match=r"Repeat net/stack: num_layers must be a positive int"):
        bx.Repeat(blocks, bx.Linear(blocks / "block", 2), 0)
    stack, rng = _stack()
    with pytest.raises(bx.LockedParamsError, match="params.unlocked"):
        stack(rng.seed(bx.Params(), seed=0).locked(), jnp.ones(4))


def test_stateful_block_inside_the_scan():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    blocks = graph / "blocks"
    block = bx.Sequential(
        blocks / "block",
        [
            bx.Linear(blocks / "block" / "lin", 4, rng=rng),
            bx.BatchNorm(blocks / "block" / "bn"),
            bx.Dropout(blocks / "block" / "drop", 0.5, rng=rng),
        ],
    )
    stack = bx.Repeat(blocks, block, 3, rng=rng)
    x = jax.random.normal(jax.random.key(0), (8, 4))
    _, params = stack(rng.seed(bx.Params(), seed=0), x, is_training=False)
    params = params.locked()
    counter = ("net", "rng", "counter")
    mean = ("net", "blocks", "block", "bn", "mean")
    _, new = jax.jit(lambda p: stack(p, x, is_training=True))(params)
    assert int(new[counter].value) == int(params[counter].value) + 3  # one draw per layer
    assert new[mean].shape == (3, 4) and new[mean].trainable is False
    assert not np.allclose(new[mean].value, params[mean].value)


def test_block_that_changes_the_shape_or_dtype_names_the_repeat():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    wide = bx.Repeat(graph / "wide", bx.Linear(graph / "wide" / "l", 8, rng=rng), 2, rng=rng)
    params = rng.seed(bx.Params(), seed=0)
    with pytest.raises(ValueError, match=r"Repeat net/wide: .*Linear net/wide/l.*\(2, 8\)"):
        wide(params, jnp.ones((2, 4)))
    half = bx.Linear(graph / "half" / "l", 4, rng=rng, dtype=jnp.bfloat16)
    with pytest.raises(ValueError, match=r"Repeat net/half: .*bfloat16"):
        bx.Repeat(graph / "half", half, 2, rng=rng)(params, jnp.ones((2, 4)))


@pytest.mark.parametrize("remat", [False, True])
def test_is_static_python_loop_equals_the_scan(remat):
    policy = jax.checkpoint_policies.dots_with_no_batch_dims_saveable if remat else None
    scan, rng = _stack(remat=remat, remat_policy=policy)
    loop, rng2 = _stack(remat=remat, remat_policy=policy, is_static=True)
    x = jax.random.normal(jax.random.key(0), (2, 4))
    y, params = scan(rng.seed(bx.Params(), seed=0), x)
    y2, params2 = loop(rng2.seed(bx.Params(), seed=0), x)
    np.testing.assert_allclose(y2, y, rtol=1e-6)
    assert jax.tree.structure(params2) == jax.tree.structure(params)  # same stacked params
    weights, rest = params.split()
    grad = jax.grad(lambda w: scan(w.merge(rest), x)[0].sum())(weights)
    grad2 = jax.grad(lambda w: loop(w.merge(rest), x)[0].sum())(weights)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), grad2, grad)
    # The loop is unrolled: no scan in its jaxpr.
    assert "scan" not in str(jax.make_jaxpr(lambda p: loop(p, x)[0])(params))


class _Halves(bx.Module):
    """A layer with a second output: halves its input and reports the input's largest value."""

    def __init__(self, graph, rng):
        super().__init__(graph)
        self.lin = bx.Linear(graph / "lin", 4, rng=rng)

    def __call__(self, params, x):
        y, params = self.lin(params, x)
        return (y / 2, {"peak": jnp.abs(x).max(), "mean": y.mean(-1)}), params


@pytest.mark.parametrize("is_static", [False, True])
def test_collect_stacks_each_copys_second_output(is_static):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    node = graph / "blocks"
    stack = bx.Repeat(node, _Halves(node / "layer", rng), 3, rng=rng, collect=True,
                      is_static=is_static)  # fmt: skip
    x = jax.random.normal(jax.random.key(0), (2, 4))
    (y, outs), params = stack(rng.seed(bx.Params(), seed=0), x)
    assert outs["peak"].shape == (3,) and outs["mean"].shape == (3, 2)
    kernel = params[("net", "blocks", "layer", "lin", "kernel")].value
    bias = params[("net", "blocks", "layer", "lin", "bias")].value
    h = x
    for i in range(3):  # copy i reports on its own input
        np.testing.assert_allclose(outs["peak"][i], jnp.abs(h).max(), rtol=1e-6)
        h = (h @ kernel[i] + bias[i]) / 2
    np.testing.assert_allclose(y, h, rtol=1e-5)
    # The stacked outputs are differentiable like any other output.
    weights, rest = params.split()
    grads = jax.grad(lambda w: stack(w.merge(rest), x)[0][1]["mean"].sum())(weights)
    assert float(jnp.abs(grads[("net", "blocks", "layer", "lin", "kernel")].value).max()) > 0


def test_collect_with_a_layer_that_returns_one_output_is_refused():
    stack, rng = _stack(collect=True)
    with pytest.raises(
        ValueError,
        match=r"Repeat net/blocks: collect=True .* got an array of shape \(2, 4\) instead",
    ):
        stack(rng.seed(bx.Params(), seed=0), jnp.ones((2, 4)))
