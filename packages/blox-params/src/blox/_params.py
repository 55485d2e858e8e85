"""``Param`` (one value with its flags) and ``Params`` (the flat, immutable container of all state).

Speed matters here: every jitted call flattens the ``Params`` it gets and unflattens the one it
returns. So ``Params`` keeps its values as one tuple that flattening hands over as is, and
everything static (paths, each entry's flags and metadata, the lock flag) in a shared
``_Structure`` whose hash is computed once. A ``Param`` is a view made on access; inside a
``Params`` it is not a pytree node, so a round trip costs one Python call, not one per parameter.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar

import jax
import numpy as np

from core_primitives import did_you_mean, dtype_shape, format_path

from ._errors import MissingParamError
from ._html import params_html
from ._treescope import param_treescope, params_treescope

Path = tuple[str, ...]

__all__ = ["Metadata", "Param", "Params"]


def _freeze(value: Any, where: str) -> Any:
    """Turn lists into tuples and dicts into ``Metadata`` so metadata can be hashed."""
    if isinstance(value, Mapping):
        return Metadata(value, _where=where)
    if isinstance(value, list | tuple):
        return tuple(_freeze(v, where) for v in value)
    try:
        hash(value)
    except TypeError as err:
        raise TypeError(
            f"Param metadata {where} holds an unhashable {type(value).__name__}: {value!r}. "
            "Metadata is static (it is part of the pytree structure and of jit cache keys), so it "
            "must be hashable: use tuples, strings and numbers, and keep arrays in the value."
        ) from err
    return value


class Metadata(Mapping[str, Any]):
    """An immutable, hashable mapping of a ``Param``'s static annotations (e.g. ``logical_axes``).

    Lists are stored as tuples. Compares equal to a ``dict`` with the same items.

    Example:
        >>> m = Metadata({'logical_axes': ['embed', 'mlp']})
        >>> m['logical_axes'], m == {'logical_axes': ('embed', 'mlp')}
        (('embed', 'mlp'), True)
    """

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[str, Any] | None = None, *, _where: str = "") -> None:
        if data is not None and not isinstance(data, Mapping):
            raise TypeError(
                f"Param metadata must be a mapping of names to static values, got "
                f"{type(data).__name__} ({data!r:.60}). Example: "
                "Param(value, metadata={'logical_axes': ('embed', 'mlp')})."
            )
        items = dict(data or {})
        self._data = {str(k): _freeze(v, f"{_where}[{k!r}]") for k, v in items.items()}
        self._hash = hash(tuple(sorted(self._data.items(), key=lambda kv: kv[0])))

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if isinstance(other, Metadata):
            return self._hash == other._hash and self._data == other._data
        return isinstance(other, Mapping) and self._data == dict(other)

    def __repr__(self) -> str:
        return repr(self._data)


_NO_METADATA = Metadata()


class _Aux:
    """The static half of a ``Param``: ``(trainable, metadata)``, interned.

    One object per distinct pair, so the pytree aux data hashes and compares by identity in C.
    A Python ``__hash__`` here would run once per parameter on every jitted call (JAX hashes the
    treedef to find the compiled function), which showed up as a ~1.5x dispatch slowdown at
    2,000 parameters.
    """

    __slots__ = ("__weakref__", "metadata", "trainable")
    _interned: ClassVar[dict[tuple[bool, Metadata], _Aux]] = {}

    trainable: bool
    metadata: Metadata

    @classmethod
    def get(cls, trainable: bool, metadata: Metadata) -> _Aux:
        key = (trainable, metadata)
        aux = cls._interned.get(key)
        if aux is None:
            aux = object.__new__(cls)
            aux.trainable, aux.metadata = key
            cls._interned[key] = aux
        return aux

    def __reduce__(self) -> tuple[Any, ...]:
        # Copies and unpickled treedefs must land on the interned object, or identity breaks.
        return (_Aux.get, (self.trainable, self.metadata))

    def __repr__(self) -> str:
        return f"(trainable={self.trainable}, metadata={self.metadata!r})"


class Param:
    """One piece of state: a value plus whether it is trained and static metadata.

    A pytree node: its only child is ``value``; ``trainable`` and ``metadata`` are static (aux
    data), so ``jax.tree.map`` over a ``Param`` maps the value and keeps the flags. A ``Param``
    is immutable and satisfies ``core_primitives.HasLogicalAxes``: ``logical_axes`` comes from
    ``metadata['logical_axes']``, ``shape`` and ``dtype`` from the value.

    Args:
        value: an array (or anything JAX can hold as a leaf).
        trainable: ``True`` for weights that get gradients; ``False`` for state updated in the
            forward pass (RNG counters, batch statistics).
        metadata: static, hashable annotations; ``logical_axes`` (one name or ``None`` per
            dimension) is read by paramspec for sharding.

    Example:
        >>> import jax.numpy as jnp
        >>> p = Param(jnp.zeros((3, 4)), metadata={'logical_axes': ('embed', 'mlp')})
        >>> p
        Param(float32[3,4], trainable=True, metadata={'logical_axes': ('embed', 'mlp')})
        >>> p.shape, p.logical_axes
        ((3, 4), ('embed', 'mlp'))
    """

    # Two slots and nothing else: a Param is made on every read from a Params (and when JAX
    # unflattens a standalone Param), so making one is one object and two stores. The value is
    # stored bare rather than as the children tuple JAX hands over, so that tuple dies at once.
    __slots__ = ("_aux", "_value")

    _value: Any
    _aux: _Aux

    def __init__(
        self, value: Any, trainable: bool = True, metadata: Mapping[str, Any] | None = None
    ) -> None:
        if type(metadata) is not Metadata:
            metadata = _NO_METADATA if not metadata else Metadata(metadata)
        self._value = value
        self._aux = _Aux.get(bool(trainable), metadata)

    @property
    def value(self) -> Any:
        """The stored array."""
        return self._value

    @property
    def trainable(self) -> bool:
        """Whether the value is a weight that gets gradients (see ``Params.split``)."""
        return self._aux.trainable

    @property
    def metadata(self) -> Metadata:
        """Static annotations such as ``logical_axes``."""
        return self._aux.metadata

    def replace(self, **changes: Any) -> Param:
        """A copy with some of ``value``, ``trainable``, ``metadata`` replaced.

        Example:
            >>> Param(1.0).replace(trainable=False).trainable
            False
        """
        fields = {"value": self.value, "trainable": self.trainable, "metadata": self.metadata}
        unknown = set(changes) - set(fields)
        if unknown:
            raise TypeError(
                f"Param.replace got unknown field(s) {sorted(unknown)}; "
                "the fields are 'value', 'trainable' and 'metadata'."
            )
        return Param(**{**fields, **changes})

    @property
    def logical_axes(self) -> tuple[str | None, ...] | None:
        """``metadata['logical_axes']``, or ``None`` (replicate) when absent."""
        return self._aux.metadata.get("logical_axes")

    @property
    def shape(self) -> tuple[int, ...]:
        """The value's shape."""
        shape = getattr(self.value, "shape", None)
        return tuple(shape) if shape is not None else np.shape(self.value)

    @property
    def dtype(self) -> Any:
        """The value's dtype."""
        dtype = getattr(self.value, "dtype", None)
        return dtype if dtype is not None else np.result_type(self.value)

    def __repr__(self) -> str:
        meta = f", metadata={self.metadata!r}" if self.metadata else ""
        return f"Param({dtype_shape(self.value)}, trainable={self.trainable}{meta})"

    def __treescope_repr__(self, path: str | None, subtree_renderer: Any) -> Any:
        return param_treescope(self, path, subtree_renderer)


_new = object.__new__


def _param_unflatten(aux: _Aux, children: Any) -> Param:
    param = _new(Param)
    param._value = children[0]
    param._aux = aux
    return param


_VALUE_KEY = jax.tree_util.GetAttrKey("value")

jax.tree_util.register_pytree_with_keys(
    Param,
    lambda p: (((_VALUE_KEY, p._value),), p._aux),
    _param_unflatten,
    lambda p: ((p._value,), p._aux),
)


class _Structure:
    """The static part of ``Params``: ordered paths, each entry's flags, and the lock flag.

    It is the pytree aux data of ``Params``, so JAX hashes and compares it on every jitted call:
    ``__hash__`` is computed once and ``__eq__`` starts with an identity check (the per-entry
    ``_Aux`` objects are interned, so comparing them is pointer comparison in C). ``ranks`` give
    each path its place in the creation order, so that ``merge`` after ``split`` restores the
    original order and the treedef (no re-trace); they do not take part in equality.
    """

    __slots__ = ("_hash", "_index", "_keys", "auxes", "locked", "paths", "ranks")

    def __init__(
        self,
        paths: tuple[Path, ...],
        auxes: tuple[_Aux, ...],
        ranks: tuple[int, ...],
        locked: bool,
    ) -> None:
        self.paths = paths
        self.auxes = auxes
        self.ranks = ranks
        self.locked = locked
        self._hash = hash((paths, auxes, locked))
        self._index: dict[Path, int] | None = None
        self._keys: tuple[Any, ...] | None = None

    @property
    def index(self) -> dict[Path, int]:
        if self._index is None:
            self._index = {p: i for i, p in enumerate(self.paths)}
        return self._index

    @property
    def keys(self) -> tuple[Any, ...]:
        if self._keys is None:
            self._keys = tuple(jax.tree_util.DictKey(format_path(p)) for p in self.paths)
        return self._keys

    def _derived(self, auxes: tuple[_Aux, ...], locked: bool) -> _Structure:
        # Same paths: the index and key paths carry over.
        new = _Structure(self.paths, auxes, self.ranks, locked)
        new._index, new._keys = self._index, self._keys
        return new

    def with_locked(self, locked: bool) -> _Structure:
        return self if locked == self.locked else self._derived(self.auxes, locked)

    def with_aux(self, i: int, aux: _Aux) -> _Structure:
        if self.auxes[i] is aux:
            return self
        return self._derived((*self.auxes[:i], aux, *self.auxes[i + 1 :]), self.locked)

    def appended(self, path: Path, aux: _Aux) -> _Structure:
        # A process-wide counter: params created later sort later, even across two Params that
        # were built separately and merged afterwards (no interleaving by per-container index).
        new = _Structure(
            (*self.paths, path), (*self.auxes, aux), (*self.ranks, next(_RANKS)), self.locked
        )
        if self._index is not None:
            new._index = {**self._index, path: len(self.paths)}
        return new

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return (
            type(other) is _Structure
            and self._hash == other._hash
            and self.locked == other.locked
            and self.paths == other.paths
            and self.auxes == other.auxes
        )

    def __repr__(self) -> str:
        return f"<{len(self.paths)} paths, locked={self.locked}>"


_EMPTY = _Structure((), (), (), False)
_RANKS = itertools.count()


def _check_path(path: Any) -> Path:
    if type(path) is tuple and all(type(p) is str for p in path):
        return path
    if isinstance(path, str):
        hint = f"(*params_prefix, {path!r})" if "/" not in path else repr(tuple(path.split("/")))
        raise TypeError(
            f"Params keys are tuples of strings, got the string {path!r}. Write {hint} instead."
        )
    raise TypeError(
        f"Params keys are tuples of strings such as ('net', 'l1', 'kernel'), got {path!r} "
        f"({type(path).__name__})."
    )


class Params(Mapping[Path, Param]):
    """The flat, immutable container of all model state, keyed by tuple paths.

    A ``Mapping`` from paths such as ``('net', 'l1', 'kernel')`` to ``Param``. Every update returns
    a new ``Params``; nothing mutates in place. As a pytree its children are the values themselves
    (the arrays), with key paths that read ``['net/l1/kernel']``; each ``Param``'s ``trainable``
    flag and metadata are static aux data, so ``jax.tree.map`` keeps them. Use :meth:`map` to
    compute something per ``Param`` (shardings, optimizer masks).

    Args:
        entries: optional initial entries, ``path -> Param`` (plain values become trainable
            ``Param``s).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> params = Params({('net', 'w'): jnp.ones(2)})
        >>> params[('net', 'w')]
        Param(float32[2], trainable=True)
        >>> [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_leaves_with_path(params)]
        ["['net/w']"]
    """

    # Flattening hands ``_values`` to JAX as is and unflattening stores the tuple it gets back: one
    # Python call per Params for each, none per parameter (about as fast as a dict of arrays,
    # which JAX flattens in C++). ``Param`` objects are made on access.
    __slots__ = ("_struct", "_values")

    _struct: _Structure
    _values: tuple[Any, ...]

    def __init__(self, entries: Mapping[Path, Any] | None = None) -> None:
        if entries is not None and not isinstance(entries, Mapping):
            raise TypeError(
                f"Params expects a mapping from tuple paths to values (or Param objects), got "
                f"{type(entries).__name__} ({entries!r:.60}). Example: "
                "Params({('net', 'w'): jnp.zeros(3)}); to build from pairs, Params(dict(pairs))."
            )
        struct, values = _EMPTY, []
        for path, entry in (entries or {}).items():
            path = _check_path(path)
            if isinstance(entry, Param):
                value, aux = entry._value, entry._aux
            else:
                value, aux = entry, _DEFAULT_AUX
            struct = struct.appended(path, aux)
            values.append(value)
        self._struct = struct
        self._values = tuple(values)

    @classmethod
    def _make(cls, struct: _Structure, values: tuple[Any, ...]) -> Params:
        new = _new(cls)
        new._struct = struct
        new._values = values
        return new

    # -- Mapping -------------------------------------------------------------------------------

    def __getitem__(self, path: Path) -> Param:
        i = self._struct.index.get(path)
        if i is None:
            raise MissingParamError(self._missing_message(_check_path(path)))
        return _param_unflatten(self._struct.auxes[i], (self._values[i],))

    def _missing_message(self, path: Path) -> str:
        shown = [format_path(p) for p in self._struct.paths]
        near = did_you_mean(format_path(path), shown)
        if not shown:
            return (
                f"Parameter {format_path(path)} not found: these Params are empty. Run the model "
                "once on unlocked Params to create its parameters (lazy init)."
            )
        nearby = [s for s in shown if s.startswith(format_path(path[:-1]) + "/")][:10]
        listing = ", ".join(nearby) if nearby else f"{len(shown)} paths, e.g. {shown[0]}"
        return f"Parameter {format_path(path)} not found.{near} Known nearby: {listing}."

    def get(self, path: Path, default: Any = None) -> Any:  # type: ignore[override]
        i = self._struct.index.get(path)
        if i is None:
            return default
        return _param_unflatten(self._struct.auxes[i], (self._values[i],))

    def __contains__(self, path: object) -> bool:
        return path in self._struct.index

    def __iter__(self) -> Iterator[Path]:
        return iter(self._struct.paths)

    def __len__(self) -> int:
        return len(self._values)

    def _params(self) -> Iterator[tuple[Path, Param]]:
        s = self._struct
        for path, aux, value in zip(s.paths, s.auxes, self._values):
            yield path, _param_unflatten(aux, (value,))

    def child_logical_axes(self) -> tuple[Param, ...]:
        """One ``Param`` per pytree child, in flatten order (``core_primitives.HasChildLogicalAxes``).

        This is how paramspec reads the ``logical_axes`` metadata of every parameter without
        importing blox: ``paramspec.shardings(params, mesh, rules)`` gives a ``Params`` of
        ``NamedSharding`` with the same structure.
        """
        return tuple(param for _, param in self._params())

    # Identity: two Params are "equal" only when they are the same object. Element-wise equality
    # of arrays has no single truth value, and treedef comparison uses the structure, not this.
    __eq__ = object.__eq__
    __hash__ = None  # type: ignore[assignment]

    # -- locking -------------------------------------------------------------------------------

    @property
    def is_locked(self) -> bool:
        """Whether creating new parameters is forbidden (set by ``locked()``)."""
        return self._struct.locked

    def locked(self) -> Params:
        """A copy in which modules may read and update parameters but not create new ones.

        Lock after initialisation, so a typo'd name or a changed input shape fails loudly instead
        of silently creating a fresh, untrained parameter.

        Example:
            >>> Params().locked().is_locked
            True
        """
        return Params._make(self._struct.with_locked(True), self._values)

    def unlocked(self) -> Params:
        """A copy in which modules may create parameters again.

        Example:
            >>> Params().locked().unlocked().is_locked
            False
        """
        return Params._make(self._struct.with_locked(False), self._values)

    # -- updates -------------------------------------------------------------------------------

    def _with(self, path: Path, entry: Param) -> Params:
        """A copy with ``path`` set to ``entry`` (added at the end when new)."""
        i = self._struct.index.get(path)
        if i is None:
            return Params._make(
                self._struct.appended(path, entry._aux), (*self._values, entry._value)
            )
        values = list(self._values)
        values[i] = entry._value
        return Params._make(self._struct.with_aux(i, entry._aux), tuple(values))

    def map(self, fn: Callable[[Param], Any]) -> Params:
        """``fn(param)`` in place of every value, keeping paths, flags, metadata and lock state.

        For anything computed per parameter from its flags or metadata: shardings from logical
        axes, optimizer masks from ``trainable``. The result has the same pytree structure as
        ``self``, so it can be passed as ``out_shardings`` or as an optax mask.

        Example:
            >>> import jax.numpy as jnp
            >>> params = Params({('w',): Param(jnp.ones(2)), ('n',): Param(0, trainable=False)})
            >>> mask = params.map(lambda p: p.trainable)
            >>> mask[('w',)].value, mask[('n',)].value
            (True, False)
        """
        if not callable(fn):
            raise TypeError(
                f"Params.map expects fn(param) -> value, got {fn!r:.60} ({type(fn).__name__}). "
                "Example: params.map(lambda p: p.trainable)."
            )
        return Params._make(self._struct, tuple(fn(p) for _, p in self._params()))

    def split(self, pred: Callable[[Path, Param], bool] | None = None) -> tuple[Params, Params]:
        """Partition into ``(selected, rest)``; both keep the lock state and creation order.

        Args:
            pred: ``pred(path, param) -> bool``; default ``param.trainable``.

        Returns:
            ``(params where pred is true, the others)``. ``selected.merge(rest)`` has the same
            pytree structure as the original, so a jitted function does not re-trace.

        Example:
            >>> import jax, jax.numpy as jnp
            >>> params = Params({('w',): Param(jnp.ones(2)), ('n',): Param(0, trainable=False)})
            >>> trainable, rest = params.split()
            >>> list(trainable), list(rest)
            ([('w',)], [('n',)])
            >>> jax.tree.structure(trainable.merge(rest)) == jax.tree.structure(params)
            True
        """
        if pred is None:
            pred = _is_trainable
        elif not callable(pred):
            raise TypeError(
                f"Params.split expects pred(path, param) -> bool or None (split by trainable), "
                f"got {pred!r:.60} ({type(pred).__name__})."
            )
        picked = [bool(pred(path, param)) for path, param in self._params()]
        return self._subset(picked, True), self._subset(picked, False)

    def _subset(self, picked: list[bool], keep: bool) -> Params:
        s = self._struct
        rows = [
            row for row, k in zip(zip(s.paths, s.auxes, s.ranks, self._values), picked) if k is keep
        ]
        return Params._make(
            _Structure(
                tuple(r[0] for r in rows),
                tuple(r[1] for r in rows),
                tuple(r[2] for r in rows),
                s.locked,
            ),
            tuple(r[3] for r in rows),
        )

    def merge(self, other: Params) -> Params:
        """Combine two ``Params``; where both hold a path, ``other`` wins.

        Entries are ordered by creation order, so ``a.merge(b)`` after ``a, b = p.split()``
        has exactly ``p``'s structure. The result is locked if either input is.

        Example:
            >>> a = Params({('x',): 1.0})
            >>> b = Params({('y',): 2.0})
            >>> sorted(a.merge(b))
            [('x',), ('y',)]
        """
        if not isinstance(other, Params):
            raise TypeError(
                f"Params.merge expects another Params, got {type(other).__name__}. "
                "Wrap a dict first: Params({('net', 'w'): value})."
            )
        a, b = self._struct, other._struct
        rows: dict[Path, tuple[int, _Aux, Any]] = {}
        for s, values in ((a, self._values), (b, other._values)):
            for p, aux, r, v in zip(s.paths, s.auxes, s.ranks, values):
                rows[p] = (r if p not in rows else rows[p][0], aux, v)
        ordered = sorted(rows.items(), key=lambda kv: (kv[1][0], kv[0]))
        struct = _Structure(
            tuple(p for p, _ in ordered),
            tuple(aux for _, (_, aux, _) in ordered),
            tuple(r for _, (r, _, _) in ordered),
            a.locked or b.locked,
        )
        if struct == a:  # keep the shared structure (and its cached index) when nothing moved
            struct = a
        return Params._make(struct, tuple(v for _, (_, _, v) in ordered))

    def __repr__(self) -> str:
        lock = ", locked" if self.is_locked else ""
        body = ", ".join(
            f"{format_path(p)}: {dtype_shape(v)}"
            for p, v in zip(self._struct.paths[:6], self._values)
        )
        more = f", ... ({len(self) - 6} more)" if len(self) > 6 else ""
        return f"Params({{{body}{more}}}{lock})"

    def _repr_html_(self) -> str:
        """The notebook view: the paths as a tree with shapes, sizes and trainable flags."""
        return params_html(self)

    def __treescope_repr__(self, path: str | None, subtree_renderer: Any) -> Any:
        return params_treescope(self, path, subtree_renderer)


_DEFAULT_AUX = _Aux.get(True, _NO_METADATA)


def _is_trainable(path: Path, param: Param) -> bool:
    return param.trainable


def _flatten(params: Params) -> tuple[tuple[Any, ...], _Structure]:
    return params._values, params._struct


def _flatten_with_keys(params: Params) -> tuple[list[tuple[Any, Any]], _Structure]:
    return list(zip(params._struct.keys, params._values)), params._struct


def _unflatten(struct: _Structure, values: Any) -> Params:
    new = _new(Params)
    new._struct = struct
    new._values = values if type(values) is tuple else tuple(values)
    return new


jax.tree_util.register_pytree_with_keys(Params, _flatten_with_keys, _unflatten, _flatten)
