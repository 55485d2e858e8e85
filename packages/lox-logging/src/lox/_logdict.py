"""``logdict``: logged values with a leading event axis, their steps, and the algebra over them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core_primitives import did_you_mean, list_alternatives

from ._html import logdict_html
from ._logdict_checks import (
    PyTree,
    Steps,
    check_same_signature,
    check_same_steps,
    shape_of,
    show_tree,
    validate,
)

REDUCE_MODES = ("mean", "sum", "min", "max", "first", "last")


class LogKeyMissingError(KeyError):
    """A key that is not in a logdict.

    A ``KeyError`` because ``logdict`` is a ``Mapping`` (``.get`` and ``in`` rely on it), with
    ``str`` overridden so the message is not shown quoted, as plain ``KeyError`` would.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


# ---------------------------------------------------------------------------------------------
# Leaf helpers that keep host (numpy) data on the host and everything else in jax.numpy.


def _concat(a: Any, b: Any) -> Any:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.concatenate([a, b], axis=0)
    return jnp.concatenate([jnp.asarray(a), jnp.asarray(b)], axis=0)


def _is_static_int(index: Any) -> bool:
    return isinstance(index, int | np.integer) and not isinstance(index, bool)


def _event_index(index: Any) -> Any:
    """Turn a user's event index into one that keeps the event axis (an int becomes a slice)."""
    if isinstance(index, tuple | type(Ellipsis) | str | bytes | float) or index is None:
        raise TypeError(
            f"logdict.slice[...] indexes the event axis only, got {index!r}. Expected an int, "
            "a slice, an integer array or a boolean mask, e.g. logs.slice[-1] or "
            "logs.slice[10:20]. To index inside values, use jax.tree.map on the logdict."
        )
    if _is_static_int(index):
        return slice(index, index + 1 if index != -1 else None)
    if np.ndim(index) == 0 and not isinstance(index, slice):
        # A traced scalar index: gather one row, which keeps the axis.
        return jnp.reshape(index, (1,))
    return index


class _Slicer:
    def __init__(self, logs: logdict):
        self._logs = logs

    def __getitem__(self, index: Any) -> logdict:
        if _is_static_int(index):
            self._check_in_range(int(index))
        index = _event_index(index)
        take = lambda x: x[index]
        return self._logs._map_events(lambda _, v, s: (jax.tree.map(take, v), _map(take, s)))

    def _check_in_range(self, index: int) -> None:
        # A slice would silently give zero events where NumPy raises for an int.
        for key, value in self._logs.items():
            for leaf in jax.tree.leaves(value):
                n = shape_of(leaf)[0]
                if not -n <= index < n:
                    raise IndexError(
                        f"logdict.slice[{index}]: key {key!r} has {n} events, so valid event "
                        f"indices are {-n}..{n - 1}. Filter the keys first "
                        "(logs.filter(...)) or use a slice, which may be empty."
                    )


def _map(fn: Callable[[Any], Any], steps: Mapping[str, Any]) -> dict[str, Any]:
    return {name: fn(x) for name, x in steps.items()}


def _reducer(mode: str | Callable[..., Any]) -> tuple[Callable[[str, Any], Any], bool]:
    """The per-leaf reduction for ``mode`` and whether steps come from the first event."""
    if callable(mode):
        return (lambda key, x: _call_reducer(mode, key, x)), False
    table = {
        "mean": lambda key, x: jnp.mean(x, axis=0, keepdims=True),
        "sum": lambda key, x: jnp.sum(x, axis=0, keepdims=True),
        "min": lambda key, x: jnp.min(x, axis=0, keepdims=True),
        "max": lambda key, x: jnp.max(x, axis=0, keepdims=True),
        "first": lambda key, x: x[:1],
        "last": lambda key, x: x[-1:],
    }
    if mode not in table:
        raise ValueError(
            f"logdict.reduce: unknown mode {mode!r}. Expected one of "
            f"{list_alternatives(REDUCE_MODES)} or a callable fn(values, axis=0)."
            f"{did_you_mean(str(mode), REDUCE_MODES)}"
        )
    return table[mode], mode == "first"


def _call_reducer(fn: Callable[..., Any], key: str, x: Any) -> Any:
    out = fn(x, axis=0)
    per_event = shape_of(x)[1:]
    if shape_of(out) == per_event:
        return jnp.expand_dims(jnp.asarray(out), 0)
    if shape_of(out) == (1, *per_event):
        return out
    raise ValueError(
        f"logdict.reduce: the callable returned shape {shape_of(out)} for key {key!r}, whose "
        f"values have shape {shape_of(x)}; expected {per_event} (the event axis reduced away) or "
        f"{(1, *per_event)} (kept with keepdims=True). Make it reduce over `axis` only, e.g. "
        "`lambda v, axis: jnp.median(v, axis=axis)`."
    )


# ---------------------------------------------------------------------------------------------


class logdict(Mapping[str, PyTree]):
    """Logged values by key, each with a leading event axis, plus integer steps per event.

    ``logs[key]`` is the pytree of everything logged under ``key``; each leaf has a leading
    event axis (one row per log event, in program order). ``logs.steps[key]`` maps step names
    (``'step'``, ``'epoch'``) to integer arrays with the same event axis. Keys are kept sorted,
    like a dict inside a JAX pytree, so a logdict looks the same before and after ``jax.jit``.

    A logdict is a registered pytree: it can enter and leave ``jit``, ``vmap`` and ``scan``.
    Its methods work on axis 0, which is the event axis inside traced code; on a logdict
    that came out of ``jax.vmap``, axis 0 is the batch axis, so call them under ``jax.vmap``.

    Args:
        data: key -> pytree of arrays with a leading event axis.
        steps: key -> step name -> integer array of shape ``(n_events,)``.

    Raises:
        TypeError: a key or step name is not a ``str``, or a step is not an integer array.
        ValueError: steps name a key without data, a leaf has no event axis, or event
            counts disagree within one key.

    Example:
        >>> import jax.numpy as jnp, lox
        >>> logs = lox.logdict({'loss': jnp.array([3.0, 2.0, 1.0])},
        ...                    steps={'loss': {'step': jnp.array([0, 1, 2])}})
        >>> logs
        logdict({'loss': float32[3]}, steps={'loss': ['step']})
        >>> logs['loss'].tolist(), logs.steps['loss']['step'].tolist()
        ([3.0, 2.0, 1.0], [0, 1, 2])
        >>> logs.reduce('mean')['loss'].tolist(), logs.reduce('mean').steps['loss']['step'].tolist()
        ([2.0], [2])
    """

    __slots__ = ("_data", "_steps")
    _data: dict[str, PyTree]
    _steps: Steps

    def __init__(
        self,
        data: Mapping[str, PyTree] | None = None,
        steps: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        for what, value in (("data", data), ("steps", steps)):
            if value is not None and not isinstance(value, Mapping):
                raise TypeError(
                    f"logdict: {what} must be a mapping from key to values, got "
                    f"{type(value).__name__} ({value!r:.60}). Example: "
                    "lox.logdict({'loss': losses}, steps={'loss': {'step': steps}})."
                )
        data = dict(data or {})
        given_steps = {k: dict(v) for k, v in (steps or {}).items()}
        validate(data, {k: given_steps.get(k, {}) for k in data} | given_steps)
        self._set(data, given_steps)

    def _set(self, data: Mapping[str, PyTree], steps: Mapping[str, Mapping[str, Any]]) -> None:
        keys = sorted(data)
        object.__setattr__(self, "_data", {k: data[k] for k in keys})
        steps = steps if isinstance(steps, Mapping) else {}
        sorted_steps = {k: dict(sorted(steps.get(k, {}).items())) for k in keys}
        object.__setattr__(self, "_steps", sorted_steps)

    @classmethod
    def _unchecked(cls, data: Mapping[str, PyTree], steps: Mapping[str, Any]) -> logdict:
        # JAX rebuilds pytrees with placeholders (None, object(), ShapeDtypeStruct, tracers of
        # any shape) as leaves, so rebuilding must not validate.
        new = object.__new__(cls)
        new._set(data, steps)
        return new

    # -- Mapping -----------------------------------------------------------------------------

    def __getitem__(self, key: str) -> PyTree:
        try:
            return self._data[key]
        except KeyError:
            raise LogKeyMissingError(
                f"logdict has no key {key!r}. Keys: {list_alternatives(self._data)}."
                f"{did_you_mean(str(key), self._data)}"
            ) from None

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __eq__(self, other: object) -> bool:
        # Mapping.__eq__ would compare arrays with `==` and fail on their truth value.
        raise TypeError(
            "logdict does not support `==`: it holds arrays, whose comparison is elementwise. "
            "Compare contents explicitly, e.g. "
            "`jax.tree.all(jax.tree.map(np.array_equal, a, b))` (this includes the steps)."
        )

    __hash__ = None  # type: ignore[assignment]

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(
            f"logdict is immutable (tried to set {name!r}); build a new one with "
            "`logs | logdict({...})`, `logs.filter(...)` or `logdict(data, steps)`."
        )

    @property
    def steps(self) -> dict[str, dict[str, Any]]:
        """Key -> step name -> integer array with the key's event axis (a fresh dict)."""
        return {k: dict(v) for k, v in self._steps.items()}

    def __repr__(self) -> str:
        data = ", ".join(f"{k!r}: {show_tree(v)}" for k, v in self._data.items())
        steps = {k: list(v) for k, v in self._steps.items() if v}
        tail = f", steps={steps!r}" if steps else ""
        return f"logdict({{{data}}}{tail})"

    def _repr_html_(self) -> str:
        """The notebook view: keys as a tree, shapes, events, steps and last values."""
        return logdict_html(self)

    # -- algebra -----------------------------------------------------------------------------

    def _map_events(self, fn: Callable[[str, PyTree, dict[str, Any]], tuple[Any, Any]]) -> logdict:
        """Apply ``fn(key, value, steps) -> (value, steps)`` to every key."""
        data, steps = {}, {}
        for key, value in self._data.items():
            data[key], steps[key] = fn(key, value, self._steps[key])
        return logdict._unchecked(data, steps)

    def __add__(self, other: Any) -> logdict:
        """Concatenate events key by key; keys present on one side only keep their events.

        Raises:
            ValueError: a shared key has different structure, shape or dtype per event, or a
                step on one side only.
        """
        if not isinstance(other, logdict):
            _refuse_plain_mapping("+", other)
            return NotImplemented
        data, steps = dict(self._data), dict(self._steps)
        for key, value in other._data.items():
            if key not in data:
                data[key], steps[key] = value, other._steps[key]
                continue
            check_same_signature(key, data[key], value, where="logdict + logdict")
            check_same_steps(key, steps[key], other._steps[key])
            data[key] = jax.tree.map(_concat, data[key], value)
            steps[key] = {n: _concat(s, other._steps[key][n]) for n, s in steps[key].items()}
        return logdict._unchecked(data, steps)

    def __radd__(self, other: Any) -> logdict:
        # Lets `sum(list_of_logdicts)` start from its default 0.
        if isinstance(other, int) and other == 0:
            return self
        return NotImplemented

    def __or__(self, other: Any) -> logdict:
        """Merge keys; for a key on both sides the right operand wins (data and steps), as dict."""
        if not isinstance(other, logdict):
            _refuse_plain_mapping("|", other)
            return NotImplemented
        return logdict._unchecked(self._data | other._data, self._steps | other._steps)

    @property
    def slice(self) -> _Slicer:
        """Index the event axis of every value and step together: ``logs.slice[-10:]``.

        An int keeps a length-1 event axis (``logs.slice[-1]`` is the last event); slices,
        integer arrays and boolean masks work as in NumPy.

        Example:
            >>> import jax.numpy as jnp
            >>> logs = logdict({'x': jnp.arange(5)}, steps={'x': {'step': jnp.arange(5)}})
            >>> logs.slice[-1]['x'].tolist(), logs.slice[1:3].steps['x']['step'].tolist()
            ([4], [1, 2])
        """
        return _Slicer(self)

    def reduce(self, mode: str | Callable[..., Any] = "mean") -> logdict:
        """Reduce every key over its event axis, keeping a length-1 event axis.

        Args:
            mode: ``"mean"``, ``"sum"``, ``"min"``, ``"max"``, ``"first"``, ``"last"``, or a
                callable called as ``fn(values, axis=0)``. Steps are never averaged: ``"first"``
                keeps the first event's steps, every other mode the last event's. A key with
                no events stays empty.

        Raises:
            ValueError: an unknown mode, or a callable that returns the wrong shape.

        Example:
            >>> import jax.numpy as jnp
            >>> logs = logdict({'x': jnp.array([1.0, 5.0, 3.0])},
            ...                steps={'x': {'step': jnp.array([10, 20, 30])}})
            >>> r = logs.reduce('max')
            >>> r['x'].tolist(), r.steps['x']['step'].tolist()
            ([5.0], [30])
            >>> logs.reduce(jnp.median)['x'].tolist()
            [3.0]
        """
        fn, first = _reducer(mode)
        pick = (lambda s: s[:1]) if first else (lambda s: s[-1:])

        def reduce_key(key: str, value: PyTree, steps: dict[str, Any]) -> tuple[Any, Any]:
            if any(shape_of(x)[0] == 0 for x in jax.tree.leaves(value)):
                return value, steps
            return jax.tree.map(lambda x: fn(key, x), value), _map(pick, steps)

        return self._map_events(reduce_key)

    def filter(self, pred: Callable[[str, PyTree], bool]) -> logdict:
        """Keep the keys for which ``pred(key, value)`` is true (steps go with their key).

        Example:
            >>> import jax.numpy as jnp
            >>> logs = logdict({'loss': jnp.zeros(2), 'acc': jnp.ones(2)})
            >>> list(logs.filter(lambda key, value: key.startswith('l')))
            ['loss']
        """
        if not callable(pred):
            raise TypeError(
                f"logdict.filter: expected a predicate pred(key, value) -> bool, got {pred!r:.60} "
                f"({type(pred).__name__}). Example: logs.filter(lambda key, value: "
                "key.startswith('train/'))."
            )
        keep = [key for key, value in self._data.items() if _truth(pred(key, value), key)]
        return logdict._unchecked({k: self._data[k] for k in keep}, self._steps)

    def prefix(self, prefix: str) -> logdict:
        """Prepend ``prefix`` to every key: ``logs.prefix('train/')``.

        Example:
            >>> import jax.numpy as jnp
            >>> list(logdict({'loss': jnp.zeros(1)}).prefix('train/'))
            ['train/loss']
        """
        if not isinstance(prefix, str):
            raise TypeError(
                f"logdict.prefix: expected a str, got {prefix!r} ({type(prefix).__name__}). "
                "Use e.g. logs.prefix('train/')."
            )
        data = {prefix + k: v for k, v in self._data.items()}
        return logdict._unchecked(data, {prefix + k: v for k, v in self._steps.items()})


def _refuse_plain_mapping(op: str, other: Any) -> None:
    # A plain dict has no `+`/`|` with a logdict; Python's own message would not say how to fix it.
    if isinstance(other, Mapping):
        raise TypeError(
            f"logdict {op} {type(other).__name__}: both sides must be logdicts. Wrap the mapping "
            f"first: logs {op} lox.logdict(values) (each value with its leading event axis)."
        )


def _truth(result: Any, key: str) -> bool:
    if isinstance(result, bool | np.bool_):
        return bool(result)
    raise TypeError(
        f"logdict.filter: the predicate returned {result!r} for key {key!r}; expected a "
        "Python bool. Decide from the key, or from shapes and dtypes: values may be traced "
        "under jit, so their contents are unknown when filtering."
    )


# ---------------------------------------------------------------------------------------------
# Pytree registration: children are each key's value (keyed ['name']) and the steps
# (keyed .steps['name']['step']), so `jax.tree_util.keystr` reads like the Python access.


def _flatten_with_keys(logs: logdict) -> tuple[list[tuple[Any, Any]], tuple[str, ...]]:
    children = [(jax.tree_util.DictKey(k), v) for k, v in logs._data.items()]
    children.append((jax.tree_util.GetAttrKey("steps"), logs._steps))
    return children, tuple(logs._data)


def _flatten(logs: logdict) -> tuple[list[Any], tuple[str, ...]]:
    return [*logs._data.values(), logs._steps], tuple(logs._data)


_set_data = logdict._data.__set__  # type: ignore[attr-defined]  # the slot descriptors
_set_steps = logdict._steps.__set__  # type: ignore[attr-defined]


def trusted(data: dict[str, PyTree], steps: Steps) -> logdict:
    """A logdict holding ``data`` and ``steps`` as given: no checks, no sorting, no copies.

    For hot paths only, where the caller guarantees what ``logdict(...)`` would establish:
    ``data``'s keys sorted, ``steps`` with the same keys in the same order, each a dict of
    sorted step names, and neither dict used again by the caller.
    """
    new = object.__new__(logdict)
    _set_data(new, data)
    _set_steps(new, steps)
    return new


def _unflatten(keys: tuple[str, ...], children: Any) -> logdict:
    # jit rebuilds every output logdict this way after each call, so this is per-call host
    # time (sorting and re-copying here cost ~5% of a 60 us jitted scan). ``_flatten`` emits
    # the keys sorted and the steps as one dict, which JAX rebuilds with its keys sorted too,
    # so the children can be stored as they come.
    steps = children[-1]
    if type(steps) is not dict or len(steps) != len(keys):
        # The steps subtree was replaced by a leaf (tree_map with is_leaf, a prefix tree).
        return logdict._unchecked(dict(zip(keys, children)), steps)
    return trusted(dict(zip(keys, children)), steps)


jax.tree_util.register_pytree_with_keys(logdict, _flatten_with_keys, _unflatten, _flatten)
