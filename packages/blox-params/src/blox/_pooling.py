"""Pooling functions on channels-last inputs ``(*batch, *spatial, channels)``; no params."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._checks import check_padding, positive_ints

Padding = str | int | Sequence[tuple[int, int]]
Sizes = int | Sequence[int]


def _sizes(value: Any, what: str, fn: str, n: int | None) -> int | tuple[int, ...]:
    """``value`` as a positive int or a tuple of positive ints (``n`` of them when given)."""
    sizes = positive_ints(value, what, fn)
    if isinstance(sizes, tuple) and n is not None and len(sizes) != n:
        raise ValueError(
            f"{fn}: {what} {tuple(sizes)} has {len(sizes)} entries, but the window spans {n} "
            f"spatial dimensions. Give one positive int per spatial dimension, or a single int "
            "for the same size on every one."
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


def _spatial_rank(fn: str, x: jax.Array, window: int | tuple[int, ...]) -> int:
    """How many axes before the channels are spatial; the ones before them are batch axes.

    A tuple window says it (any number of leading batch axes, none included). An int window
    means that size on every spatial axis and cannot say how many there are, so, as for
    ``Conv`` with an int ``kernel_size``, the inputs are read as ``(batch, *spatial,
    channels)`` with exactly one batch axis.
    """
    if isinstance(window, int):
        if x.ndim < 3:
            raise ValueError(
                f"{fn}: an int window_shape={window} means that size on every spatial axis of "
                f"inputs (batch, *spatial, channels), which need at least 3 dimensions; got "
                f"shape {x.shape}. For unbatched inputs (or several batch axes) give one size "
                f"per spatial axis, e.g. window_shape=({window},) for 1-d pooling."
            )
        return x.ndim - 2
    if x.ndim < len(window) + 1:
        n = len(window)
        raise ValueError(
            f"{fn}: a {n}-d window {window} expects inputs (*batch, {n} spatial dims, channels), "
            f"at least {n + 1} dimensions, got shape {x.shape}."
        )
    return len(window)


class _Windows(NamedTuple):
    """A pooling call resolved: batch axes folded into one, window, steps and padding."""

    flat: jax.Array  # (prod(batch), *spatial, channels)
    batch: tuple[int, ...]
    dims: tuple[int, ...]
    steps: tuple[int, ...]
    pads: Any

    def reduce(self, x: jax.Array, init: Any, op: Any) -> jax.Array:
        return jax.lax.reduce_window(x, init, op, self.dims, self.steps, self.pads)

    def unfold(self, y: jax.Array) -> jax.Array:
        """``y`` with the original batch axes back in front."""
        return y.reshape(*self.batch, *y.shape[1:])


def _windows(
    fn: str, x: Any, window_shape: Sizes, strides: Sizes | None, padding: Padding
) -> _Windows:
    # Leading batch axes are folded into one, so a window never spans a batch axis.
    x = jnp.asarray(x)
    window = _sizes(window_shape, "window_shape", fn, None)
    n = _spatial_rank(fn, x, window)
    window = (window,) * n if isinstance(window, int) else window
    steps = window if strides is None else _sizes(strides, "strides", fn, n)
    steps = (steps,) * n if isinstance(steps, int) else steps
    batch = x.shape[: x.ndim - n - 1]
    flat = x.reshape(-1, *x.shape[x.ndim - n - 1 :])
    pads = _pads(padding, n, fn)
    _check_fits(fn, x.shape, flat.shape[1:-1], window, pads, padding)
    return _Windows(flat, batch, (1, *window, 1), (1, *steps, 1), pads)


def _check_fits(
    fn: str,
    shape: tuple[int, ...],
    spatial: tuple[int, ...],
    window: tuple[int, ...],
    pads: Any,
    padding: Any,
) -> None:
    """A window larger than the (padded) input gives an empty output: say so instead."""
    if isinstance(pads, str):
        if pads.upper() != "VALID":
            return  # the SAME modes pad to at least one window per axis
        pairs: Any = ((0, 0),) * len(spatial)
    else:
        pairs = pads[1:-1]
    padded = tuple(size + lo + hi for size, (lo, hi) in zip(spatial, pairs))
    if all(p >= w for p, w in zip(padded, window)):
        return
    size = f"{spatial}" + (f" ({padded} padded)" if padded != spatial else "")
    raise ValueError(
        f"{fn}: the window {window} is larger than the spatial shape {size} of inputs of shape "
        f"{shape} (padding={padding!r}), so no window fits and the output would be empty. Use a "
        "smaller window_shape, pad the inputs (padding='SAME'), or check which axes are spatial: "
        "inputs are (*batch, *spatial, channels)."
    )


def max_pool(
    x: jax.Array,
    window_shape: Sizes,
    strides: Sizes | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """Maximum over windows of channels-last inputs ``(*batch, *spatial, channels)``.

    Args:
        x: the inputs; any number of leading batch axes (none included) with a tuple window.
        window_shape: one size per spatial axis, or an int for the same size on each (then
            ``x`` is ``(batch, *spatial, channels)``: exactly one batch axis).
        strides: an int or one per spatial axis; default the window (non-overlapping).
        padding: ``'VALID'`` (default), ``'SAME'``, ``'SAME_LOWER'``, an int for every side,
            or one ``(low, high)`` pair per spatial axis.

    Example:
        >>> import jax.numpy as jnp
        >>> max_pool(jnp.arange(8.0).reshape(4, 2), (2,))[:, 0].tolist()
        [2.0, 6.0]
    """
    w = _windows("max_pool", x, window_shape, strides, padding)
    return w.unfold(w.reduce(w.flat, -jnp.inf, jax.lax.max))


def min_pool(
    x: jax.Array,
    window_shape: Sizes,
    strides: Sizes | None = None,
    padding: Padding = "VALID",
) -> jax.Array:
    """Minimum over windows; arguments as in :func:`max_pool`.

    Example:
        >>> import jax.numpy as jnp
        >>> min_pool(jnp.arange(8.0).reshape(1, 4, 2), 2)[0, :, 0].tolist()
        [0.0, 4.0]
    """
    w = _windows("min_pool", x, window_shape, strides, padding)
    return w.unfold(w.reduce(w.flat, jnp.inf, jax.lax.min))


def avg_pool(
    x: jax.Array,
    window_shape: Sizes,
    strides: Sizes | None = None,
    padding: Padding = "VALID",
    count_include_pad: bool = False,
) -> jax.Array:
    """Mean over windows; arguments as in :func:`max_pool`.

    A window that overlaps the padding averages only the input cells it covers (the default,
    as in jax-blox, Haiku and Keras); ``count_include_pad=True`` divides by the full window
    size instead, counting padded cells as zeros (the default of Flax and PyTorch). With
    ``'VALID'`` padding the two agree.

    Example:
        >>> import jax.numpy as jnp
        >>> x = jnp.ones((1, 3, 1))
        >>> avg_pool(x, 2, strides=1, padding='SAME')[0, :, 0].tolist()
        [1.0, 1.0, 1.0]
        >>> avg_pool(x, 2, strides=1, padding='SAME', count_include_pad=True)[0, :, 0].tolist()
        [1.0, 1.0, 0.5]
    """
    w = _windows("avg_pool", x, window_shape, strides, padding)
    total = w.reduce(w.flat, 0.0, jax.lax.add)
    if count_include_pad:
        return w.unfold(total / float(np.prod(w.dims)))
    # The number of input cells under each window: one map shared by every batch row.
    cells = jnp.ones((1, *w.flat.shape[1:-1], 1), total.dtype)
    return w.unfold(total / w.reduce(cells, 0.0, jax.lax.add))
