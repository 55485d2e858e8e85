"""``Structure``: the static half of ``Params`` (ordered paths, each entry's flags, the lock)."""

from __future__ import annotations

import itertools
from typing import Any

import jax

from core_primitives import format_path

from ._param import Aux

Path = tuple[str, ...]


class Structure:
    """The static part of ``Params``: ordered paths, each entry's flags, and the lock flag.

    It is the pytree aux data of ``Params``, so JAX hashes and compares it on every jitted call:
    ``__hash__`` is computed once and ``__eq__`` starts with an identity check (the per-entry
    ``Aux`` objects are interned, so comparing them is pointer comparison in C). ``ranks`` give
    each path its place in the creation order, so that ``merge`` after ``split`` restores the
    original order and the treedef (no re-trace); they do not take part in equality.
    """

    __slots__ = ("_hash", "_index", "_keys", "auxes", "locked", "paths", "ranks")

    def __init__(
        self,
        paths: tuple[Path, ...],
        auxes: tuple[Aux, ...],
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

    def _derived(self, auxes: tuple[Aux, ...], locked: bool) -> Structure:
        # Same paths: the index and key paths carry over.
        new = Structure(self.paths, auxes, self.ranks, locked)
        new._index, new._keys = self._index, self._keys
        return new

    def with_locked(self, locked: bool) -> Structure:
        return self if locked == self.locked else self._derived(self.auxes, locked)

    def with_aux(self, i: int, aux: Aux) -> Structure:
        if self.auxes[i] is aux:
            return self
        return self._derived((*self.auxes[:i], aux, *self.auxes[i + 1 :]), self.locked)

    def appended(self, path: Path, aux: Aux) -> Structure:
        # A process-wide counter: params created later sort later, even across two Params that
        # were built separately and merged afterwards (no interleaving by per-container index).
        new = Structure(
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
            type(other) is Structure
            and self._hash == other._hash
            and self.locked == other.locked
            and self.paths == other.paths
            and self.auxes == other.auxes
        )

    def __repr__(self) -> str:
        return f"<{len(self.paths)} paths, locked={self.locked}>"


EMPTY = Structure((), (), (), False)
_RANKS = itertools.count()


def check_path(path: Any) -> Path:
    """``path`` when it is a tuple of strings; else a ``TypeError`` showing how to write one."""
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
