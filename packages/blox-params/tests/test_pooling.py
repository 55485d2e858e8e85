"""Pooling functions."""

import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def test_pools_2d():
    x = jnp.arange(16.0).reshape(1, 4, 4, 1)
    assert bx.max_pool(x, (2, 2))[0, :, :, 0].tolist() == [[5.0, 7.0], [13.0, 15.0]]
    assert bx.min_pool(x, (2, 2))[0, :, :, 0].tolist() == [[0.0, 2.0], [8.0, 10.0]]
    assert bx.avg_pool(x, (2, 2))[0, :, :, 0].tolist() == [[2.5, 4.5], [10.5, 12.5]]


def test_avg_pool_padding_counts():
    x = jnp.ones((1, 3, 1))
    same = bx.avg_pool(x, (2,), strides=(1,), padding="SAME")
    np.testing.assert_allclose(same[0, :, 0], [1.0, 1.0, 0.5])
    exact = bx.avg_pool(x, (2,), strides=(1,), padding="SAME", count_include_pad=False)
    np.testing.assert_allclose(exact[0, :, 0], [1.0, 1.0, 1.0])


def test_pool_rank_error():
    with pytest.raises(ValueError, match=r"2-d window \(2, 2\) expects inputs.*x\[None\]"):
        bx.max_pool(jnp.ones((4, 4, 1)), (2, 2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"window_shape": 2}, r"max_pool: window_shape must be a tuple of positive ints.*\(k, k\)"),
        ({"window_shape": (0, 2)}, r"max_pool: window_shape must be a tuple of positive ints"),
        ({"window_shape": (2, 2), "strides": (1,)}, r"max_pool: strides must be a tuple of 2 "),
        ({"window_shape": (2, 2), "padding": [(1, 1)]}, r"max_pool: padding must be .* 2 \(low"),
        (
            {"window_shape": (2, 2), "padding": "FULL"},
            r"max_pool: padding 'FULL' is not a padding mode",
        ),
    ],
)
def test_pool_argument_errors_name_the_function(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bx.max_pool(jnp.ones((1, 4, 4, 2)), **kwargs)


def test_pools_take_numpy_windows_and_pair_padding():
    x = np.arange(8.0).reshape(1, 4, 2)
    y = bx.avg_pool(x, np.array([2]), padding=[(1, 1)], count_include_pad=False)
    np.testing.assert_allclose(y[:, :, 0], [[0.0, 3.0, 6.0]])


def test_pool_int_padding_pads_every_side():
    x = jnp.arange(8.0).reshape(1, 4, 2)
    np.testing.assert_array_equal(
        bx.max_pool(x, (2,), padding=1), bx.max_pool(x, (2,), padding=[(1, 1)])
    )
