"""Tuple paths such as ``('net', 'mlp', 'kernel')`` and their ``net/mlp/kernel`` display."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import jax

Path = tuple[str, ...]


def format_path(path: Iterable[Any]) -> str:
    """Show a tuple path as ``a/b/c``; a part that contains ``/`` or is empty is quoted.

    Example:
        >>> format_path(('net', 'mlp', 'kernel'))
        'net/mlp/kernel'
        >>> format_path(('net', 'a/b'))
        "net/'a/b'"
    """
    if isinstance(path, str):
        return path  # already shown as a path; iterating it would quote every letter
    if not isinstance(path, Iterable):
        raise TypeError(
            "format_path: expected a tuple path such as ('net', 'mlp', 'kernel'), got "
            f"{path!r:.60} "
            f"({type(path).__name__}). Wrap a single name in a tuple: format_path(('kernel',))."
        )
    parts = [str(p) for p in path]
    return "/".join(repr(p) if ("/" in p or not p) else p for p in parts)


def key_to_str(key: Any) -> str:
    """One JAX key-path entry (dict key, attribute, index) as a plain string."""
    for attr in ("key", "name", "idx"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def keypath_to_path(keypath: Iterable[Any]) -> Path:
    """Turn a ``jax.tree_util`` key path into a tuple of strings.

    Example:
        >>> import jax
        >>> [keypath_to_path(p) for p, _ in jax.tree_util.tree_leaves_with_path({'a': [1, 2]})]
        [('a', '0'), ('a', '1')]
    """
    return tuple(key_to_str(k) for k in keypath)


def tree_paths(tree: Any, is_leaf: Any = None) -> list[tuple[Path, Any]]:
    """``(path, leaf)`` pairs of a pytree, with paths as tuples of strings.

    Example:
        >>> tree_paths({'net': {'w': 1}})
        [(('net', 'w'), 1)]
    """
    pairs = jax.tree_util.tree_leaves_with_path(tree, is_leaf=is_leaf)
    return [(keypath_to_path(p), leaf) for p, leaf in pairs]
