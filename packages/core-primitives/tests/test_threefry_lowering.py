"""compat.unrolled_threefry_on_cpu: the same random bits, no rolled loop, scoped to the block."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core_primitives import compat


def _normal(key):
    return jax.random.normal(key, (64, 32))


def _lowered_text(fn):
    return jax.jit(fn).lower(jax.random.key(0)).as_text()


def test_unrolled_lowering_gives_the_same_bits():
    expected = jax.jit(_normal)(jax.random.key(3))
    with compat.unrolled_threefry_on_cpu():
        got = jax.jit(lambda k: _normal(k))(jax.random.key(3))  # a fresh function: lowered here
    np.testing.assert_array_equal(got, expected)


def test_the_rolled_loop_is_gone_inside_and_back_outside():
    if jax.default_backend() != "cpu":  # pragma: no cover
        pytest.skip("the rolled threefry loop is JAX's CPU lowering; other backends never roll it")
    assert "stablehlo.while" in _lowered_text(lambda k: _normal(k))
    with compat.unrolled_threefry_on_cpu():
        assert "stablehlo.while" not in _lowered_text(lambda k: _normal(k))
        with compat.unrolled_threefry_on_cpu():  # nested use keeps it until the outer exit
            pass
        assert "stablehlo.while" not in _lowered_text(lambda k: _normal(k))
    assert "stablehlo.while" in _lowered_text(lambda k: _normal(k))


def test_the_rule_is_restored_when_the_block_raises():
    try:
        with compat.unrolled_threefry_on_cpu():
            raise KeyError("boom")
    except KeyError:
        pass
    if jax.default_backend() == "cpu":
        assert "stablehlo.while" in _lowered_text(lambda k: jnp.sum(_normal(k)))
