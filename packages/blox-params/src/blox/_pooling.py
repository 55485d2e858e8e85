"""Pooling functions on channels-last inputs ``(batch, *spatial, channels)``; no params."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

Padding = str | Sequence[tuple[int, int]]


def _window(
    x: jax.Array, window_shape: Sequence[int], strides: Sequence[int] | None, padding: Padding
) -> tuple[tuple[int, ...], tuple[int, ...], Any]:
    window = tuple(window_shape)
    n = len(window)
    if x.ndim != n + 2:
        raise ValueError(
            f"pooling with a {n}-d window {window} expects inputs (batch, {n} spatial dims, "
            f"channels) = {n + 2} dimensions, got shape {x.shape}. For one example use x[None]."
        )
    strides = tuple(strides) if strides is not None else window
    dims, steps = (1, *window, 1), (1, *strides, 1)
    pad = padding if isinstance(padding, str) else ((0, 0), *padding, (0, 0))
    return dims, steps, pad


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
    dims, steps, pad = _window(x, window_shape, strides, padding)
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
    dims, steps, pad = _window(x, window_shape, strides, padding)
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
    dims, steps, pad = _window(x, window_shape, strides, padding)
    total = jax.lax.reduce_window(x, 0.0, jax.lax.add, dims, steps, pad)
    if count_include_pad:
        return total / float(jnp.prod(jnp.array(window_shape)))
    ones = jnp.ones(x.shape[1:-1], x.dtype)[None, ..., None]
    counts = jax.lax.reduce_window(ones, 0.0, jax.lax.add, dims, steps, pad)
    return total / counts
