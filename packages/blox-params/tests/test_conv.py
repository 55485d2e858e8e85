"""Conv and ConvTranspose in 1, 2 and 3 spatial dimensions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def _setup():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    return graph, rng, rng.seed(bx.Params(), seed=0)


@pytest.mark.parametrize(
    ("kernel", "x_shape", "y_shape"),
    [
        ((3,), (2, 8, 3), (2, 8, 5)),
        ((3, 3), (2, 8, 8, 3), (2, 8, 8, 5)),
        ((2, 2, 2), (1, 4, 4, 4, 3), (1, 4, 4, 4, 5)),
        (3, (2, 6, 6, 3), (2, 6, 6, 5)),
    ],
)
def test_conv_shapes(kernel, x_shape, y_shape):
    graph, rng, params = _setup()
    conv = bx.Conv(graph / "conv", 5, kernel, rng=rng)
    y, params = conv(params, jnp.ones(x_shape))
    assert y.shape == y_shape


def test_conv_matches_reference_1d():
    graph, rng, params = _setup()
    conv = bx.Conv(graph / "conv", 1, (3,), rng=rng, padding="VALID", use_bias=False)
    x = jnp.arange(6.0).reshape(1, 6, 1)
    y, params = conv(params, x)
    k = params[("net", "conv", "kernel")].value[:, 0, 0]
    expected = np.convolve(np.arange(6.0), np.asarray(k)[::-1], mode="valid")
    np.testing.assert_allclose(y[0, :, 0], expected, rtol=1e-5)


def test_conv_unbatched_strides_groups_dilation():
    graph, rng, params = _setup()
    conv = bx.Conv(
        graph / "conv", 4, (3, 3), rng=rng, strides=2, feature_group_count=2, kernel_dilation=2
    )
    y, params = conv(params, jnp.ones((8, 8, 4)))
    assert y.shape == (4, 4, 4)
    assert params[("net", "conv", "kernel")].shape == (3, 3, 2, 4)
    batched, _ = conv(params, jnp.ones((1, 8, 8, 4)))
    np.testing.assert_allclose(batched[0], y, rtol=1e-6)


def test_conv_errors():
    graph, rng, params = _setup()
    conv = bx.Conv(graph / "conv", 4, (3, 3), rng=rng)
    with pytest.raises(
        ValueError,
        match=r"2-d kernel \(3, 3\).*\(\*batch, 2 spatial dims, channels\).*got shape \(8,\)",
    ):
        conv(params, jnp.ones(8))
    grouped = bx.Conv(graph / "g", 4, 3, rng=rng, feature_group_count=2)
    with pytest.raises(ValueError, match="3 input channels are not divisible"):
        grouped(params, jnp.ones((1, 5, 5, 3)))
    strided = bx.Conv(graph / "s", 4, (3, 3), rng=rng, strides=(1, 1, 1))
    with pytest.raises(ValueError, match=r"strides \(1, 1, 1\) has 3 entries.*2 spatial"):
        strided(params, jnp.ones((1, 5, 5, 3)))


@pytest.mark.parametrize(("kernel", "x_shape"), [((3,), (2, 5, 3)), ((3, 3), (2, 5, 5, 3))])
def test_conv_transpose_upsamples(kernel, x_shape):
    graph, rng, params = _setup()
    up = bx.ConvTranspose(graph / "up", 4, kernel, rng=rng, strides=2)
    y, params = up(params, jnp.ones(x_shape))
    assert y.shape == (x_shape[0], *(2 * s for s in x_shape[1:-1]), 4)
    assert params[("net", "up", "kernel")].shape == (*kernel, 3, 4)


def test_conv_transpose_is_gradient_of_conv():
    # with stride 1 and VALID padding, ConvTranspose with kernel k equals the vjp of Conv
    graph, rng, params = _setup()
    conv = bx.Conv(graph / "conv", 2, (3,), rng=rng, padding="VALID", use_bias=False)
    _, params = conv(params, jnp.ones((1, 6, 3)))
    k = params[("net", "conv", "kernel")].value
    up = bx.ConvTranspose(graph / "up", 3, (3,), rng=rng, padding="VALID", use_bias=False)
    up_params = bx.Params({("net", "up", "kernel"): k[::-1].transpose(0, 2, 1)})
    g = jnp.arange(8.0).reshape(1, 4, 2)
    _, vjp = jax.vjp(lambda x: conv(params, x)[0], jnp.ones((1, 6, 3)))
    np.testing.assert_allclose(up(up_params, g)[0], vjp(g)[0], rtol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"output_channels": 0}, r"Conv net/c: output_channels must be a positive int, got 0\."),
        ({"output_channels": 2.5}, r"output_channels must be a positive int, got 2\.5\."),
        ({"kernel_size": (3, 0)}, r"kernel_size must be a positive int or a non-empty sequence"),
        ({"kernel_size": ()}, r"kernel_size must be .*one per spatial dimension\), got \(\)\."),
        ({"strides": 0}, r"Conv net/c: strides must be a positive int, got 0\."),
        ({"kernel_dilation": (1, -1)}, r"kernel_dilation must be .* got \(1, -1\)\."),
        ({"input_dilation": 0}, r"input_dilation must be a positive int, got 0\."),
        ({"feature_group_count": 0}, r"feature_group_count must be a positive int, got 0\."),
        (
            {"output_channels": 6, "feature_group_count": 4},
            r"output_channels=6 is not divisible by feature_group_count=4",
        ),
        ({"padding": "same-ish"}, r"padding 'same-ish' is not a padding mode; expected one of "),
        ({"padding": [(1,)]}, r"padding must be 'SAME', 'VALID', .* got \[\(1,\)\]\."),
    ],
)
def test_conv_constructor_errors(kwargs, message):
    graph, rng, _ = _setup()
    args = {"output_channels": 4, "kernel_size": (3, 3), **kwargs}
    with pytest.raises(ValueError, match=message):
        bx.Conv(graph / "c", args.pop("output_channels"), args.pop("kernel_size"), rng=rng, **args)


def test_conv_padding_pairs_must_match_the_spatial_rank():
    graph, rng, params = _setup()
    conv = bx.Conv(graph / "c", 4, (3,), rng=rng, padding=[(1, 1), (1, 1)])
    with pytest.raises(
        ValueError, match=r"has 2 \(low, high\) pairs, but the inputs have 1 spatial"
    ):
        conv(params, jnp.ones((2, 5, 3)))


def test_conv_accepts_numpy_ints_and_lowercase_padding():
    graph, rng, params = _setup()
    conv = bx.Conv(graph / "c", np.int64(4), (np.int32(3),), rng=rng, padding="valid")
    y, _ = conv(params, jnp.ones((2, 5, 3)))
    assert y.shape == (2, 3, 4)
    strided = bx.Conv(graph / "s", 4, np.array([3]), rng=rng, strides=np.array(2))
    assert strided.kernel_size == (3,) and strided.strides == 2


def test_conv_transpose_constructor_errors():
    graph, rng, _ = _setup()
    with pytest.raises(
        ValueError, match=r"ConvTranspose net/t: output_channels must be a positive"
    ):
        bx.ConvTranspose(graph / "t", 0, (3,), rng=rng)


@pytest.mark.parametrize("cls", [bx.Conv, bx.ConvTranspose])
def test_any_number_of_leading_batch_axes(cls):
    graph, rng, params = _setup()
    conv = cls(graph / "conv", 4, (3, 3), rng=rng, strides=2)
    x = jax.random.normal(jax.random.key(0), (2, 3, 6, 6, 2))
    y, params = conv(params, x)
    flat, _ = conv(params, x.reshape(6, 6, 6, 2))
    assert y.shape == (2, 3, *flat.shape[1:])
    np.testing.assert_allclose(y, flat.reshape(y.shape), rtol=1e-6)
    single, _ = conv(params, x[1, 2])
    np.testing.assert_allclose(single, y[1, 2], rtol=1e-5, atol=1e-6)
    assert params[("net", "conv", "kernel")].shape == (3, 3, 2, 4)


def test_conv_transpose_kernel_layout_is_in_then_out():
    graph, rng, params = _setup()
    up = bx.ConvTranspose(graph / "up", 5, (3,), rng=rng)
    _, params = up(params, jnp.ones((1, 4, 2)))
    assert params[("net", "up", "kernel")].shape == (3, 2, 5)


def test_int_kernel_size_with_several_batch_axes_says_to_use_a_tuple():
    graph, rng, params = _setup()
    conv = bx.Conv(graph / "conv", 4, 3, rng=rng)
    with pytest.raises(
        ValueError,
        match=r"expects inputs \(batch, \*spatial, channels\), got "
        r"shape \(5, 3\).*tuple kernel_size.*several batch axes",
    ):
        conv(params, jnp.ones((5, 3)))
