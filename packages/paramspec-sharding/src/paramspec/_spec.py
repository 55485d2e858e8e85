"""``ParamSpec``: what to create (shape, dtype, initializer) and how to lay it out (axes)."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Initializer = Callable[[jax.Array, tuple[int, ...], Any], jax.Array]
LogicalAxes = tuple[str | None, ...]

# Created once, so that specs built from defaults compare equal and ``init`` reuses its compiled
# program instead of retracing (``jax.nn.initializers.*`` return a new closure on every call).
_LECUN_NORMAL = jax.nn.initializers.lecun_normal()
_ZEROS = jax.nn.initializers.zeros


def default_initializer(shape: tuple[int, ...]) -> Initializer:
    """The initializer used when a ``ParamSpec`` has none: LeCun normal for matrices, else zeros.

    This mirrors the usual dense-layer defaults (kernels fan-in scaled, biases zero).

    Example:
        >>> default_initializer((3, 4)) is default_initializer((8, 8))
        True
        >>> float(default_initializer((2,))(jax.random.key(0), (2,), jnp.float32).sum())
        0.0
    """
    return _LECUN_NORMAL if len(shape) >= 2 else _ZEROS


def _dtype(value: Any) -> np.dtype:
    # numpy reads None as float64, which JAX would then silently truncate: refuse it instead.
    try:
        if value is None:
            raise TypeError("None is not a dtype")
        dtype = jnp.dtype(value)
        # numpy also reads object, str and datetime dtypes, which no JAX array can hold.
        if dtype.kind in "OSUMm":
            raise TypeError(f"{dtype} is not a JAX array dtype")
        return dtype
    except TypeError as e:
        raise TypeError(
            f"ParamSpec dtype: got {value!r}, expected a dtype such as jnp.float32, jnp.bfloat16 "
            "or the string 'float32'."
        ) from e


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """The description of one parameter: shape, logical axis names, dtype and initializer.

    A ``ParamSpec`` is a pytree *leaf*: a tree of specs maps one-to-one onto the tree of arrays
    that :func:`paramspec.init` creates from it. It satisfies ``core_primitives.HasLogicalAxes``.

    Args:
        shape: the array shape, e.g. ``(768, 3072)``.
        logical_axes: one name (or ``None`` = never sharded) per dimension, e.g.
            ``("embed", "mlp")``; ``None`` for the whole spec replicates it.
            :class:`paramspec.Rules` map names to mesh axes.
        dtype: the parameter dtype (default ``float32``).
        initializer: ``init(key, shape, dtype) -> array`` as in ``jax.nn.initializers``; ``None``
            uses LeCun normal for rank >= 2 and zeros otherwise.

    Raises:
        TypeError: a shape entry is not an int, or an axis name is not a string or ``None``.
        ValueError: a negative dimension, or the number of logical axes differs from the rank.

    Example:
        >>> spec = ParamSpec((768, 3072), ("embed", "mlp"))
        >>> spec.shape, spec.logical_axes, spec.dtype
        ((768, 3072), ('embed', 'mlp'), dtype('float32'))
        >>> spec.size, spec.nbytes
        (2359296, 9437184)
    """

    shape: tuple[int, ...]
    logical_axes: LogicalAxes
    dtype: Any = jnp.float32
    initializer: Initializer | None = None

    def __post_init__(self) -> None:
        shape = _normalise_shape(self.shape)
        axes = _normalise_axes(self.logical_axes, shape)
        # Frozen dataclass: normalised values are written once, here.
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "logical_axes", axes)
        object.__setattr__(self, "dtype", _dtype(self.dtype))
        if self.initializer is None:
            object.__setattr__(self, "initializer", default_initializer(shape))
        elif not callable(self.initializer):
            raise TypeError(
                f"ParamSpec initializer: got {self.initializer!r} of type "
                f"{type(self.initializer).__name__}, expected a callable init(key, shape, dtype), "
                "e.g. jax.nn.initializers.normal(0.02)."
            )

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes the array will take once created."""
        return self.size * self.dtype.itemsize


def is_param_spec(x: Any) -> bool:
    """``is_leaf`` predicate for spec trees.

    Example:
        >>> is_param_spec(ParamSpec((2,), ("embed",))), is_param_spec(1.0)
        (True, False)
    """
    return isinstance(x, ParamSpec)


def _normalise_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, int | np.integer):
        shape = (shape,)
    try:
        # operator.index takes True as 1: a bool is a mistake here, not a size.
        dims = tuple(operator.index(d) for d in shape if not isinstance(d, bool | np.bool_))
        if len(dims) != len(shape):
            raise TypeError("a bool is not a dimension")
    except TypeError as err:
        raise TypeError(
            f"ParamSpec shape: got {shape!r}, expected a tuple of ints such as (768, 3072)."
        ) from err
    if any(d < 0 for d in dims):
        raise ValueError(f"ParamSpec shape: got {dims}, expected non-negative dimensions.")
    return dims


def _normalise_axes(axes: Any, shape: tuple[int, ...]) -> LogicalAxes:
    if axes is None:
        return (None,) * len(shape)
    if isinstance(axes, str):
        # ("embed") is a common typo for ("embed",); a string would otherwise split into letters.
        axes = (axes,)
    if not isinstance(axes, Sequence) or any(not (a is None or isinstance(a, str)) for a in axes):
        raise TypeError(
            f"ParamSpec logical_axes: got {axes!r}, expected a tuple of axis names (str or None), "
            "one per dimension, e.g. ('embed', 'mlp')."
        )
    axes = tuple(axes)
    if len(axes) != len(shape):
        raise ValueError(
            f"ParamSpec logical_axes: got {len(axes)} names {axes} for shape {shape} of rank "
            f"{len(shape)}, expected exactly one name (or None) per dimension."
        )
    return axes
