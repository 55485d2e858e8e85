"""Pooling functions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def test_pools_2d():
    x = jnp.arange(16.0).reshape(1, 4, 4, 1)
    assert bx.max_pool(x, (2, 2))[0, :, :, 0].tolist() == [[5.0, 7.0], [13.0, 15.0]]
    assert bx.min_pool(x, (2, 2))[0, :, :, 0].tolist() == [[0.0, 2.0], [8.0, 10.0]]
    assert bx.avg_pool(x, (2, 2))[0, :, :, 0].tolist() == [[2.5, 4.5], [10.5, 12.5]]


def test_avg_pool_excludes_padding_by_default():
    x = jnp.ones((1, 3, 1))
    np.testing.assert_allclose(
        bx.avg_pool(x, (2,), strides=(1,), padding="SAME")[0, :, 0], [1.0, 1.0, 1.0]
    )
    counted = bx.avg_pool(x, (2,), strides=(1,), padding="SAME", count_include_pad=True)
    np.testing.assert_allclose(counted[0, :, 0], [1.0, 1.0, 0.5])
    explicit = bx.avg_pool(jnp.ones((1, 4, 4, 1)), (2, 2), strides=2, padding=((1, 1), (1, 1)))
    assert explicit.shape == (1, 3, 3, 1)
    np.testing.assert_allclose(explicit, 1.0)


@pytest.mark.parametrize("pool", [bx.max_pool, bx.min_pool, bx.avg_pool])
def test_int_window_and_strides_mean_every_spatial_axis(pool):
    x = jax.random.normal(jax.random.key(0), (2, 6, 6, 3))
    np.testing.assert_array_equal(pool(x, 2), pool(x, (2, 2)))
    np.testing.assert_array_equal(pool(x, (3, 3), strides=1), pool(x, (3, 3), strides=(1, 1)))
    assert pool(x, 3, strides=1).shape == (2, 4, 4, 3)
    one_d = jnp.arange(4.0).reshape(1, 4, 1)
    assert pool(one_d, 2, strides=2).shape == (1, 2, 1)


@pytest.mark.parametrize("pool", [bx.max_pool, bx.min_pool, bx.avg_pool])
def test_any_number_of_batch_axes_with_a_tuple_window(pool):
    x = jax.random.normal(jax.random.key(1), (2, 3, 4, 4, 5))
    batched = pool(x, (2, 2), padding="SAME", strides=1)
    assert batched.shape == (2, 3, 4, 4, 5)
    flat = pool(x.reshape(6, 4, 4, 5), (2, 2), padding="SAME", strides=1)
    np.testing.assert_array_equal(batched, flat.reshape(2, 3, 4, 4, 5))
    unbatched = pool(x[0, 0], (2, 2), padding="SAME", strides=1)
    np.testing.assert_array_equal(unbatched, batched[0, 0])
    np.testing.assert_array_equal(pool(x[0, 0], (2, 2)), pool(x[0, 0][None], (2, 2))[0])


def test_int_window_needs_a_batch_axis():
    with pytest.raises(
        ValueError,
        match=r"max_pool: an int window_shape=2 means that size on every spatial axis of inputs "
        r"\(batch, \*spatial, channels\).*got shape \(4, 1\).*window_shape=\(2,\)",
    ):
        bx.max_pool(jnp.ones((4, 1)), 2)


def test_tuple_window_needs_spatial_and_channel_axes():
    with pytest.raises(
        ValueError, match=r"avg_pool: a 2-d window \(2, 2\) expects inputs \(\*batch, 2 spatial"
    ):
        bx.avg_pool(jnp.ones((4, 4)), (2, 2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"window_shape": 0}, r"max_pool: window_shape must be a positive int, got 0"),
        ({"window_shape": (0, 2)}, r"max_pool: window_shape must be a positive int or a non"),
        ({"window_shape": (2, 2), "strides": (1,)}, r"max_pool: strides \(1,\) has 1 entries.*2"),
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
    y = bx.avg_pool(x, np.array([2]), padding=[(1, 1)])
    np.testing.assert_allclose(y[:, :, 0], [[0.0, 3.0, 6.0]])


def test_pool_int_padding_pads_every_side():
    x = jnp.arange(8.0).reshape(1, 4, 2)
    np.testing.assert_array_equal(
        bx.max_pool(x, (2,), padding=1), bx.max_pool(x, (2,), padding=[(1, 1)])
    )


def test_pools_under_jit_and_vmap():
    x = jax.random.normal(jax.random.key(2), (3, 4, 4, 2))
    y = jax.jit(lambda x: bx.avg_pool(x, (2, 2), padding="SAME", strides=1))(x)
    z = jax.vmap(lambda x: bx.avg_pool(x, (2, 2), padding="SAME", strides=1))(x)
    np.testing.assert_allclose(y, z, rtol=1e-6)
