"""Checks behind ``logdict``: per-event signatures, validation, and their error messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

from core_primitives import did_you_mean, dtype_shape, list_alternatives

PyTree = Any
Steps = dict[str, dict[str, Any]]


# ---------------------------------------------------------------------------------------------
# Signatures: how one key's value looks per event, for error messages and compatibility checks.


def shape_of(x: Any) -> tuple[int, ...]:
    return tuple(np.shape(x))


def _dtype_name(x: Any) -> str:
    dtype = getattr(x, "dtype", None)
    return np.dtype(dtype).name if dtype is not None else type(x).__name__


class _Shown:
    """Stands in for a leaf inside a pytree so ``repr(tree)`` prints ``float32[3]``, not values."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


def show_tree(tree: PyTree, *, per_event: bool = False) -> str:
    """A pytree with every leaf shown as ``dtype[shape]`` (per event: without the event axis).

    Example:
        >>> import numpy as np
        >>> show_tree({'w': np.zeros((3, 2), np.float32)})
        "{'w': float32[3,2]}"
        >>> show_tree({'w': np.zeros((3, 2), np.float32)}, per_event=True)
        "{'w': float32[2]}"
    """
    shown = jax.tree.map(lambda x: _Shown(dtype_shape(x, drop_leading=int(per_event))), tree)
    return repr(shown)


def signature(value: PyTree) -> tuple[Any, tuple[tuple[tuple[int, ...], str], ...]]:
    """What must agree for two event blocks of one key to concatenate: structure, shapes, dtypes."""
    leaves, treedef = jax.tree.flatten(value)
    return treedef, tuple((shape_of(x)[1:], _dtype_name(x)) for x in leaves)


def check_same_signature(key: str, left: PyTree, right: PyTree, *, where: str) -> None:
    """Raise a ValueError naming ``key`` and both per-event signatures when they differ."""
    if signature(left) == signature(right):
        return
    raise ValueError(
        f"{where}: key {key!r} has a different pytree structure, shape or dtype on the two sides: "
        f"{show_tree(left, per_event=True)} per event vs {show_tree(right, per_event=True)} per "
        "event. One key must keep one structure, shape and dtype across all its events (no "
        "silent promotion). Log a consistent value (cast or reshape it at the log site), or "
        "use a different key for the other kind of value."
    )


# ---------------------------------------------------------------------------------------------
# Validation of a freshly built logdict (not of one rebuilt by JAX from its children).


def _num_events(key: str, what: str, tree: PyTree) -> set[int]:
    counts = set()
    for leaf in jax.tree.leaves(tree):
        if np.ndim(leaf) == 0:
            raise ValueError(
                f"logdict: {what} of key {key!r} has a 0-d leaf ({dtype_shape(leaf)}), but every "
                "entry needs a leading event axis (one row per logged event). Add one with "
                "`x[None]`, or record values with `lox.log` and collect them with `lox.spool`."
            )
        counts.add(shape_of(leaf)[0])
    return counts


def _check_steps(key: str, steps: Mapping[str, Any]) -> None:
    for name, value in steps.items():
        if not isinstance(name, str):
            raise TypeError(
                f"logdict: step names must be str, got {name!r} ({type(name).__name__}) for key "
                f"{key!r}. Use names such as 'step' or 'epoch'."
            )
        dtype = getattr(value, "dtype", None)
        if dtype is None or not np.issubdtype(np.dtype(dtype), np.integer):
            raise TypeError(
                f"logdict: step {name!r} of key {key!r} must be an integer array, got "
                f"{dtype_shape(value)}. Steps are counters (step, epoch); cast them with "
                "`jnp.asarray(x, jnp.int32)`."
            )


def validate(data: dict[str, PyTree], steps: Steps) -> None:
    for key in data:
        if not isinstance(key, str):
            raise TypeError(
                f"logdict: keys must be str, got {key!r} ({type(key).__name__}). "
                f"Convert it, e.g. logdict({{str({key!r}): value}})."
            )
    for key, key_steps in steps.items():
        if key not in data:
            raise ValueError(
                f"logdict: steps were given for key {key!r}, which has no data. Keys with data: "
                f"{list_alternatives(data)}.{did_you_mean(key, data)}"
            )
        _check_steps(key, key_steps)
    for key, value in data.items():
        counts = _num_events(key, "the value", value) | _num_events(key, "a step", steps[key])
        if len(counts) > 1:
            raise ValueError(
                f"logdict: key {key!r} has leaves and steps with different event counts "
                f"{sorted(counts)} (the leading axis): value {show_tree(value)}, steps "
                f"{show_tree(steps[key])}. Every leaf and step of one key needs the same "
                "number of events."
            )


def check_same_steps(key: str, left: Mapping[str, Any], right: Mapping[str, Any]) -> None:
    for name in sorted(set(left) ^ set(right)):
        side, other = ("left", "right") if name in left else ("right", "left")
        raise ValueError(
            f"logdict + logdict: key {key!r} has step {name!r} on the {side} side but not on "
            f"the {other} (steps: left {sorted(left)}, right {sorted(right)}). A key that has "
            "a step at some events needs it at every event: log it at every site of this key "
            f"(e.g. lox.log(..., {name}=i)), or drop it from both sides."
        )
