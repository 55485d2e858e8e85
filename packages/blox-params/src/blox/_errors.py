"""Error classes: each subclasses the builtin a user would catch, and carries a full message.

Every message says what failed (with the parameter path), what was given, what was expected and
how to fix it. Messages are built where the error is raised, because only there is the context.
"""

from __future__ import annotations


class ParamShapeError(ValueError):
    """A stored parameter's shape differs from the shape a module asked for."""


class ParamDtypeError(ValueError):
    """A stored parameter's dtype differs from the dtype a module asked for."""


class LockedParamsError(ValueError):
    """A module tried to create a parameter in locked ``Params``."""


class MissingParamError(KeyError):
    """A parameter path is not in ``Params``.

    A ``KeyError`` so that ``Mapping`` code (``params.get(path)``, ``try: ... except KeyError``)
    keeps working; ``__str__`` is overridden because ``KeyError`` would show the message as a
    quoted one-line ``repr``.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RngError(ValueError):
    """An ``Rng`` was used before it was seeded, or a module needing one has none."""


class GraphError(ValueError):
    """A module was bound to a graph node it cannot use (the root, or a node already taken)."""
