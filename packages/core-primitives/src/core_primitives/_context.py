"""What a rule sees: the equation evaluated as traced (``bind_eqn``) and its ``Context``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import compat
from ._interpreter_errors import check_bind_args, check_emitted

Rule = Callable[["Context", Any, list[Any]], Sequence[Any]]


class Context:
    """What a rule sees next to its equation: the interpreter and a place to emit values."""

    # ``interpreter`` is the ``Interpreter`` running the rule (typed loosely: this module sits
    # below ``_interpreter``, which imports it).
    def __init__(self, interpreter: Any) -> None:
        self.interpreter = interpreter
        self.emitted: list[Any] = []

    def emit(self, value: Any) -> None:
        """Add ``value`` (any pytree of arrays) to the current jaxpr's extra outputs.

        Raises:
            TypeError: a leaf of ``value`` is not an array or a number.
        """
        check_emitted(value)
        self.emitted.append(value)

    def bind(self, eqn: Any, invals: Sequence[Any]) -> list[Any]:
        """Evaluate ``eqn`` unchanged (what happens when no rule applies)."""
        return bind_eqn(eqn, invals)


def bind_eqn(eqn: Any, invals: Sequence[Any]) -> list[Any]:
    """Bind ``eqn``'s primitive on ``invals`` with its params, as the original trace did.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from core_primitives import bind_eqn
        >>> (eqn,) = jax.make_jaxpr(lambda x: x * 2.0)(1.0).eqns
        >>> bind_eqn(eqn, [jnp.float32(3.0), jnp.float32(2.0)])
        [Array(6., dtype=float32)]
    """
    check_bind_args(eqn, invals)
    with compat.eqn_context(eqn):
        outs = compat.bind(eqn.primitive, invals, eqn.params)
    return list(outs) if eqn.primitive.multiple_results else [outs]
