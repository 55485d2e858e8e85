"""Protocols through which sibling packages meet without importing each other."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

LogicalAxes = tuple[str | None, ...]


@runtime_checkable
class HasLogicalAxes(Protocol):
    """A pytree leaf (or node) that knows its shape, dtype and logical axis names.

    ``paramspec.ParamSpec`` and ``blox.Param`` both satisfy it, which is how paramspec shards blox
    params without importing blox. ``logical_axes`` is ``None`` for "replicate", otherwise one name
    (or ``None``) per dimension.
    """

    @property
    def logical_axes(self) -> LogicalAxes | None: ...

    @property
    def shape(self) -> tuple[int, ...]: ...

    @property
    def dtype(self) -> Any: ...


def has_logical_axes(x: Any) -> bool:
    """``is_leaf`` predicate for tree maps that should stop at logical-axis carriers.

    Example:
        >>> has_logical_axes(1.0)
        False
    """
    return isinstance(x, HasLogicalAxes)
