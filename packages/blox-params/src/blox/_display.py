"""``display``: treescope (or HTML) in notebooks, a text tree with counts and bytes elsewhere."""

from __future__ import annotations

import sys
from typing import TextIO

from core_primitives import dtype_shape, format_path

from ._html import count_and_bytes, human_bytes
from ._params import Params


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
          kernel  float32[3,4]  12  48 B
          bias    float32[4]     4  16 B
    """
    rows: dict[tuple[str, ...], list[tuple[str, str, int, int, bool]]] = {}
    totals = [0, 0, 0, 0, 0, 0]  # arrays, values, bytes; then the trainable ones
    for path, entry in params.items():
        value, trainable = entry.value, entry.trainable
        count, nbytes = count_and_bytes(value)
        rows.setdefault(path[:-1], []).append(
            (path[-1], dtype_shape(value), count, nbytes, trainable)
        )
        for i, v in enumerate((1, count, nbytes) * (2 if trainable else 1)):
            totals[i] += v
    lock = " (locked)" if params.is_locked else ""
    lines = [
        f"Params{lock}: {totals[0]} arrays, {totals[1]} values, {human_bytes(totals[2])} "
        f"(trainable: {totals[3]} arrays, {totals[4]} values, {human_bytes(totals[5])})"
    ]
    for prefix, entries in rows.items():
        count = sum(e[2] for e in entries)
        nbytes = sum(e[3] for e in entries)
        lines.append(
            f"{format_path(prefix) or '.'}  ({len(entries)} arrays, {count} values, "
            f"{human_bytes(nbytes)})"
        )
        w_name = max(len(e[0]) for e in entries)
        w_kind = max(len(e[1]) for e in entries)
        w_count = max(len(str(e[2])) for e in entries)
        for name, kind, n, b, trainable in entries:
            flag = "" if trainable else "  non-trainable"
            lines.append(
                f"  {name:<{w_name}}  {kind:<{w_kind}}  {n:>{w_count}}  {human_bytes(b)}{flag}"
            )
    return "\n".join(lines)


def display(params: Params, *, file: TextIO | None = None) -> None:
    """Show ``params``: treescope (or HTML) in a notebook, else a text tree with counts and bytes.

    In a notebook, ``treescope`` shows it when installed (``pip install
    'blox-params[treescope]'``), otherwise the HTML tree of ``Params._repr_html_``.

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
          w  float32[2]  2  8 B
    """
    if not isinstance(params, Params):
        raise TypeError(
            f"display shows blox Params, got {type(params).__name__}. For other pytrees use "
            "jax.tree_util.tree_map or treescope directly."
        )
    if file is None and _in_notebook():
        try:
            import treescope
        except ImportError:  # the blox-params[treescope] extra is not installed
            from IPython.display import display as show

            show(params)  # renders Params._repr_html_
        else:
            treescope.display(params)
        return
    print(summary(params), file=file if file is not None else sys.stdout)
