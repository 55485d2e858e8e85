"""logdict: Mapping and pytree behaviour, its algebra (+, |, slice, reduce, filter, prefix)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lox import logdict


def ld(**values):
    """A logdict whose keys all have a 'step' counting their events from 0."""
    steps = {k: {"step": jnp.arange(jax.tree.leaves(v)[0].shape[0])} for k, v in values.items()}
    return logdict(values, steps)


def tolist(tree):
    return jax.tree.map(lambda x: np.asarray(x).tolist(), tree)


def assert_same(a: logdict, b: logdict):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        assert jnp.shape(x) == jnp.shape(y)
        assert jnp.result_type(x) == jnp.result_type(y)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# -- construction, Mapping -----------------------------------------------------------------------


def test_mapping_interface_and_sorted_keys():
    logs = logdict({"b": jnp.zeros(2), "a": {"w": jnp.ones((1, 3))}})
    assert list(logs) == ["a", "b"]
    assert len(logs) == 2
    assert "a" in logs
    assert "zzz" not in logs
    assert logs.get("zzz") is None
    assert tolist(logs["a"]) == {"w": [[1.0, 1.0, 1.0]]}
    assert logs.steps == {"a": {}, "b": {}}
    assert len(logdict()) == 0


def test_steps_property_is_a_copy():
    logs = ld(x=jnp.arange(3.0))
    logs.steps["x"]["step"] = None
    logs.steps.clear()
    assert tolist(logs.steps["x"]["step"]) == [0, 1, 2]


def test_missing_key_error_lists_keys_and_suggests():
    logs = logdict({"loss": jnp.zeros(1), "acc": jnp.zeros(1)})
    with pytest.raises(KeyError) as info:
        logs["los"]
    text = str(info.value)
    assert text == "logdict has no key 'los'. Keys: 'acc', 'loss'. Did you mean 'loss'?"


def test_immutable_and_no_equality():
    logs = logdict({"a": jnp.zeros(1)})
    with pytest.raises(AttributeError, match="logdict is immutable"):
        logs.x = 1
    with pytest.raises(TypeError, match=r"logdict does not support `==`.*np.array_equal"):
        _ = logs == logs


@pytest.mark.parametrize(
    ("data", "steps", "error", "pattern"),
    [
        ({1: jnp.zeros(1)}, None, TypeError, r"keys must be str, got 1 \(int\)"),
        (
            {"loss": jnp.zeros(2)},
            {"lss": {"step": jnp.arange(2)}},
            ValueError,
            r"steps were given for key 'lss', which has no data.*'loss'.*Did you mean 'loss'",
        ),
        (
            {"loss": jnp.float32(1.0)},
            None,
            ValueError,
            r"value of key 'loss' has a 0-d leaf \(float32\[\]\).*leading event axis.*x\[None\]",
        ),
        (
            {"p": {"a": jnp.zeros(2), "b": jnp.zeros(3)}},
            None,
            ValueError,
            r"key 'p' has leaves and steps with different event counts \[2, 3\]",
        ),
        (
            {"loss": jnp.zeros(2)},
            {"loss": {"step": jnp.arange(3)}},
            ValueError,
            r"key 'loss' has leaves and steps with different event counts \[2, 3\]",
        ),
        (
            {"loss": jnp.zeros(2)},
            {"loss": {"step": jnp.zeros(2)}},
            TypeError,
            r"step 'step' of key 'loss' must be an integer array, got float32\[2\]",
        ),
        (
            {"loss": jnp.zeros(2)},
            {"loss": {0: jnp.arange(2)}},
            TypeError,
            r"step names must be str, got 0 \(int\) for key 'loss'",
        ),
    ],
)
def test_construction_errors(data, steps, error, pattern):
    with pytest.raises(error, match=pattern):
        logdict(data, steps)


def test_repr_shows_signatures_not_values():
    logs = logdict(
        {"loss": jnp.zeros(3), "p": {"w": jnp.zeros((3, 2), jnp.bfloat16)}},
        {"loss": {"step": jnp.arange(3), "epoch": jnp.arange(3)}},
    )
    expected = (
        "logdict({'loss': float32[3], 'p': {'w': bfloat16[3,2]}}, "
        "steps={'loss': ['epoch', 'step']})"
    )
    assert repr(logs) == expected
    assert repr(logdict()) == "logdict({})"
    seen = []
    jax.jit(lambda x: seen.append(repr(x)) or x)(logs)
    assert seen == [expected]


# -- pytree --------------------------------------------------------------------------------------


def test_keypaths_read_like_python_access():
    logs = logdict({"p": {"w": jnp.zeros(1)}, "x": jnp.zeros(1)}, {"x": {"step": jnp.arange(1)}})
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(logs)]
    assert paths == ["['p']['w']", "['x']", ".steps['x']['step']"]


def test_treedef_ignores_insertion_order():
    a = logdict({"x": jnp.zeros(1), "y": jnp.zeros(1)})
    b = logdict({"y": jnp.zeros(1), "x": jnp.zeros(1)})
    assert jax.tree.structure(a) == jax.tree.structure(b)
    assert jax.tree.structure(a) != jax.tree.structure(logdict({"x": jnp.zeros(1)}))


def test_tree_map_keeps_steps_and_allows_placeholder_leaves():
    logs = ld(x=jnp.arange(3.0))
    doubled = jax.tree.map(lambda v: v * 2, logs)
    assert tolist(doubled["x"]) == [0.0, 2.0, 4.0]
    assert tolist(doubled.steps["x"]["step"]) == [0, 2, 4]
    # JAX rebuilds pytrees around placeholders (None, objects, ShapeDtypeStructs).
    shapes = jax.eval_shape(lambda v: v, logs)
    assert shapes["x"].shape == (3,)
    assert jax.tree.structure(jax.tree.map(lambda _: object(), logs)) == jax.tree.structure(logs)


def test_rebuilt_logdict_keeps_key_and_step_order_and_survives_a_replaced_steps_subtree():
    logs = logdict(
        {"b": jnp.ones(2), "a": jnp.zeros(2)},
        {"b": {"step": jnp.arange(2), "epoch": jnp.zeros(2, jnp.int32)}},
    )
    leaves, treedef = jax.tree.flatten(logs)
    rebuilt = jax.tree.unflatten(treedef, leaves)
    assert list(rebuilt) == ["a", "b"]
    assert list(rebuilt.steps["b"]) == ["epoch", "step"] and rebuilt.steps["a"] == {}
    assert repr(jax.jit(lambda v: v)(logs)) == repr(logs)
    # A tree_map that treats the steps dict as a leaf hands a non-dict back to unflatten.
    is_steps = lambda x: isinstance(x, dict) and set(x) == {"a", "b"}
    mapped = jax.tree.map(lambda x: None if is_steps(x) else x, logs, is_leaf=is_steps)
    assert list(mapped) == ["a", "b"] and mapped.steps == {"a": {}, "b": {}}


def test_jit_vmap_scan_in_and_out():
    logs = ld(x=jnp.arange(3.0), p={"w": jnp.ones((3, 2))})
    assert_same(jax.jit(lambda v: v)(logs), logs)
    batched = jax.tree.map(lambda v: jnp.stack([v, v + 1]), logs)
    out = jax.vmap(lambda v: v.reduce("sum"))(batched)
    assert tolist(out["x"]) == [[3.0], [6.0]]
    assert tolist(out.steps["x"]["step"]) == [[2], [3]]

    def body(carry, i):
        return carry, logdict({"i": i[None]}, {"i": {"step": i[None]}})

    _, stacked = jax.lax.scan(body, 0, jnp.arange(4))
    assert stacked["i"].shape == (4, 1)
    assert tolist(stacked.steps["i"]["step"]) == [[0], [1], [2], [3]]


# -- + -------------------------------------------------------------------------------------------


def test_add_concatenates_events_and_steps():
    a = logdict(
        {"x": jnp.array([1.0, 2.0]), "only_a": jnp.zeros(1)}, {"x": {"step": jnp.array([0, 1])}}
    )
    b = logdict({"x": jnp.array([3.0]), "only_b": jnp.ones(2)}, {"x": {"step": jnp.array([2])}})
    c = a + b
    assert list(c) == ["only_a", "only_b", "x"]
    assert tolist(c["x"]) == [1.0, 2.0, 3.0]
    assert tolist(c.steps["x"]["step"]) == [0, 1, 2]
    assert tolist(c["only_b"]) == [1.0, 1.0]
    assert tolist(jax.jit(lambda p, q: p + q)(a, b)["x"]) == [1.0, 2.0, 3.0]


def test_add_pytree_values_and_sum():
    a = ld(p={"w": jnp.zeros((1, 2)), "b": jnp.zeros(1)})
    total = sum([a, a, a])
    assert total["p"]["w"].shape == (3, 2)
    assert tolist(total.steps["p"]["step"]) == [0, 0, 0]


def test_add_keeps_numpy_on_host():
    a = logdict({"x": np.zeros(2, np.float32)})
    assert isinstance((a + a)["x"], np.ndarray)
    assert isinstance((a + logdict({"x": jnp.zeros(2)}))["x"], jax.Array)


@pytest.mark.parametrize(
    ("left", "right", "pattern"),
    [
        (jnp.zeros((2, 3)), jnp.zeros((1, 4)), r"float32\[3\] per event vs float32\[4\] per event"),
        (jnp.zeros(2), jnp.zeros(2, jnp.int32), r"float32\[\] per event vs int32\[\] per event"),
        (
            {"a": jnp.zeros(1)},
            {"b": jnp.zeros(1)},
            r"\{'a': float32\[\]\} per event vs \{'b': float32\[\]\} per event",
        ),
    ],
)
def test_add_mismatch_names_key_and_both_signatures(left, right, pattern):
    with pytest.raises(ValueError, match=r"logdict \+ logdict: key 'k' has a different") as info:
        logdict({"k": left}) + logdict({"k": right})
    assert re.search(pattern, str(info.value)), str(info.value)
    assert "no silent promotion" in str(info.value)


def test_add_step_on_one_side_only():
    a = logdict({"x": jnp.zeros(1)}, {"x": {"step": jnp.arange(1), "epoch": jnp.arange(1)}})
    b = logdict({"x": jnp.zeros(1)}, {"x": {"step": jnp.arange(1)}})
    pattern = r"key 'x' has step 'epoch' on the left side but not on the right"
    with pytest.raises(ValueError, match=pattern):
        a + b
    with pytest.raises(ValueError, match=r"step 'epoch' on the right side but not on the left"):
        b + a


def test_add_other_types_is_type_error():
    with pytest.raises(TypeError):
        logdict() + {"x": 1}


# -- | -------------------------------------------------------------------------------------------


def test_or_merges_and_right_wins_with_its_steps():
    a = logdict({"x": jnp.array([1.0]), "y": jnp.array([5.0])}, {"x": {"step": jnp.array([7])}})
    b = logdict({"x": jnp.array([2.0, 3.0])})
    merged = a | b
    assert list(merged) == ["x", "y"]
    assert tolist(merged["x"]) == [2.0, 3.0]
    assert merged.steps["x"] == {}  # b's entry wins whole: its data and its (absent) steps
    assert tolist((b | a)["x"]) == [1.0]
    assert tolist((b | a).steps["x"]["step"]) == [7]


# -- slice ---------------------------------------------------------------------------------------


def test_slice_forms_keep_event_axis_and_steps():
    logs = ld(x=jnp.arange(5.0), p={"w": jnp.arange(10.0).reshape(5, 2)})
    cases = [
        (-1, [4]),
        (2, [2]),
        (-2, [3]),
        (slice(1, 3), [1, 2]),
        (slice(None, None, 2), [0, 2, 4]),
    ]
    for index, steps in cases:
        out = logs.slice[index]
        assert tolist(out.steps["x"]["step"]) == steps
        assert tolist(out["x"]) == [float(s) for s in steps]
        assert out["p"]["w"].shape == (len(steps), 2)
    assert tolist(logs.slice[jnp.array([4, 0])]["x"]) == [4.0, 0.0]
    mask = np.array([True, False, True, False, False])
    assert tolist(logs.slice[mask].steps["p"]["step"]) == [0, 2]


def test_slice_with_traced_index():
    logs = ld(x=jnp.arange(5.0))
    out = jax.jit(lambda v, i: v.slice[i])(logs, 3)
    assert tolist(out["x"]) == [3.0]
    assert tolist(out.steps["x"]["step"]) == [3]


def test_slice_errors():
    logs = logdict({"x": jnp.zeros(3), "y": jnp.zeros(1)})
    with pytest.raises(IndexError, match=r"slice\[2\]: key 'y' has 1 events.*-1\.\.0"):
        logs.slice[2]
    with pytest.raises(TypeError, match=r"indexes the event axis only, got \(0, 1\).*jax.tree.map"):
        logs.slice[0, 1]


# -- reduce --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "value", "step"),
    [
        ("mean", 2.0, 12),
        ("sum", 6.0, 12),
        ("min", 1.0, 12),
        ("max", 3.0, 12),
        ("first", 3.0, 10),
        ("last", 2.0, 12),
    ],
)
def test_reduce_modes_on_scalar_events(mode, value, step):
    logs = logdict({"x": jnp.array([3.0, 1.0, 2.0])}, {"x": {"step": jnp.array([10, 11, 12])}})
    out = logs.reduce(mode)
    assert tolist(out["x"]) == [value]
    assert tolist(out.steps["x"]["step"]) == [step]


def test_reduce_any_rank_and_pytrees():
    logs = ld(
        v=jnp.arange(6.0).reshape(3, 2), m=jnp.ones((3, 2, 2)), p={"a": jnp.arange(3), "b": None}
    )
    out = logs.reduce("mean")
    assert tolist(out["v"]) == [[2.0, 3.0]]
    assert out["m"].shape == (1, 2, 2)
    assert tolist(out["p"]["a"]) == [1.0]
    assert out["p"]["b"] is None
    assert tolist(logs.reduce("last")["v"]) == [[4.0, 5.0]]


def test_reduce_callable_reducing_or_keeping_axis():
    logs = ld(x=jnp.array([[1.0, 9.0], [3.0, 0.0], [2.0, 5.0]]))
    assert tolist(logs.reduce(jnp.median)["x"]) == [[2.0, 5.0]]
    keep = lambda v, axis: jnp.max(v, axis=axis, keepdims=True)
    assert tolist(logs.reduce(keep)["x"]) == [[3.0, 9.0]]
    assert tolist(logs.reduce(jnp.median).steps["x"]["step"]) == [2]


def test_reduce_keeps_empty_keys_empty_and_result_concatenates():
    logs = ld(x=jnp.arange(3.0)) | logdict(
        {"e": jnp.zeros((0, 2))}, {"e": {"step": jnp.zeros(0, int)}}
    )
    out = logs.reduce("mean")
    assert out["e"].shape == (0, 2)
    assert (out + out)["x"].shape == (2,)


def test_reduce_under_jit_and_vmap():
    logs = ld(x=jnp.arange(4.0))
    assert tolist(jax.jit(lambda v: v.reduce("max"))(logs)["x"]) == [3.0]
    batched = jax.tree.map(lambda v: jnp.stack([v, 2 * v]), logs)
    out = jax.vmap(lambda v: v.reduce("first"))(batched)
    assert tolist(out["x"]) == [[0.0], [0.0]]


def test_reduce_errors():
    logs = ld(x=jnp.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"unknown mode 'maen'.*'first', 'last', 'max'.*'mean'"):
        logs.reduce("maen")
    with pytest.raises(ValueError, match=r"Did you mean 'mean'"):
        logs.reduce("maen")
    with pytest.raises(ValueError, match=r"returned shape \(\) for key 'x'.*expected \(2,\)"):
        logs.reduce(lambda v, axis: jnp.sum(v))


# -- filter, prefix ------------------------------------------------------------------------------


def test_filter_by_key_and_value():
    logs = ld(loss=jnp.zeros(2), acc=jnp.zeros(2), w=jnp.zeros((2, 5)))
    assert list(logs.filter(lambda k, v: k != "acc")) == ["loss", "w"]
    big = logs.filter(lambda k, v: v.ndim > 1)
    assert list(big) == ["w"]
    assert tolist(big.steps["w"]["step"]) == [0, 1]


def test_filter_predicate_must_return_bool():
    logs = ld(x=jnp.arange(2.0))
    with pytest.raises(
        TypeError, match=r"predicate returned .* for key 'x'; expected a Python bool"
    ):
        logs.filter(lambda k, v: v.sum() > 0)


def test_prefix():
    out = ld(loss=jnp.zeros(2)).prefix("train/")
    assert list(out) == ["train/loss"]
    assert tolist(out.steps["train/loss"]["step"]) == [0, 1]
    with pytest.raises(TypeError, match=r"prefix: expected a str, got 3 \(int\)"):
        out.prefix(3)
