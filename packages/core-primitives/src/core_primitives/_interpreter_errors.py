"""What the interpreter says when a rule, or a caller of ``eval_jaxpr``, breaks its contract.

A rule that returns the wrong number of outputs used to surface as ``KeyError: Var(id=...)``
from a later equation that read the missing value (or, with too many, be silently truncated by
``zip``); the checks here run right after the rule, where its primitive and rule are known.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from ._paths import keypath_to_path

_ARRAY_LIKE = (jax.Array, np.ndarray, np.generic, int, float, complex)


class EmittedStructureError(ValueError):
    """Values emitted inside a higher-order primitive cannot leave it as they are."""


class RuleOutputError(TypeError):
    """An ``Interpreter`` rule returned something other than one value per equation output.

    A ``TypeError``, as JAX raises for custom rules whose outputs do not match (``custom_jvp``,
    ``custom_vjp``): the rule's result has the wrong structure.

    Example:
        >>> import jax.numpy as jnp
        >>> from jax import lax
        >>> from core_primitives import Interpreter, RuleOutputError
        >>> bare = Interpreter({lax.sin_p: lambda ctx, eqn, invals: jnp.sin(invals[0])})
        >>> try:
        ...     bare.transform(jnp.sin)(1.0)
        ... except RuleOutputError as err:
        ...     print(str(err).splitlines()[-1])
        Wrap a single output in a list: return [y], not y.
    """


def _rule_name(rule: Any) -> str:
    return getattr(rule, "__qualname__", None) or type(rule).__name__


def _describe(outs: Any) -> str:
    if isinstance(outs, list | tuple):
        return f"a {type(outs).__name__} of {len(outs)} value{'s' * (len(outs) != 1)}"
    shape = getattr(outs, "shape", None)
    return f"{type(outs).__name__}" + (f" of shape {tuple(shape)}" if shape is not None else "")


def check_rule_outputs(rule: Any, eqn: Any, outs: Any) -> None:
    """Raise ``RuleOutputError`` unless ``outs`` is a list/tuple with one value per output."""
    n = len(eqn.outvars)
    if isinstance(outs, list | tuple) and len(outs) == n:
        return
    avals = ", ".join(str(v.aval) for v in eqn.outvars)
    if outs is None:
        fix = "The rule returned nothing: return its outputs, e.g. return ctx.bind(eqn, invals)."
    elif not isinstance(outs, list | tuple):
        fix = "Wrap a single output in a list: return [y], not y."
    else:
        fix = (
            "Return one value per output of the equation, in order; ctx.bind(eqn, invals) gives "
            "the unchanged outputs to start from."
        )
    raise RuleOutputError(
        f"Interpreter: the rule {_rule_name(rule)} for primitive {eqn.primitive} returned "
        f"{_describe(outs)}, expected a list of {n} output{'s' * (n != 1)} (one per "
        f"eqn.outvars: {avals}).\n{fix}"
    )


def check_eval_args(jaxpr: Any, args: Any) -> None:
    """``eval_jaxpr``'s arguments: a jaxpr and one value per input variable."""
    if not hasattr(jaxpr, "eqns") or not hasattr(jaxpr, "invars"):
        raise TypeError(
            f"Interpreter.eval_jaxpr: expected a jaxpr (closed or open), got {type(jaxpr).__name__}"
            f" ({jaxpr!r:.60}). Make one with jax.make_jaxpr(f)(*args), or call "
            "interpreter.transform(f) instead."
        )
    if len(args) != len(jaxpr.invars):
        raise TypeError(
            f"Interpreter.eval_jaxpr: the jaxpr takes {len(jaxpr.invars)} input"
            f"{'s' * (len(jaxpr.invars) != 1)}, got {len(args)} argument"
            f"{'s' * (len(args) != 1)}. Pass the flat list of array leaves, e.g. "
            "jax.tree.leaves((args, kwargs)) for the args the jaxpr was made from."
        )


def check_bind_args(eqn: Any, invals: Any) -> None:
    """``bind_eqn``'s operands: one per input of the equation."""
    if len(invals) != len(eqn.invars):
        raise TypeError(
            f"bind_eqn: the {eqn.primitive} equation takes {len(eqn.invars)} operand"
            f"{'s' * (len(eqn.invars) != 1)}, got {len(invals)}. Pass one value per eqn.invars, "
            "in order (a rule's invals as given)."
        )


def check_emitted(value: Any) -> None:
    """Emitted values leave scans and conds as outputs, so every leaf must be an array."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(value):
        if not isinstance(leaf, _ARRAY_LIKE) and not hasattr(leaf, "__jax_array__"):
            where = "/".join(keypath_to_path(path)) or "the value itself"
            raise TypeError(
                f"Context.emit: the emitted value holds a {type(leaf).__name__} ({leaf!r:.60}) "
                f"at {where}, expected arrays or numbers (a pytree of them): emitted values "
                "become outputs of the enclosing scan, cond or jit. Emit arrays, and keep other "
                "data in the rule (or in static metadata of a pytree node)."
            )
