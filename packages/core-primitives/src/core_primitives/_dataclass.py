"""Frozen dataclasses registered as keyed pytrees."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

import jax

T = TypeVar("T", bound=type)

_STATIC = "core_primitives.static"


def field(*, static: bool = False, **kwargs: Any) -> Any:
    """A dataclass field; ``static=True`` makes it pytree aux data instead of a child.

    Static fields must be hashable: JAX compares treedefs (and so jit cache keys) by them.

    Example:
        >>> import jax
        >>> from core_primitives import pytree_dataclass, field
        >>> @pytree_dataclass
        ... class Scaled:
        ...     x: jax.Array
        ...     name: str = field(static=True, default="s")
        >>> jax.tree.leaves(Scaled(x=1.0))
        [1.0]
    """
    metadata = dict(kwargs.pop("metadata", None) or {})
    metadata[_STATIC] = static
    return dataclasses.field(metadata=metadata, **kwargs)


@overload
def pytree_dataclass(cls: T, /) -> T: ...
@overload
def pytree_dataclass(*, frozen: bool = True) -> Callable[[T], T]: ...


@dataclass_transform(field_specifiers=(field, dataclasses.field))
def pytree_dataclass(cls: Any = None, /, *, frozen: bool = True) -> Any:
    """Make ``cls`` a dataclass and register it as a pytree with attribute keys.

    Children are the fields not marked ``field(static=True)``; key paths read
    ``.name``, so ``jax.tree_util.keystr`` and error messages show field names, not indices.
    Frozen by default: update with ``dataclasses.replace``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from core_primitives import pytree_dataclass, field
        >>> @pytree_dataclass
        ... class Layer:
        ...     w: jax.Array
        ...     act: str = field(static=True, default="relu")
        >>> layer = jax.tree.map(lambda a: a * 2, Layer(w=jnp.ones(2)))
        >>> layer.w.tolist(), layer.act
        ([2.0, 2.0], 'relu')
        >>> [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(layer)]
        ['.w']
    """

    def wrap(c: type) -> type:
        if not isinstance(c, type):
            raise TypeError(
                f"pytree_dataclass decorates a class, got {c!r:.60} ({type(c).__name__}). "
                "Use it as @pytree_dataclass or @pytree_dataclass(frozen=False) above `class`."
            )
        c = dataclasses.dataclass(frozen=frozen)(c)
        fields = [f for f in dataclasses.fields(c) if f.init]
        data = [f.name for f in fields if not f.metadata.get(_STATIC, False)]
        meta = [f.name for f in fields if f.metadata.get(_STATIC, False)]
        return jax.tree_util.register_dataclass(c, data_fields=data, meta_fields=meta)

    return wrap if cls is None else wrap(cls)
