"""Dropout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def _drop(rate=0.5):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    return bx.Dropout(graph / "drop", rate, rng=rng), rng.seed(bx.Params(), seed=0)


def test_training_scales_kept_values_and_advances_rng():
    drop, params = _drop()
    y, new = drop(params, jnp.ones(1000), is_training=True)
    kept = np.asarray(y[y != 0])
    np.testing.assert_allclose(kept, 2.0)
    assert 350 < kept.size < 650
    assert int(new[("net", "rng", "counter")].value) == 1
    y2, _ = drop(new, jnp.ones(1000), is_training=True)
    assert not np.array_equal(np.asarray(y) != 0, np.asarray(y2) != 0)


def test_eval_is_identity_and_draws_nothing():
    drop, params = _drop()
    y, new = drop(params, jnp.ones(4), is_training=False)
    assert new is params and y.tolist() == [1.0] * 4


def test_is_training_is_required_and_rate_checked():
    drop, params = _drop()
    with pytest.raises(TypeError, match="is_training"):
        drop(params, jnp.ones(4))  # type: ignore[call-arg]
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\), got 1.0"):
        _drop(1.0)


def test_a_traced_is_training_and_a_non_number_rate_are_explained():
    drop, params = _drop()
    step = jax.jit(lambda p, x, training: drop(p, x, is_training=training))
    with pytest.raises(TypeError, match=r"Dropout net/drop: is_training must be a Python bool"):
        step(params, jnp.ones(4), True)
    with pytest.raises(ValueError, match=r"rate must be in \[0, 1\), got 'half'"):
        _drop("half")
