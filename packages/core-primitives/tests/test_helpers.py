"""pytree_dataclass, paths, error helpers and identity_primitive."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core_primitives import (
    did_you_mean,
    field,
    format_path,
    format_problems,
    identity_primitive,
    keypath_to_path,
    list_alternatives,
    pytree_dataclass,
)


@pytree_dataclass
class Layer:
    w: jax.Array
    b: jax.Array
    act: str = field(static=True, default="relu")


def test_pytree_dataclass_keys_static_fields_and_jit():
    layer = Layer(jnp.ones(2), jnp.zeros(2))
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(layer)]
    assert paths == [".w", ".b"]
    out = jax.jit(lambda m: dataclasses.replace(m, w=m.w * 2))(layer)
    assert out.act == "relu"
    np.testing.assert_array_equal(out.w, [2.0, 2.0])
    assert jax.tree.structure(Layer(1, 2, "gelu")) != jax.tree.structure(Layer(1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        layer.w = 1


def test_paths():
    assert format_path(("net", "mlp", "kernel")) == "net/mlp/kernel"
    assert format_path(("a/b", "")) == "'a/b'/''"
    ((path, _),) = jax.tree_util.tree_leaves_with_path({"net": [Layer(1, 2)]})[:1]
    assert keypath_to_path(path) == ("net", "0", "w")


def test_error_helpers():
    assert did_you_mean("kernal", ["kernel", "bias"]) == " Did you mean 'kernel'?"
    assert list_alternatives(["b", "a", "c"], limit=2) == "'a', 'b', ... (1 more)"
    assert format_problems("Bad", ["x"]) == "Bad (1 problem):\n  - x"


def test_identity_primitive_rules():
    p = identity_primitive("test_ident", keep_alive=True)
    f = lambda x: p.bind(x * 3.0, tag="t")[0]
    assert float(f(2.0)) == 6.0
    assert float(jax.grad(f)(2.0)) == 3.0
    np.testing.assert_array_equal(jax.vmap(f)(jnp.arange(3.0)), [0.0, 3.0, 6.0])
    assert float(jax.linear_transpose(f, 1.0)(1.0)[0]) == 3.0
    np.testing.assert_array_equal(jax.jit(f)(jnp.ones(2)), [3.0, 3.0])
    # keep_alive: survives dead-code elimination under remat + grad even though unused.
    g = lambda x: (p.bind(x, tag="dead"), jnp.sin(x))[1]
    jaxpr = jax.make_jaxpr(jax.grad(jax.checkpoint(g)))(1.0)
    assert "test_ident" in str(jaxpr)


def test_helper_argument_errors():
    with pytest.raises(TypeError, match=r"pytree_dataclass decorates a class, got 3 \(int\)"):
        pytree_dataclass(3)
    with pytest.raises(TypeError, match=r"name must be a non-empty str .* got ''"):
        identity_primitive("")
    with pytest.raises(TypeError, match=r"identity_primitive\('t'\): jvp must be a callable rule"):
        identity_primitive("t", jvp="default")
    assert format_path("net/l1") == "net/l1"  # a path already shown is kept, not split by letter


def test_backends_initialized_turns_true_when_jax_starts(patience):
    import sys

    script = (
        "from core_primitives import compat; import jax; a = compat.backends_initialized(); "
        "jax.devices(); print(a, compat.backends_initialized())"
    )
    out = patience.run([sys.executable, "-c", script], text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
