"""Pooling functions on channels-last inputs ``(batch, *spatial, channels)``; no params."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import check_padding, positive_ints

Padding = str | int | Sequence[tuple[int, int]]


def _sizes(value: Any, what: str, fn: str, n: int | None) -> tuple[int, ...]:
    """``value`` as a tuple of positive ints, ``n`` of them when given.

    A bare int is refused: a pooling window has no layer to say how many spatial dimensions it
    spans, and an int window would otherwise fail as "'int' object is not iterable".
    """
    try:
        sizes = positive_ints(value, what, fn)
    except ValueError:  # its message offers a bare int, which is refused here
        sizes = 0
    if isinstance(sizes, int) or (n is not None and len(sizes) != n):
        count = f"{n} " if n is not None else ""
        raise ValueError(
            f"{fn}: {what} must be a tuple of {count}positive ints, one per spatial dimension, "
            f"got {value!r}. For a square 2-d window write (k, k), not k."
        )
    return sizes


def _pads(padding: Any, n: int, fn: str) -> Any:
    """``padding`` for ``reduce_window``: a mode name, or one pair per input dimension."""
    pad = check_padding(padding, fn)
    if isinstance(pad, str):
        return pad
    pairs = ((pad, pad),) * n if isinstance(pad, int) else pad
    if len(pairs) != n or any(lo < 0 or hi < 0 for lo, hi in pairs):
        raise ValueError(
            f"{fn}: padding must be a mode name, an int or {n} (low, high) pairs of ints >= 0, "
            f"one per spatial dimension, got {padding!r}."
        )
    return ((0, 0), *pairs, (0, 0))


def _window(
    fn: str,
    x: jax.Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None,
    padding: Padding,
) -> tuple[tuple[int, ...], tuple[int, ...], Any]:
    window = _sizes(window_shape, "window_shape", fn, None)
    n = len(window)
    if x.ndim != n + 2:
        raise ValueError(
            f"{fn}: a {n}-d window {window} expects inputs (batch, {n} spatial dims, "
            f"channels) = {n + 2} dimensions, got shape {x.shape}. For one example use x[None]."
        )
    steps = window if strides is None else _sizes(strides, "strides", fn, n)
    return (1, *window, 1), (1, *steps, 1), _pads(padding, n, fn)


def max_pool(
    x: jax.Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """Maximum over windows (strides default to the window, i.e. non-overlapping).

    Example:
        >>> import jax.numpy as jnp
        >>> max_pool(jnp.arange(8.0).reshape(1, 4, 2), (2,))[0, :, 0].tolist()
        [2.0, 6.0]
    """
    x = jnp.asarray(x)
    dims, steps, pad = _window("max_pool", x, window_shape, strides, padding)
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, dims, steps, pad)


def min_pool(
    x: jax.Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """Minimum over windows.

    Example:
        >>> import jax.numpy as jnp
        >>> min_pool(jnp.arange(8.0).reshape(1, 4, 2), (2,))[0, :, 0].tolist()
        [0.0, 4.0]
    """
    x = jnp.asarray(x)
    dims, steps, pad = _window("min_pool", x, window_shape, strides, padding)
    return jax.lax.reduce_window(x, jnp.inf, jax.lax.min, dims, steps, pad)


def avg_pool(
    x: jax.Array,
    window_shape: Sequence[int],
    strides: Sequence[int] | None = None,
    padding: Padding = "VALID",
    count_include_pad: bool = True,
) -> jax.Array:
    """Mean over windows; with ``count_include_pad=False`` padded cells are not counted.

    Example:
        >>> import jax.numpy as jnp
        >>> avg_pool(jnp.arange(8.0).reshape(1, 4, 2), (2,))[0, :, 0].tolist()
        [1.0, 5.0]
    """
    x = jnp.asarray(x)
    dims, steps, pad = _window("avg_pool", x, window_shape, strides, padding)
    total = jax.lax.reduce_window(x, 0.0, jax.lax.add, dims, steps, pad)
    if count_include_pad:
        return total / float(np.prod(dims))
    ones = jnp.ones(x.shape[1:-1], x.dtype)[None, ..., None]
    counts = jax.lax.reduce_window(ones, 0.0, jax.lax.add, dims, steps, pad)
    return total / counts
