"""How the stack shows arrays and trees to people: the ``dtype[shape]`` shorthand and the
notebook tree table.

lox (``logdict`` reprs, error messages, console lines, the notebook view) and blox (``Param``
reprs, ``summary``, the notebook view) both print arrays as ``float32[3,4]`` and both show a
notebook table of names split into a collapsible tree; the two live here once, so the packages
look alike and cannot drift apart.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

Cell = tuple[str, str]  # (style, html): see `html_tree`
Row = tuple[Sequence[str], Sequence[Cell]]  # (path, cells)


def dtype_shape(value: Any, *, drop_leading: int = 0) -> str:
    """The ``dtype[shape]`` shorthand of an array-like: ``float32[3,4]``; ``repr`` of anything else.

    Works on arrays, tracers and ``jax.ShapeDtypeStruct``s alike (only ``.shape`` and ``.dtype``
    are read, never values), and on typed PRNG keys (``key<fry>[2]``). The dtype is NumPy's
    name (``float32``, ``bfloat16``, ``int8``), as in JAX's own messages about traced values.

    Args:
        value: anything; arrays and array-likes have a ``.shape`` and a ``.dtype``.
        drop_leading: how many leading axes to leave out (lox shows one event of a series of
            events by dropping the event axis).

    Returns:
        ``'float32[3,4]'`` (``'int32[]'`` for a scalar), or ``repr(value)`` for a non-array.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> dtype_shape(jnp.zeros((3, 4)))
        'float32[3,4]'
        >>> dtype_shape(jax.ShapeDtypeStruct((8, 2), jnp.bfloat16), drop_leading=1)
        'bfloat16[2]'
        >>> dtype_shape(jax.random.key(0)), dtype_shape('text')
        ('key<fry>[]', "'text'")
    """
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return repr(value)
    return f"{_dtype_name(dtype)}[{','.join(str(d) for d in tuple(shape)[drop_leading:])}]"


def _dtype_name(dtype: Any) -> str:
    try:
        return np.dtype(dtype).name
    except TypeError:  # typed PRNG keys and other extended dtypes NumPy does not know
        return str(dtype)


# One stylesheet for every tree table. Rules are scoped to `.cp-tree` and class names carry the
# `cp-` prefix, so nothing leaks into (or is restyled by) the rest of a notebook page.
_STYLE = """
<style>
.cp-tree { font-family: ui-sans-serif, system-ui, sans-serif; font-size: 13px;
  line-height: 1.45; color: inherit; }
.cp-tree .cp-head { font-weight: 600; margin-bottom: 4px; }
.cp-tree .cp-sum { color: #6e7781; margin-left: 8px; font-weight: 400; }
.cp-tree details { margin-left: 14px; }
.cp-tree > details { margin-left: 0; }
.cp-tree summary { cursor: pointer; }
.cp-tree .cp-node { font-weight: 600; font-family: ui-monospace, monospace; }
.cp-tree table { border-collapse: collapse; margin: 2px 0 4px 18px; }
.cp-tree td { padding: 1px 10px 1px 0; vertical-align: middle; text-align: left; }
.cp-tree td.cp-name, .cp-tree td.cp-kind { font-family: ui-monospace, monospace; }
.cp-tree td.cp-num { text-align: right; color: #6e7781; }
.cp-tree td.cp-meta { color: #6e7781; font-family: ui-monospace, monospace; }
.cp-tree .cp-badge { display: inline-block; padding: 0 6px; border-radius: 8px;
  font-size: 11px; font-weight: 500; margin-left: 4px; }
.cp-tree .cp-grey { background: rgba(120, 120, 120, 0.18); }
.cp-tree .cp-green { background: rgba(46, 160, 67, 0.18); color: #1a7f37; }
.cp-tree .cp-purple { background: rgba(130, 80, 223, 0.15); color: #8250df; }
.cp-tree polyline { fill: none; stroke: #0969da; stroke-width: 1.2; }
</style>
"""


class _Group:
    """One path prefix: its rows and its sub-groups, each in first-seen order."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, Sequence[Cell]]] = []
        self.groups: dict[str, _Group] = {}

    def add(self, path: Sequence[str], cells: Sequence[Cell]) -> None:
        group = self
        for part in path[:-1]:
            group = group.groups.setdefault(part, _Group())
        group.rows.append((path[-1], cells))


def html_tree(
    rows: Iterable[Row],
    *,
    head: str,
    group_note: Callable[[tuple[str, ...]], str] | None = None,
    open_depth: int | None = None,
) -> str:
    """A self-contained HTML table of named rows, grouped into a collapsible tree by their paths.

    The notebook view of lox's ``logdict`` and blox's ``Params``. Each row's path ends in its own
    name; the parts before it are the groups it sits in, shown as nested ``<details>``. A group
    lists its own rows first, then its sub-groups, each in the order first seen. The result is one
    string with an inline ``<style>`` and no JavaScript, so it renders the same in Jupyter,
    VS Code, Colab and a saved ``.html`` file.

    Names (path parts) and notes are escaped here; cells and ``head`` are HTML, inserted as is:
    escape any text in them with ``html.escape``. Cells and ``head`` may use the stylesheet's
    classes: ``cp-sum`` (a grey note), ``cp-badge`` with one of ``cp-green``, ``cp-purple``,
    ``cp-grey`` (a coloured label), and an inline ``<svg>`` ``polyline`` (a sparkline).

    Args:
        rows: ``(path, cells)`` per row, where ``path`` is a non-empty sequence of names and each
            cell is ``(style, html)``; ``style`` is ``'kind'`` (monospace), ``'num'``
            (right-aligned, grey), ``'meta'`` (grey monospace) or ``''`` (plain).
        head: the heading line (HTML), e.g. a title and a ``cp-sum`` note.
        group_note: ``group_note(group_path) -> text`` shown next to each group's name (a
            subtotal, say); ``None`` or an empty string shows nothing.
        open_depth: groups nested less deep than this start unfolded (top-level groups are at
            depth 0); ``None`` unfolds every group.

    Returns:
        The HTML, starting with its ``<style>`` element.

    Raises:
        ValueError: a row has an empty path (it would have no name).

    Example:
        >>> from core_primitives import html_tree
        >>> page = html_tree(
        ...     [(("net", "w"), [("kind", "float32[3]")]), (("b",), [("num", "2")])],
        ...     head="Params",
        ...     group_note=lambda path: f"{len(path)} deep",
        ... )
        >>> '<details open><summary><span class="cp-node">net</span>' in page
        True
        >>> '<tr><td class="cp-name">w</td><td class="cp-kind">float32[3]</td></tr>' in page
        True
    """
    root = _Group()
    for path, cells in rows:
        if not path:
            raise ValueError(
                f"html_tree: a row has an empty path (cells {list(cells)!r:.80}); every row needs "
                "at least its own name, e.g. (('loss',), cells)."
            )
        root.add(tuple(path), cells)
    body = _group_html(root, (), group_note, open_depth)
    return f'{_STYLE}<div class="cp-tree"><div class="cp-head">{head}</div>{body}</div>'


def _group_html(
    group: _Group,
    where: tuple[str, ...],
    note: Callable[[tuple[str, ...]], str] | None,
    open_depth: int | None,
) -> str:
    parts = []
    if group.rows:
        parts.append(
            f"<table>{''.join(_row_html(name, cells) for name, cells in group.rows)}</table>"
        )
    is_open = " open" if open_depth is None or len(where) < open_depth else ""
    for name, child in group.groups.items():
        path = (*where, name)
        text = note(path) if note is not None else ""
        shown = f'<span class="cp-sum">{html.escape(text)}</span>' if text else ""
        summary = f'<summary><span class="cp-node">{html.escape(name)}</span>{shown}</summary>'
        parts.append(
            f"<details{is_open}>{summary}{_group_html(child, path, note, open_depth)}</details>"
        )
    return "".join(parts)


def _row_html(name: str, cells: Sequence[Cell]) -> str:
    tds = "".join(
        f'<td class="cp-{style}">{content}</td>' if style else f"<td>{content}</td>"
        for style, content in cells
    )
    return f'<tr><td class="cp-name">{html.escape(name)}</td>{tds}</tr>'
