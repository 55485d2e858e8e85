"""The remaining user-facing errors: each says what failed, what was given and how to fix it."""

import inspect

import jax
import jax.numpy as jnp
import pytest

import blox as bx


def test_non_tuple_path():
    with pytest.raises(
        TypeError, match=r"tuples of strings such as \('net', 'l1', 'kernel'\), got 3"
    ):
        bx.Params({3: 1.0})  # type: ignore[dict-item]


def test_module_without_call():
    class Bare(bx.Module):
        pass

    with pytest.raises(
        NotImplementedError, match=r"Bare does not define __call__.*\(outputs, params\)"
    ):
        Bare(bx.Graph("net") / "bare")(bx.Params())


def test_initializer_without_shape():
    class NoShape(bx.Module):
        def __call__(self, params):
            return self.get_param(params, "w", None, jax.nn.initializers.zeros)

    with pytest.raises(TypeError, match=r"creating net/m/w from an initializer needs a shape"):
        NoShape(bx.Graph("net") / "m")(bx.Params())


def test_set_param_dtype_mismatch():
    class Count(bx.Module):
        def __call__(self, params):
            return self.get_param(params, "n", (), jnp.zeros((), jnp.int32), dtype=jnp.int32)

    count = Count(bx.Graph("net") / "count")
    _, params = count(bx.Params())
    with pytest.raises(bx.ParamDtypeError, match=r"set_param got a value of dtype float32.*int32"):
        count.set_param(params, "n", jnp.float32(1.0))


def test_seed_of_another_key_implementation():
    rng = bx.Rng(bx.Graph("net") / "rng")
    params = rng.seed(bx.Params(), seed=0)
    with pytest.raises(bx.RngError, match=r"hold a threefry2x32 key, got a rbg key"):
        rng.seed(params, seed=jax.random.key(0, impl="rbg"))


def test_seed_of_unsupported_type():
    rng = bx.Rng(bx.Graph("net") / "rng")
    with pytest.raises(TypeError, match=r"got a str; expected an integer"):
        rng.seed(bx.Params(), seed="3")  # type: ignore[arg-type]


def test_repeat_needs_an_rng():
    blocks = bx.Graph("net") / "blocks"
    stack = bx.Repeat(blocks, bx.Linear(blocks / "l", 2), 3)
    with pytest.raises(
        bx.RngError, match=r"needs an Rng: bx.Repeat\(node, layer, num_layers, rng=rng\)"
    ):
        stack(bx.Params(), jnp.ones(2))


def test_conv_int_kernel_needs_batched_inputs():
    conv = bx.Conv(bx.Graph("net") / "conv", 2, 3)
    with pytest.raises(
        ValueError, match=r"expects inputs \(batch, \*spatial, channels\).*tuple kernel_size"
    ):
        conv(bx.Params(), jnp.ones((5, 3)))


def test_attention_needs_a_sequence_axis():
    mha = bx.MultiHeadAttention(bx.Graph("net") / "attn", 2, 4)
    with pytest.raises(ValueError, match=r"expects inputs \(\.\.\., T, features\).*x\[None\]"):
        mha(bx.Params(), jnp.ones(8))


def test_params_must_come_first():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    lin = bx.Linear(graph / "l1", 4, rng=rng)
    x = jnp.ones((2, 3))
    _, params = lin(rng.seed(bx.Params(), seed=0), x)
    swapped = r"Linear net/l1.__call__: expected Params, got an array of shape \(2, 3\)\. .*first"
    with pytest.raises(TypeError, match=swapped):
        lin(x, params)
    with pytest.raises(TypeError, match=r"Linear net/l1.__call__: expected Params, got dict\."):
        lin({}, x)


def test_params_check_keeps_the_signature_and_reaches_user_modules():
    class Scale(bx.Module):
        def __call__(self, params, x):
            """Multiply by a learnt scalar."""
            s, params = self.get_param(params, "s", (), jax.nn.initializers.ones)
            return x * s, params

    assert Scale.__call__.__doc__ == "Multiply by a learnt scalar."
    assert list(inspect.signature(Scale.__call__).parameters) == ["self", "params", "x"]
    scale = Scale(bx.Graph("net") / "scale")
    with pytest.raises(TypeError, match=r"Scale net/scale.__call__: expected Params, got float"):
        scale(1.0, jnp.ones(2))
    with pytest.raises(TypeError, match=r"Scale net/scale.get_param: expected Params, got list"):
        scale.get_param([], "s", (), jax.nn.initializers.ones)


def test_split_needs_a_callable():
    with pytest.raises(
        TypeError, match=r"Params.split expects pred\(path, param\) -> bool or None"
    ):
        bx.Params().split("trainable")
