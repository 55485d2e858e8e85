"""Protocols through which sibling packages meet without importing each other."""

from __future__ import annotations

from collections.abc import Sequence
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


@runtime_checkable
class HasChildLogicalAxes(Protocol):
    """A pytree node that knows the logical axes of each of its children.

    For containers that keep per-parameter annotations in their static pytree data instead of in
    a node per parameter (blox ``Params``: its children are the arrays themselves, so a jitted
    call flattens it in one Python call). ``child_logical_axes()`` returns one
    :class:`HasLogicalAxes` per pytree child, in flatten order; each child must be a single leaf
    (an array or a ``jax.ShapeDtypeStruct``).
    """

    def child_logical_axes(self) -> Sequence[HasLogicalAxes]: ...


def has_child_logical_axes(x: Any) -> bool:
    """Whether ``x`` is a container that reports its children's logical axes.

    Example:
        >>> has_child_logical_axes({'w': 1.0})
        False
    """
    return isinstance(x, HasChildLogicalAxes)
