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


def _reference_with_resets(cell, params, x, resets, state=None):
    """Step by step, dropping the state where a reset is flagged: what resets must reproduce."""
    outputs = []
    for t in range(x.shape[-2]):
        if resets[t]:
            state = None
        (y, state), _ = cell(params, x[..., t, :], state)
        outputs.append(y)
    return jnp.stack(outputs, axis=-2), state


@pytest.mark.parametrize("cls", [bx.LSTM, bx.GRU])
@pytest.mark.parametrize("is_static", [False, True])
def test_is_reset_reinitialises_the_state_before_the_step(cls, is_static):
    cell, rng = _cell(cls, is_static)
    x = jax.random.normal(jax.random.key(3), (7, 3))
    _, params = cell.apply(rng.seed(bx.Params(), seed=0), x)
    resets = jnp.array([False, False, True, False, False, True, False])
    (ys, state), _ = cell.apply(params.locked(), x, is_reset=resets)
    want, want_state = _reference_with_resets(cell, params, x, resets)
    np.testing.assert_allclose(ys, want, rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree.leaves(state), jax.tree.leaves(want_state)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    # the steps after a reset equal a fresh run of the episode that starts there
    (episode, _), _ = cell.apply(params, x[2:5])
    np.testing.assert_allclose(ys[2:5], episode, rtol=1e-5, atol=1e-6)
    (plain, _), _ = cell.apply(params, x)
    assert not np.allclose(ys[2:], plain[2:])


@pytest.mark.parametrize("cls", [bx.LSTM, bx.GRU])
def test_per_row_resets_scan_equals_loop_and_a_shared_reset_broadcasts(cls):
    dynamic, rng = _cell(cls, False)
    static, _ = _cell(cls, True)
    x = jax.random.normal(jax.random.key(4), (3, 6, 2))
    (_, _), params = dynamic.apply(rng.seed(bx.Params(), seed=0), x)
    resets = jax.random.bernoulli(jax.random.key(5), 0.3, (3, 6))
    start = dynamic.initial_state((3,))
    start = jax.tree.map(lambda z: z + 0.5, start)
    (ys, _), _ = jax.jit(dynamic.apply)(params, x, start, resets)
    (ys2, _), _ = static.apply(params, x, prev_state=start, is_reset=resets.astype(jnp.int32))
    np.testing.assert_allclose(ys, ys2, rtol=1e-5, atol=1e-6)
    for row in range(3):
        row_start = jax.tree.map(lambda s, r=row: s[r], start)
        want, _ = _reference_with_resets(dynamic, params, x[row], resets[row], row_start)
        np.testing.assert_allclose(ys[row], want, rtol=1e-5, atol=1e-6)
    shared = jnp.array([True, False, False, True, False, False])
    (a, _), _ = dynamic.apply(params, x, is_reset=shared)
    (b, _), _ = dynamic.apply(params, x, is_reset=jnp.broadcast_to(shared, (3, 6)))
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_one_step_with_is_reset():
    lstm, rng = _cell(bx.LSTM, False)
    x = jnp.ones((2, 3))
    (_, state), params = lstm(rng.seed(bx.Params(), seed=0), x)
    (h, _), _ = lstm(params, x, state, is_reset=jnp.array([True, False]))
    (fresh, _), _ = lstm(params, x)
    (carried, _), _ = lstm(params, x, state)
    np.testing.assert_allclose(h[0], fresh[0], rtol=1e-6)
    np.testing.assert_allclose(h[1], carried[1], rtol=1e-6)


def test_resets_have_gradients_and_work_under_vmap():
    gru, rng = _cell(bx.GRU, False)
    x = jax.random.normal(jax.random.key(6), (4, 5, 3))
    _, params = gru.apply(rng.seed(bx.Params(), seed=0), x)
    resets = jnp.zeros((4, 5), bool).at[:, 2].set(True)
    trainable, rest = params.split()

    def loss(t):
        (ys, _), _ = gru.apply(t.merge(rest), x, is_reset=resets)
        return jnp.sum(ys**2)

    grads = jax.grad(loss)(trainable)
    assert all(np.isfinite(v).all() for v in jax.tree.leaves(grads))
    (batched, _), _ = gru.apply(params, x, is_reset=resets)
    lanes = jax.vmap(lambda xi, ri: gru.apply(params, xi, is_reset=ri)[0][0])(x, resets)
    np.testing.assert_allclose(batched, lanes, rtol=1e-5, atol=1e-6)


def test_is_reset_of_the_wrong_shape_or_dtype_names_the_layer():
    lstm, rng = _cell(bx.LSTM, False)
    params = rng.seed(bx.Params(), seed=0)
    with pytest.raises(
        ValueError,
        match=r"LSTM model/cell.apply: is_reset has shape \(2, 5\), but inputs needs one flag per "
        r"batch entry and step: shape \(2, 6\)",
    ):
        lstm.apply(params, jnp.ones((2, 6, 3)), is_reset=jnp.zeros((2, 5), bool))
    with pytest.raises(
        ValueError, match=r"LSTM model/cell.__call__: is_reset has shape \(3,\), but x needs"
    ):
        lstm(params, jnp.ones((2, 3)), is_reset=jnp.zeros(3, bool))
    with pytest.raises(TypeError, match=r"is_reset must hold booleans \(or 0/1 numbers\)"):
        lstm.apply(params, jnp.ones((6, 3)), is_reset=np.array(["a"] * 6))


def test_gru_state_has_a_named_field_and_takes_a_bare_array():
    gru, rng = _cell(bx.GRU, False)
    x = jax.random.normal(jax.random.key(7), (2, 4, 3))
    (ys, state), params = gru.apply(rng.seed(bx.Params(), seed=0), x)
    assert isinstance(state, bx.GRUState)
    np.testing.assert_allclose(state.hidden, ys[:, -1], rtol=1e-6)
    (a, _), _ = gru.apply(params, x, prev_state=state)
    (b, _), _ = gru.apply(params, x, prev_state=state.hidden)
    np.testing.assert_allclose(a, b, rtol=1e-6)
