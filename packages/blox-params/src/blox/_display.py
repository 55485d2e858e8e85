"""``display``: treescope in notebooks, a text tree with counts and bytes elsewhere."""

from __future__ import annotations

import sys
from typing import Any, TextIO

import numpy as np

from core_primitives import format_path

from ._params import Params, _short


def _size_bytes(value: Any) -> tuple[int, int]:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return 1, 0
    count = int(np.prod(shape, dtype=np.int64))
    try:
        itemsize = np.dtype(dtype).itemsize
    except TypeError:  # typed PRNG keys and other extended dtypes
        itemsize = 0
    return count, count * itemsize


def _human(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    ip = get() if get is not None else None
    return ip is not None and "IPKernelApp" in getattr(ip, "config", {})


def summary(params: Params) -> str:
    """The text tree ``display`` prints outside notebooks.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> params = bx.Params({('net', 'l1', 'kernel'): jnp.zeros((3, 4)),
        ...                     ('net', 'l1', 'bias'): jnp.zeros(4)})
        >>> print(summary(params))
        Params: 2 arrays, 16 values, 64 B (trainable: 2 arrays, 16 values, 64 B)
        net/l1  (2 arrays, 16 values, 64 B)
          kernel  f32[3,4]  12  48 B
          bias    f32[4]     4  16 B
    """
    rows: dict[tuple[str, ...], list[tuple[str, str, int, int, bool]]] = {}
    totals = [0, 0, 0, 0, 0, 0]  # arrays, values, bytes; then the trainable ones
    for path, entry in params.items():
        value, trainable = entry.value, entry.trainable
        count, nbytes = _size_bytes(value)
        rows.setdefault(path[:-1], []).append((path[-1], _short(value), count, nbytes, trainable))
        for i, v in enumerate((1, count, nbytes) * (2 if trainable else 1)):
            totals[i] += v
    lock = " (locked)" if params.is_locked else ""
    lines = [
        f"Params{lock}: {totals[0]} arrays, {totals[1]} values, {_human(totals[2])} "
        f"(trainable: {totals[3]} arrays, {totals[4]} values, {_human(totals[5])})"
    ]
    for prefix, entries in rows.items():
        count = sum(e[2] for e in entries)
        nbytes = sum(e[3] for e in entries)
        lines.append(
            f"{format_path(prefix) or '.'}  ({len(entries)} arrays, {count} values, "
            f"{_human(nbytes)})"
        )
        w_name = max(len(e[0]) for e in entries)
        w_kind = max(len(e[1]) for e in entries)
        w_count = max(len(str(e[2])) for e in entries)
        for name, kind, n, b, trainable in entries:
            flag = "" if trainable else "  non-trainable"
            lines.append(f"  {name:<{w_name}}  {kind:<{w_kind}}  {n:>{w_count}}  {_human(b)}{flag}")
    return "\n".join(lines)


def display(params: Params, *, file: TextIO | None = None) -> None:
    """Show ``params``: with treescope in a notebook, else a text tree with counts and bytes.

    Works on abstract params too (``jax.eval_shape`` results), so a model's size can be read
    without allocating it.

    Args:
        params: the ``Params`` to show.
        file: where the text goes (default ``sys.stdout``); a file forces the text tree.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> bx.display(bx.Params({('net', 'w'): jnp.zeros(2)}))
        Params: 1 arrays, 2 values, 8 B (trainable: 1 arrays, 2 values, 8 B)
        net  (1 arrays, 2 values, 8 B)
          w  f32[2]  2  8 B
    """
    if not isinstance(params, Params):
        raise TypeError(
            f"display shows blox Params, got {type(params).__name__}. For other pytrees use "
            "jax.tree_util.tree_map or treescope directly."
        )
    if file is None and _in_notebook():
        try:
            import treescope
        except ImportError:
            pass
        else:
            treescope.display(params)
            return
    print(summary(params), file=file if file is not None else sys.stdout)
