"""Params and Param: immutability, pytree keys, split/merge, locking, errors, interop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx
from core_primitives import has_logical_axes


def _params() -> bx.Params:
    return bx.Params(
        {
            ("net", "l1", "kernel"): bx.Param(
                jnp.ones((2, 3)), metadata={"logical_axes": ("a", "b")}
            ),
            ("net", "rng", "counter"): bx.Param(jnp.zeros((), jnp.uint32), trainable=False),
            ("net", "l1", "bias"): bx.Param(jnp.zeros(3)),
        }
    )


def test_key_paths_are_readable():
    keys = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_leaves_with_path(_params())]
    assert keys == ["['net/l1/kernel']", "['net/rng/counter']", "['net/l1/bias']"]


def test_children_are_the_values_and_flags_are_static():
    params = _params()
    leaves, treedef = jax.tree.flatten(params)
    assert [leaf.shape for leaf in leaves] == [(2, 3), (), (3,)]
    assert all(isinstance(leaf, jax.Array) for leaf in leaves)
    # Flags and metadata are part of the structure: changing one changes the treedef.
    frozen = params._with(
        ("net", "l1", "bias"), params[("net", "l1", "bias")].replace(trainable=False)
    )
    assert jax.tree.structure(frozen) != treedef
    assert jax.tree.structure(jax.tree.map(lambda x: x * 2, params)) == treedef


def test_a_param_on_its_own_is_a_pytree_node():
    param = bx.Param(jnp.ones(2), trainable=False, metadata={"logical_axes": ("a",)})
    doubled = jax.tree.map(lambda x: x * 2, param)
    assert doubled.trainable is False and doubled.metadata == {"logical_axes": ("a",)}
    np.testing.assert_array_equal(doubled.value, [2.0, 2.0])
    paths = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_leaves_with_path(param)]
    assert paths == [".value"]


def test_map_computes_per_param_with_flags_and_metadata():
    params = _params()
    axes = params.map(lambda p: p.logical_axes)
    assert axes[("net", "l1", "kernel")].value == ("a", "b")
    mask = params.locked().map(lambda p: p.trainable)
    assert mask.is_locked and jax.tree.structure(mask) == jax.tree.structure(params.locked())
    assert jax.tree.leaves(mask) == [True, False, True]


def test_tree_map_keeps_flags_and_metadata():
    mapped = jax.tree.map(lambda x: x + 1, _params())
    assert isinstance(mapped, bx.Params)
    assert mapped[("net", "rng", "counter")].trainable is False
    assert mapped[("net", "l1", "kernel")].metadata == {"logical_axes": ("a", "b")}
    assert float(mapped[("net", "l1", "bias")].value[0]) == 1.0


def test_params_never_mutate_in_place():
    params = _params()
    with pytest.raises(TypeError):
        params[("net", "x")] = 1  # type: ignore[index]
    with pytest.raises(AttributeError, match="has no setter"):
        params[("net", "l1", "bias")].value = jnp.ones(3)  # type: ignore[misc]
    locked = params.locked()
    assert not params.is_locked and locked.is_locked and not locked.unlocked().is_locked
    trainable, _ = params.split()
    assert len(params) == 3 and len(trainable) == 2


def test_mapping_interface():
    params = _params()
    path = ("net", "l1", "kernel")
    assert path in params and ("nope",) not in params
    assert params.get(("nope",)) is None
    assert next(iter(params.keys())) == path
    assert dict(params.items())[path].value is params[path].value


def test_missing_path_suggests_near_matches():
    with pytest.raises(bx.MissingParamError) as info:
        _params()[("net", "l1", "kernal")]
    msg = str(info.value)
    assert "net/l1/kernal not found" in msg and "Did you mean 'net/l1/kernel'" in msg
    assert isinstance(info.value, KeyError)  # Mapping.get and `in` keep working


def test_string_key_explains_tuple_paths():
    with pytest.raises(TypeError, match=r"tuples of strings.*\('net', 'l1', 'kernel'\)"):
        _params()["net/l1/kernel"]  # type: ignore[index]


def test_split_merge_round_trip_has_stable_treedef():
    params = _params()
    trainable, rest = params.split()
    assert list(rest) == [("net", "rng", "counter")]
    merged = trainable.merge(rest)
    assert list(merged) == list(params)
    assert jax.tree.structure(merged) == jax.tree.structure(params)

    traces = []

    @jax.jit
    def f(p):
        traces.append(1)
        return p

    f(params)
    f(trainable.merge(rest))
    f(jax.tree.map(lambda x: x * 2, params))
    assert len(traces) == 1


def test_split_with_predicate_and_merge_override():
    params = _params()
    kernels, others = params.split(lambda path, p: path[-1] == "kernel")
    assert list(kernels) == [("net", "l1", "kernel")]
    newer = bx.Params({("net", "l1", "bias"): jnp.full(3, 7.0)})
    merged = params.merge(newer)
    assert float(merged[("net", "l1", "bias")].value[0]) == 7.0
    assert list(merged) == list(params)


def test_merge_rejects_dicts():
    with pytest.raises(TypeError, match=r"expects another Params, got dict.*Params\(\{"):
        _params().merge({("x",): 1})  # type: ignore[arg-type]


def test_merge_keeps_lock():
    a, b = _params().locked().split()
    assert a.merge(b).is_locked


def test_param_satisfies_logical_axes_protocol():
    param = _params()[("net", "l1", "kernel")]
    assert has_logical_axes(param)
    assert param.logical_axes == ("a", "b") and param.shape == (2, 3)
    assert param.dtype == jnp.float32
    assert _params()[("net", "l1", "bias")].logical_axes is None
    for _, param in _params().items():
        assert has_logical_axes(param)


def test_metadata_must_be_hashable():
    with pytest.raises(TypeError, match=r"unhashable ndarray.*must be hashable"):
        bx.Param(1.0, metadata={"table": np.zeros(2)})
    assert bx.Param(1.0, metadata={"axes": ["a"]}).metadata["axes"] == ("a",)


def test_param_replace_and_repr():
    p = bx.Param(jnp.zeros((2,), jnp.bfloat16), trainable=False)
    assert repr(p) == "Param(bfloat16[2], trainable=False)"
    assert p.replace(trainable=True).trainable
    with pytest.raises(TypeError, match="unknown field"):
        p.replace(shape=(3,))


def test_jit_grad_vmap_eval_shape():
    params = _params()
    trainable, rest = params.split()

    def loss(t):
        return jnp.sum(t[("net", "l1", "kernel")].value ** 2)

    grads = jax.jit(jax.grad(loss))(trainable)
    assert isinstance(grads, bx.Params)
    np.testing.assert_allclose(grads[("net", "l1", "kernel")].value, 2.0)
    shapes = jax.eval_shape(lambda p: p, params)
    assert shapes[("net", "l1", "kernel")].shape == (2, 3)
    batched = jax.vmap(lambda p: p)(jax.tree.map(lambda x: jnp.stack([x, x]), params))
    assert batched[("net", "l1", "kernel")].shape == (2, 2, 3)


def test_optax_on_trainable_split():
    optax = pytest.importorskip("optax")
    trainable, _ = _params().split()
    mask = jax.tree.map(lambda x: x.ndim > 1, trainable)
    tx = optax.adamw(1e-2, mask=mask)
    state = tx.init(trainable)
    grads = jax.tree.map(jnp.ones_like, trainable)
    updates, state = tx.update(grads, state, trainable)
    new = optax.apply_updates(trainable, updates)
    assert isinstance(new, bx.Params)
    assert float(new[("net", "l1", "kernel")].value[0, 0]) < 1.0


def test_orbax_round_trip(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    params = _params().locked()
    path = tmp_path / "ckpt"
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(path, params)
    with ocp.StandardCheckpointer() as ckptr:
        restored = ckptr.restore(path, jax.eval_shape(lambda: params))
    assert isinstance(restored, bx.Params) and restored.is_locked
    assert list(restored) == list(params)
    assert restored[("net", "rng", "counter")].trainable is False
    assert restored[("net", "l1", "kernel")].metadata == {"logical_axes": ("a", "b")}
    np.testing.assert_array_equal(restored[("net", "l1", "kernel")].value, 1.0)


def test_orbax_standard_save_and_restore_args(tmp_path):
    ocp = pytest.importorskip("orbax.checkpoint")
    params = _params().locked()
    with ocp.Checkpointer(ocp.StandardCheckpointHandler()) as ckptr:
        ckptr.save(tmp_path / "ckpt", args=ocp.args.StandardSave(params))
        abstract = jax.eval_shape(lambda: params)
        restored = ckptr.restore(tmp_path / "ckpt", args=ocp.args.StandardRestore(abstract))
    assert jax.tree.structure(restored) == jax.tree.structure(params)
    assert restored[("net", "l1", "kernel")].logical_axes == ("a", "b")
