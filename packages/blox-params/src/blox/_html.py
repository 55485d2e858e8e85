"""``Params`` as HTML for notebooks: the paths as a collapsible tree, one row per parameter.

Jupyter calls ``Params._repr_html_`` for the last expression of a cell; the page is
``core_primitives.html_tree`` (one self-contained string, every name escaped: a path may hold any
character, ``<script>`` included). This module sits below ``_params``: it reads a ``Params``
only through ``items()`` and ``is_locked`` and never imports it.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

import numpy as np

from core_primitives import dtype_shape, html_tree

# Deeper levels start folded, so a large model opens on its top-level blocks.
_OPEN_DEPTH = 3


def count_and_bytes(value: Any) -> tuple[int, int]:
    """``(number of values, bytes)`` of an array, a tracer or a ``ShapeDtypeStruct``."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return 1, 0
    count = int(np.prod(shape, dtype=np.int64))
    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError:  # typed PRNG keys and other extended dtypes
        itemsize = 0
    return count, count * itemsize


def human_bytes(n: float) -> str:
    """``512 B``, ``4.1 KB``, ``1.2 GB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{int(n)} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _totals(params: Iterable[Any]) -> tuple[int, int, int]:
    arrays = values = nbytes = 0
    for param in params:
        count, size = count_and_bytes(param.value)
        arrays, values, nbytes = arrays + 1, values + count, nbytes + size
    return arrays, values, nbytes


def _sizes(arrays: int, values: int, nbytes: int) -> str:
    return f"{arrays} arrays · {values:,} values · {human_bytes(nbytes)}"


def _cells(param: Any) -> list[tuple[str, str]]:
    count, nbytes = count_and_bytes(param.value)
    flag = (
        '<span class="cp-badge cp-green">trainable</span>'
        if param.trainable
        else '<span class="cp-badge cp-purple">non-trainable</span>'
    )
    meta = ", ".join(f"{k}={v!r}" for k, v in param.metadata.items())
    return [
        ("kind", html.escape(dtype_shape(param.value))),
        ("num", f"{count:,}"),
        ("num", human_bytes(nbytes)),
        ("", flag),
        ("meta", html.escape(meta)),
    ]


def params_html(params: Any) -> str:
    """The HTML a notebook shows for a blox ``Params``: a header with totals, then the path tree.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> page = params_html(bx.Params({('net', 'l1', 'kernel'): jnp.zeros((3, 4))}))
        >>> 'float32[3,4]' in page and '<summary><span class="cp-node">l1</span>' in page
        True
    """
    entries = list(params.items())
    # Each group's subtotal: every parameter whose path starts with the group's path.
    groups: dict[tuple[str, ...], list[Any]] = {}
    for path, param in entries:
        for depth in range(1, len(path)):
            groups.setdefault(path[:depth], []).append(param)
    everything = _totals(p for _, p in entries)
    trainable = _totals(p for _, p in entries if p.trainable)
    lock = '<span class="cp-badge cp-grey">locked</span>' if params.is_locked else ""
    head = (
        f'Params{lock} <span class="cp-sum">{_sizes(*everything)} '
        f"(trainable: {_sizes(*trainable)})</span>"
    )
    return html_tree(
        [(path, _cells(param)) for path, param in entries],
        head=head,
        group_note=lambda path: _sizes(*_totals(groups[path])),
        open_depth=_OPEN_DEPTH,
    )
