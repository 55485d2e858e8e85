"""``Params`` as HTML for notebooks: the paths as a collapsible tree, one row per parameter.

Jupyter calls ``Params._repr_html_`` for the last expression of a cell. Everything is one
self-contained string (inline ``<style>``, no JavaScript), so it renders the same in Jupyter,
VS Code, Colab and a saved ``.html`` file. Every name is escaped: a path may hold any
character, ``<script>`` included.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

import numpy as np

from ._params import Param, Params, _short

# Deeper levels start folded, so a large model opens on its top-level blocks.
_OPEN_DEPTH = 3

_STYLE = """
<style>
.blox-params { font-family: ui-sans-serif, system-ui, sans-serif; font-size: 13px;
  line-height: 1.45; color: inherit; }
.blox-params .bx-head { font-weight: 600; margin-bottom: 4px; }
.blox-params .bx-badge { display: inline-block; padding: 0 6px; border-radius: 8px;
  font-size: 11px; font-weight: 500; margin-left: 4px; }
.blox-params .bx-locked { background: rgba(120, 120, 120, 0.18); }
.blox-params .bx-trainable { background: rgba(46, 160, 67, 0.18); color: #1a7f37; }
.blox-params .bx-frozen { background: rgba(130, 80, 223, 0.15); color: #8250df; }
.blox-params details { margin-left: 14px; }
.blox-params > details { margin-left: 0; }
.blox-params summary { cursor: pointer; }
.blox-params .bx-node { font-weight: 600; font-family: ui-monospace, monospace; }
.blox-params .bx-sum { color: #6e7781; margin-left: 8px; font-weight: 400; }
.blox-params table { border-collapse: collapse; margin: 2px 0 4px 18px; }
.blox-params td { padding: 1px 10px 1px 0; vertical-align: top; text-align: left; }
.blox-params td.bx-name, .blox-params td.bx-kind { font-family: ui-monospace, monospace; }
.blox-params td.bx-num { text-align: right; color: #6e7781; }
.blox-params td.bx-meta { color: #6e7781; font-family: ui-monospace, monospace; }
</style>
"""


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


class _Node:
    """One path prefix: its direct parameters and its child prefixes, in creation order."""

    def __init__(self) -> None:
        self.leaves: list[tuple[str, Param]] = []
        self.children: dict[str, _Node] = {}

    def add(self, path: tuple[str, ...], param: Param) -> None:
        node = self
        for name in path[:-1]:
            node = node.children.setdefault(name, _Node())
        node.leaves.append((path[-1], param))

    def params(self) -> Iterable[Param]:
        yield from (p for _, p in self.leaves)
        for child in self.children.values():
            yield from child.params()


def _totals(params: Iterable[Param]) -> tuple[int, int, int]:
    arrays = values = nbytes = 0
    for param in params:
        count, size = count_and_bytes(param.value)
        arrays, values, nbytes = arrays + 1, values + count, nbytes + size
    return arrays, values, nbytes


def _sizes(arrays: int, values: int, nbytes: int) -> str:
    return f"{arrays} arrays · {values:,} values · {human_bytes(nbytes)}"


def _row(name: str, param: Param) -> str:
    count, nbytes = count_and_bytes(param.value)
    flag = (
        '<span class="bx-badge bx-trainable">trainable</span>'
        if param.trainable
        else '<span class="bx-badge bx-frozen">non-trainable</span>'
    )
    meta = ", ".join(f"{k}={v!r}" for k, v in param.metadata.items())
    cells = [
        f'<td class="bx-name">{html.escape(name)}</td>',
        f'<td class="bx-kind">{html.escape(_short(param.value))}</td>',
        f'<td class="bx-num">{count:,}</td>',
        f'<td class="bx-num">{human_bytes(nbytes)}</td>',
        f"<td>{flag}</td>",
        f'<td class="bx-meta">{html.escape(meta)}</td>',
    ]
    return f"<tr>{''.join(cells)}</tr>"


def _node_html(name: str, node: _Node, depth: int) -> str:
    is_open = " open" if depth < _OPEN_DEPTH else ""
    body = _body_html(node, depth + 1)
    summary = (
        f'<summary><span class="bx-node">{html.escape(name)}</span>'
        f'<span class="bx-sum">{_sizes(*_totals(node.params()))}</span></summary>'
    )
    return f"<details{is_open}>{summary}{body}</details>"


def _body_html(node: _Node, depth: int) -> str:
    parts = []
    if node.leaves:
        rows = "".join(_row(name, param) for name, param in node.leaves)
        parts.append(f"<table>{rows}</table>")
    parts.extend(_node_html(name, child, depth) for name, child in node.children.items())
    return "".join(parts)


def params_html(params: Params) -> str:
    """The HTML a notebook shows for ``params``: a header with totals, then the path tree.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> page = params_html(bx.Params({('net', 'l1', 'kernel'): jnp.zeros((3, 4))}))
        >>> 'f32[3,4]' in page and '<summary><span class="bx-node">l1</span>' in page
        True
    """
    root = _Node()
    for path, param in params.items():
        root.add(path, param)
    everything = _totals(root.params())
    trainable = _totals(p for p in root.params() if p.trainable)
    lock = '<span class="bx-badge bx-locked">locked</span>' if params.is_locked else ""
    head = (
        f'<div class="bx-head">Params{lock} <span class="bx-sum">{_sizes(*everything)} '
        f"(trainable: {_sizes(*trainable)})</span></div>"
    )
    return f'{_STYLE}<div class="blox-params">{head}{_body_html(root, 0)}</div>'
