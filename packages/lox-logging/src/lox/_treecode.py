"""Pytree structure as plain JSON, so a save never needs pickle to rebuild a value's pytree.

dicts, lists, tuples and ``None`` round-trip as themselves; a namedtuple comes back as a
namedtuple with the same name and fields (a new class: nothing is imported on load); any
other pytree node comes back as a dict keyed by its child names (``.w`` -> ``'w'``).
"""

from __future__ import annotations

import collections
from typing import Any

import jax

from core_primitives import keypath_to_path

Json = Any


def encode_tree(tree: Any) -> tuple[list[Any], Json]:
    """Leaves of ``tree`` in ``jax.tree.leaves`` order, and a JSON description of its structure.

    Example:
        >>> leaves, code = encode_tree({'a': (1, None)})
        >>> leaves, decode_tree(code, leaves)
        ([1], {'a': (1, None)})
    """
    leaves: list[Any] = []
    return leaves, _encode(tree, leaves)


def _encode(node: Any, leaves: list[Any]) -> Json:
    if node is None:
        return {"none": True}
    if isinstance(node, dict):
        keys = sorted(node)  # the order jax flattens dicts in, so leaves line up
        return {"dict": [[_json_key(k), _encode(node[k], leaves)] for k in keys]}
    if isinstance(node, tuple) and hasattr(node, "_fields"):
        fields = list(node._fields)
        children = [_encode(c, leaves) for c in node]
        return {"namedtuple": type(node).__name__, "fields": fields, "children": children}
    if isinstance(node, list | tuple):
        return {type(node).__name__: [_encode(c, leaves) for c in node]}
    if jax.tree_util.treedef_is_leaf(jax.tree.structure(node)):
        leaves.append(node)
        return {"leaf": len(leaves) - 1}
    return _encode_custom(node, leaves)


def _encode_custom(node: Any, leaves: list[Any]) -> Json:
    # One level of a registered node: every child counts as a leaf except `node` itself.
    pairs, _ = jax.tree_util.tree_flatten_with_path(node, is_leaf=lambda x: x is not node)
    items = [[keypath_to_path(path[-1:])[0], _encode(child, leaves)] for path, child in pairs]
    return {"dict": items}


def _json_key(key: Any) -> Any:
    return key if isinstance(key, str | int | float | bool) else str(key)


def decode_tree(code: Json, leaves: list[Any]) -> Any:
    """Rebuild the pytree described by ``code`` (from :func:`encode_tree`) around ``leaves``."""
    if "leaf" in code:
        return leaves[code["leaf"]]
    if "none" in code:
        return None
    if "dict" in code:
        return {k: decode_tree(c, leaves) for k, c in code["dict"]}
    if "list" in code:
        return [decode_tree(c, leaves) for c in code["list"]]
    if "tuple" in code:
        return tuple(decode_tree(c, leaves) for c in code["tuple"])
    if "namedtuple" in code:
        cls = collections.namedtuple(code["namedtuple"], code["fields"])  # type: ignore[misc]
        return cls(*(decode_tree(c, leaves) for c in code["children"]))
    raise ValueError(f"lox.load: unknown pytree node {code!r} in the save index; is it damaged?")
