"""``Metadata``: the immutable, hashable static annotations of a ``Param``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


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


NO_METADATA = Metadata()
