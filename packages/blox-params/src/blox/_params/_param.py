"""``Param``: one piece of state, a value with its ``trainable`` flag and static metadata.

Its static half, ``Aux``, is interned: ``Params`` keeps one per entry in its structure, and
``view`` makes a ``Param`` from the two halves without ``__init__`` (every read from a
``Params`` makes one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from core_primitives import dtype_shape

from .._treescope import param_treescope
from ._metadata import NO_METADATA, Metadata


class Aux:
    """The static half of a ``Param``: ``(trainable, metadata)``, interned.

    One object per distinct pair, so the pytree aux data hashes and compares by identity in C.
    A Python ``__hash__`` here would run once per parameter on every jitted call (JAX hashes the
    treedef to find the compiled function), which showed up as a ~1.5x dispatch slowdown at
    2,000 parameters.
    """

    __slots__ = ("__weakref__", "metadata", "trainable")
    _interned: ClassVar[dict[tuple[bool, Metadata], Aux]] = {}

    trainable: bool
    metadata: Metadata

    @classmethod
    def get(cls, trainable: bool, metadata: Metadata) -> Aux:
        key = (trainable, metadata)
        aux = cls._interned.get(key)
        if aux is None:
            aux = object.__new__(cls)
            aux.trainable, aux.metadata = key
            cls._interned[key] = aux
        return aux

    def __reduce__(self) -> tuple[Any, ...]:
        # Copies and unpickled treedefs must land on the interned object, or identity breaks.
        return (Aux.get, (self.trainable, self.metadata))

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
    _aux: Aux

    def __init__(
        self, value: Any, trainable: bool = True, metadata: Mapping[str, Any] | None = None
    ) -> None:
        if type(metadata) is not Metadata:
            metadata = NO_METADATA if not metadata else Metadata(metadata)
        self._value = value
        self._aux = Aux.get(bool(trainable), metadata)

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


DEFAULT_AUX = Aux.get(True, NO_METADATA)
_new = object.__new__


def view(aux: Aux, value: Any) -> Param:
    """The ``Param`` of ``value`` with the static half ``aux``, made without ``__init__``."""
    param = _new(Param)
    param._value = value
    param._aux = aux
    return param
