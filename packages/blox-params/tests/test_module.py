"""Module.get_param / set_param: lazy init, checks on every use, locked params, errors."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def _linear():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    lin = bx.Linear(graph / "lin", 4, rng=rng)
    params = rng.seed(bx.Params(), seed=0)
    return lin, params


def test_lazy_init_creates_once_then_reuses():
    lin, params = _linear()
    assert ("net", "lin", "kernel") not in params
    _, params = lin(params, jnp.ones((2, 3)))
    kernel = params[("net", "lin", "kernel")].value
    _, again = lin(params.locked(), jnp.ones((2, 3)))
    assert again[("net", "lin", "kernel")].value is kernel


def test_shape_mismatch_names_path_and_both_shapes():
    lin, params = _linear()
    _, params = lin(params, jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="kernel") as info:
        lin(params.locked(), jnp.ones((2, 5)))
    msg = str(info.value)
    assert isinstance(info.value, bx.ParamShapeError)
    assert "net/lin/kernel has shape (3, 4), but Linear net/lin asked for (5, 4)" in msg
    assert "re-initialise" in msg and "dot_general" not in msg


def test_shape_mismatch_that_would_broadcast_is_caught():
    graph = bx.Graph("net")
    norm = bx.LayerNorm(graph / "ln")
    _, params = norm(bx.Params(), jnp.ones((2, 1)))
    # a (1,) scale would silently broadcast against 4 features; it must not
    with pytest.raises(bx.ParamShapeError, match=r"net/ln/scale has shape \(1,\).*\(4,\)"):
        norm(params, jnp.ones((2, 4)))


def test_dtype_mismatch_is_a_value_error():
    lin, params = _linear()
    _, params = lin(params, jnp.ones((1, 3)))
    half = jax.tree.map(lambda x: x.astype(jnp.bfloat16) if x.dtype == jnp.float32 else x, params)
    with pytest.raises(ValueError, match=r"net/lin/kernel has dtype bfloat16.*expects float32"):
        lin(half, jnp.ones((1, 3)))


def test_locked_params_refuse_creation_and_say_how_to_unlock():
    lin, params = _linear()
    with pytest.raises(bx.LockedParamsError) as info:
        lin(params.locked(), jnp.ones((1, 3)))
    msg = str(info.value)
    assert "Linear net/lin tried to create parameter net/lin/kernel" in msg
    assert "params.unlocked()" in msg


def test_missing_param_without_init_lists_near_matches():
    class Reader(bx.Module):
        def __call__(self, params):
            return self.get_param(params, "kernal", (3, 4))

    graph = bx.Graph("net")
    reader = Reader(graph / "lin")
    params = bx.Params({("net", "lin", "kernel"): jnp.ones((3, 4))})
    with pytest.raises(bx.MissingParamError) as info:
        reader(params)
    assert "net/lin/kernal is missing and no init" in str(info.value)
    assert "Did you mean 'net/lin/kernel'" in str(info.value)


def test_set_param_updates_and_checks():
    class Acc(bx.Module):
        def __call__(self, params, x):
            total, params = self.get_param(
                params, "total", x.shape, jnp.zeros(x.shape), trainable=False
            )
            return total + x, self.set_param(params, "total", total + x)

    acc = Acc(bx.Graph("net") / "acc")
    _, params = acc(bx.Params(), jnp.ones(2))
    _, params = acc(params, jnp.ones(2))
    np.testing.assert_array_equal(params[("net", "acc", "total")].value, [2.0, 2.0])
    assert params[("net", "acc", "total")].trainable is False
    with pytest.raises(bx.ParamShapeError, match=r"set_param got a value of shape \(3,\)"):
        acc.set_param(params, "total", jnp.ones(3))
    with pytest.raises(bx.MissingParamError, match=r"net/acc/totl does not exist.*'total'"):
        acc.set_param(params, "totl", jnp.ones(2))


def test_initializer_needing_a_key_without_rng():
    lin = bx.Linear(bx.Graph("net") / "lin", 2)
    with pytest.raises(TypeError, match=r"initializer of net/lin/kernel failed with key=None.*rng"):
        lin(bx.Params(), jnp.ones((1, 3)))


def test_unseeded_rng_names_path_and_fix():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    lin = bx.Linear(graph / "lin", 2, rng=rng)
    with pytest.raises(bx.RngError) as info:
        lin(bx.Params(), jnp.ones((1, 3)))
    assert "Rng net/rng has no seed" in str(info.value)
    assert "params = rng.seed(params, seed=0)" in str(info.value)


def test_logical_axes_metadata_is_validated():
    lin = bx.Linear(
        bx.Graph("net") / "lin",
        2,
        kernel_metadata={"logical_axes": ("embed",)},
        kernel_init=jax.nn.initializers.zeros,
    )
    with pytest.raises(ValueError, match=r"net/lin/kernel: logical_axes \('embed',\).*2 dim"):
        lin(bx.Params(), jnp.ones((1, 3)))


def test_transforms_compose_on_a_model():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mlp = bx.MLP(graph / "mlp", [8, 1], rng=rng)
    x = jnp.ones((4, 3))
    params = jax.jit(lambda p: mlp(p, x)[1])(rng.seed(bx.Params(), seed=0)).locked()
    abstract = jax.eval_shape(lambda: mlp(rng.seed(bx.Params(), seed=0), x)[1])
    assert [p.shape for p in abstract.values()] == [p.shape for p in params.values()]

    trainable, rest = params.split()

    def loss(t, x):
        y, _ = mlp(t.merge(rest), x)
        return jnp.mean(y**2)

    g1 = jax.jit(jax.grad(loss))(trainable, x)
    g2 = jax.grad(jax.checkpoint(loss))(trainable, x)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    ys, _ = jax.vmap(lambda xi: mlp(params, xi))(x)
    np.testing.assert_allclose(ys, mlp(params, x)[0], rtol=1e-5)


@pytest.mark.parametrize(
    ("value", "shown", "hint"),
    [
        (None, "is None", r"Parameters hold arrays"),
        ([1.0, 2.0], r"is a list \(\[1.0, 2.0\]\)", r"jnp.asarray\(value\)"),
        ("zeros", r"is a str \('zeros'\)", r"Parameters hold arrays"),
    ],
)
def test_set_param_refuses_non_array_values_naming_the_path(value, shown, hint):
    lin = bx.Linear(bx.Graph("net") / "lin", 2)
    params = bx.Params({("net", "lin", "kernel"): jnp.zeros((2, 2))})
    with pytest.raises(TypeError) as info:
        lin.set_param(params, "kernel", value)
    text = str(info.value)
    assert text.startswith("Linear net/lin.set_param: the new value of net/lin/kernel ")
    assert re.search(shown, text), text
    assert "must be a JAX or NumPy array (or a number)" in text
    assert re.search(hint, text), text


def test_set_param_refuses_a_param_and_says_how_to_change_flags():
    lin = bx.Linear(bx.Graph("net") / "lin", 2)
    params = bx.Params({("net", "lin", "kernel"): jnp.zeros((2, 2))})
    with pytest.raises(TypeError, match=r"is a Param .*pass param.value.*params.merge"):
        lin.set_param(params, "kernel", bx.Param(jnp.ones((2, 2)), trainable=False))
    kept = lin.set_param(params, "kernel", np.ones((2, 2), np.float32))
    assert kept[("net", "lin", "kernel")].trainable is True
