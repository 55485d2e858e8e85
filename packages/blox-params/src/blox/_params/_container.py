"""``Params``: the flat, immutable container of all model state, keyed by tuple paths."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from core_primitives import did_you_mean, dtype_shape, format_path

from .._errors import MissingParamError
from .._html import params_html
from .._treescope import params_treescope
from ._param import DEFAULT_AUX, Aux, Param, view
from ._structure import EMPTY, Path, Structure, check_path

_new = object.__new__


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

    _struct: Structure
    _values: tuple[Any, ...]

    def __init__(self, entries: Mapping[Path, Any] | None = None) -> None:
        if entries is not None and not isinstance(entries, Mapping):
            raise TypeError(
                f"Params expects a mapping from tuple paths to values (or Param objects), got "
                f"{type(entries).__name__} ({entries!r:.60}). Example: "
                "Params({('net', 'w'): jnp.zeros(3)}); to build from pairs, Params(dict(pairs))."
            )
        struct, values = EMPTY, []
        for path, entry in (entries or {}).items():
            path = check_path(path)
            if isinstance(entry, Param):
                value, aux = entry._value, entry._aux
            else:
                value, aux = entry, DEFAULT_AUX
            struct = struct.appended(path, aux)
            values.append(value)
        self._struct = struct
        self._values = tuple(values)

    @classmethod
    def _make(cls, struct: Structure, values: tuple[Any, ...]) -> Params:
        new = _new(cls)
        new._struct = struct
        new._values = values
        return new

    # -- Mapping -------------------------------------------------------------------------------

    def __getitem__(self, path: Path) -> Param:
        i = self._struct.index.get(path)
        if i is None:
            raise MissingParamError(self._missing_message(check_path(path)))
        return view(self._struct.auxes[i], self._values[i])

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
        return view(self._struct.auxes[i], self._values[i])

    def __contains__(self, path: object) -> bool:
        return path in self._struct.index

    def __iter__(self) -> Iterator[Path]:
        return iter(self._struct.paths)

    def __len__(self) -> int:
        return len(self._values)

    def _params(self) -> Iterator[tuple[Path, Param]]:
        s = self._struct
        for path, aux, value in zip(s.paths, s.auxes, self._values):
            yield path, view(aux, value)

    def child_logical_axes(self) -> tuple[Param, ...]:
        """One ``Param`` per pytree child, in flatten order
        (``core_primitives.HasChildLogicalAxes``).

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
            Structure(
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
        rows: dict[Path, tuple[int, Aux, Any]] = {}
        for s, values in ((a, self._values), (b, other._values)):
            for p, aux, r, v in zip(s.paths, s.auxes, s.ranks, values):
                rows[p] = (r if p not in rows else rows[p][0], aux, v)
        ordered = sorted(rows.items(), key=lambda kv: (kv[1][0], kv[0]))
        struct = Structure(
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


def _is_trainable(path: Path, param: Param) -> bool:
    return param.trainable
