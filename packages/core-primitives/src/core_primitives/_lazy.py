"""Lazy re-exports: a package's public names, imported the first time one is used.

Importing JAX takes seconds. A command line whose ``--help`` or ``--version`` needs none of it
should not pay for it, and neither should a user who only wants a package's config classes. So a
package lists its public names once, as ordinary ``from ._x import y as y`` lines under
``if TYPE_CHECKING:`` in its ``__init__.py`` (what type checkers and documentation tools read), and
hands its module-level ``__getattr__``/``__dir__`` to :func:`lazy_exports`, which reads that same
block: one list, no second table to keep in step.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any


def lazy_exports(
    package: str, init_file: str
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``, from its ``if TYPE_CHECKING:`` imports.

    Args:
        package: the package's ``__name__``.
        init_file: the package's ``__file__`` (its ``__init__.py``).

    Returns:
        A module ``__getattr__`` that imports a public name's module on first access (and caches
        the value in the package), a ``__dir__`` and ``__all__`` listing the public names.

    Raises:
        AttributeError: from the returned ``__getattr__``, for a name the package does not export.

    Example:
        >>> import core_primitives
        >>> "did_you_mean" in core_primitives.__all__
        True
        >>> core_primitives.format_path(("net", "mlp", "kernel"))
        'net/mlp/kernel'
    """
    where = _exported_modules(Path(init_file))
    names = sorted(where)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module_name, attribute = where[name]
        module = importlib.import_module(module_name, package)
        value = module if attribute is None else getattr(module, attribute)
        setattr(importlib.import_module(package), name, value)  # later lookups skip this hook
        return value

    def __dir__() -> list[str]:
        return names

    return __getattr__, __dir__, names


def _exported_modules(init_file: Path) -> dict[str, tuple[str, str | None]]:
    """``{public name: (relative module, its attribute)}`` from ``init_file``'s ``TYPE_CHECKING``
    block.

    The attribute is ``None`` for a submodule exported as such (``from . import compat as compat``).
    """
    tree = ast.parse(init_file.read_text(encoding="utf-8"))
    where: dict[str, tuple[str, str | None]] = {}
    for node in tree.body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.ImportFrom) and stmt.level == 1:
                for alias in stmt.names:
                    name = alias.asname or alias.name
                    if stmt.module:  # from ._x import y as y
                        where[name] = (f".{stmt.module}", alias.name)
                    else:  # from . import compat as compat
                        where[name] = (f".{alias.name}", None)
    return where


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )
