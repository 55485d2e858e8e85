"""LSTM and GRU: static loop equals scan, init does not unroll, states, steps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def _cell(cls, is_static):
    graph = bx.Graph("model")
    rng = bx.Rng(graph / "rng")
    return cls(graph / "cell", 8, rng=rng, is_static=is_static), rng


@pytest.mark.parametrize("cls", [bx.LSTM, bx.GRU])
def test_static_loop_equals_scan_on_shared_params(cls):
    dynamic, rng = _cell(cls, False)
    static, _ = _cell(cls, True)
    x = jax.random.normal(jax.random.key(0), (2, 6, 3))
    (ys, state), params = dynamic.apply(rng.seed(bx.Params(), seed=0), x)
    (ys2, state2), _ = static.apply(params.locked(), x)
    np.testing.assert_allclose(ys, ys2, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(state2)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert ys.shape == (2, 6, 8)


@pytest.mark.parametrize("cls", [bx.LSTM, bx.GRU])
def test_init_does_not_unroll_the_sequence(cls):
    cell, rng = _cell(cls, False)

    def init(x):
        return cell.apply(rng.seed(bx.Params(), seed=0), x)[1]

    short = jax.make_jaxpr(init)(jnp.ones((10, 3)))
    long = jax.make_jaxpr(init)(jnp.ones((1000, 3)))
    assert len(short.eqns) == len(long.eqns)
    assert sum(e.primitive.name == "scan" for e in long.eqns) == 1


def test_steps_chain_like_apply_and_prev_state():
    lstm, rng = _cell(bx.LSTM, False)
    x = jax.random.normal(jax.random.key(0), (5, 3))
    (ys, final), params = lstm.apply(rng.seed(bx.Params(), seed=0), x)
    state = None
    for t in range(5):
        (h, state), params = lstm(params, x[t], state)
        np.testing.assert_allclose(h, ys[t], rtol=1e-5, atol=1e-6)
    (first, mid), _ = lstm.apply(params, x[:2])
    (rest, end), _ = lstm.apply(params, x[2:], prev_state=mid)
    np.testing.assert_allclose(jnp.concatenate([first, rest]), ys, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(end.cell, final.cell, rtol=1e-5, atol=1e-6)
    assert isinstance(final, bx.LSTMState)


def test_grad_through_scan_and_vmap_over_batch():
    gru, rng = _cell(bx.GRU, False)
    x = jax.random.normal(jax.random.key(0), (4, 5, 3))
    (_, _), params = gru.apply(rng.seed(bx.Params(), seed=0), x)
    trainable, rest = params.split()

    def loss(t):
        (ys, _), _ = gru.apply(t.merge(rest), x)
        return jnp.mean(ys**2)

    grads = jax.grad(loss)(trainable)
    assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))
    (per_example, _), _ = jax.vmap(lambda xi: gru.apply(params, xi), out_axes=((0, 0), None))(x)
    (batched, _), _ = gru.apply(params, x)
    np.testing.assert_allclose(per_example, batched, rtol=1e-5, atol=1e-6)


def test_apply_needs_a_time_axis():
    lstm, rng = _cell(bx.LSTM, False)
    with pytest.raises(ValueError, match=r"apply expects inputs \(\.\.\., T, features\)"):
        lstm.apply(rng.seed(bx.Params(), seed=0), jnp.ones(3))


@pytest.mark.parametrize("cls", [bx.LSTM, bx.GRU])
def test_hidden_size_must_be_positive(cls):
    with pytest.raises(
        ValueError, match=rf"{cls.__name__} net/cell: hidden_size must be a positive"
    ):
        cls(bx.Graph("net") / "cell", 0)


@pytest.mark.parametrize("is_static", [True, False])
def test_prev_state_is_cast_so_loop_and_scan_agree(is_static):
    lstm, rng = _cell(bx.LSTM, is_static)
    half = jnp.zeros((2, 8), jnp.bfloat16)
    x = jnp.ones((2, 4, 3))
    (ys, state), _ = lstm.apply(rng.seed(bx.Params(), seed=0), x, prev_state=(half, half))
    assert isinstance(state, bx.LSTMState)
    assert ys.dtype == state.cell.dtype == jnp.float32


@pytest.mark.parametrize("cls", [bx.LSTM, bx.GRU])
def test_prev_state_of_wrong_shape_names_the_layer(cls):
    cell, rng = _cell(cls, False)
    params = rng.seed(bx.Params(), seed=0)
    bad = cell.initial_state((2,))
    bad = jax.tree.map(lambda a: jnp.zeros((2, 5), a.dtype), bad)
    with pytest.raises(ValueError, match=r"cell: prev_state has array shapes .*\(2, 5\).*need"):
        cell.apply(params, jnp.ones((2, 4, 3)), prev_state=bad)
    with pytest.raises(ValueError, match=r"cell: state has array shapes"):
        cell(params, jnp.ones((2, 3)), jnp.zeros((2, 8, 1)))
