"""``Graph``: the static tree of names that gives every parameter its path."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from core_primitives import format_path

from ._errors import GraphError

# The module bound to a node is a `blox.Module`, typed `Any` here: `_module` imports this file,
# and the layer below never imports the one above, not even for a type annotation.
BoundModule = Any

Path = tuple[str, ...]


class Graph:
    """A node in the model's name tree; modules bind to nodes and name their params by its path.

    Paths are tuples, so a name may hold any character (``'a/b'`` included). Graphs hold no
    arrays: they are plain Python objects that describe structure, shared by every call.

    Args:
        name: the root's name (the first element of every path under it).

    Example:
        >>> graph = Graph('net')
        >>> (graph / 'mlp' / 'l1').path
        ('net', 'mlp', 'l1')
        >>> graph.child('mlp') is graph / 'mlp'
        True
    """

    __slots__ = ("_children", "module", "name", "parent", "path")

    def __init__(self, name: str, *, _parent: Graph | None = None) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(
                f"Graph node names are non-empty strings, got {name!r}. "
                "Write Graph('net') or graph.child('layer1')."
            )
        self.name = name
        self.parent = _parent
        self.path: Path = (*_parent.path, name) if _parent is not None else (name,)
        self._children: dict[str, Graph] = {}
        self.module: BoundModule | None = None

    @property
    def is_root(self) -> bool:
        """Whether this node has no parent (modules cannot bind here)."""
        return self.parent is None

    @property
    def root(self) -> Graph:
        """The root of the tree this node belongs to (the node itself for a root).

        Example:
            >>> graph = Graph('net')
            >>> (graph / 'mlp' / 'l1').root is graph
            True
        """
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def child(self, name: str) -> Graph:
        """The child node ``name``, created on first use (the same object afterwards).

        Example:
            >>> Graph('net').child('a/b').path
            ('net', 'a/b')
        """
        node = self._children.get(name)
        if node is None:
            node = self._children[name] = Graph(name, _parent=self)
        return node

    def __truediv__(self, name: str) -> Graph:
        return self.child(name)

    def children(self) -> dict[str, Graph]:
        """The direct children created so far, by name (a copy)."""
        return dict(self._children)

    def walk(self) -> Iterator[BoundModule]:
        """Every module bound at or below this node, depth first in creation order.

        Example:
            >>> import blox as bx
            >>> graph = Graph('net')
            >>> rng = bx.Rng(graph / 'rng')
            >>> lin = bx.Linear(graph / 'out', 3, rng=rng)
            >>> [type(m).__name__ for m in graph.walk()]
            ['Rng', 'Linear']
        """
        if self.module is not None:
            yield self.module
        for node in self._children.values():
            yield from node.walk()

    def _bind(self, module: BoundModule) -> None:
        kind = type(module).__name__
        if self.is_root:
            raise GraphError(
                f"{kind} cannot bind to the root node {format_path(self.path)}: the root only "
                f"names the model. Bind to a child instead: {kind}(graph / 'layer', ...)."
            )
        if self.module is not None:
            other = type(self.module).__name__
            raise GraphError(
                f"{kind} cannot bind to {format_path(self.path)}: a {other} is already bound "
                "there, and two modules on one node would share (and clobber) parameters. "
                "Give each module its own node, e.g. graph / 'layer2'; to share weights, call "
                "the same module twice."
            )
        self.module = module

    def __repr__(self) -> str:
        bound = f", module={type(self.module).__name__}" if self.module is not None else ""
        return f"Graph({format_path(self.path)!r}{bound})"
