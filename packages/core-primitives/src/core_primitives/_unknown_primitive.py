"""What the interpreter does at a higher-order primitive it has no rule for.

Binding such an equation unchanged is right when nothing inside it is rewritten (a kernel of
plain arithmetic), and a silent loss when something is: a log site inside a primitive that lox
cannot enter would vanish from the logs without an error. JAX keeps adding higher-order
primitives (0.12's ``Scan3`` and friends behind its ``jax_*3`` flags), so at every equation
without a rule whose params hold a jaxpr, the interpreter looks for equations of its ruled
primitives inside, at any depth, and raises if it finds one. Only equations that hold a jaxpr
are walked, so ordinary jaxprs cost one scan of each equation's params.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from . import compat


class UnknownPrimitiveError(NotImplementedError):
    """A higher-order primitive the interpreter cannot enter holds equations its rules rewrite.

    Raised instead of binding the primitive unchanged, which would skip those equations (for
    ``lox``, lose log sites) without a word. The message names the primitive, the JAX version
    and the way out: pin JAX, or report it; for a primitive of your own, give it a rule.

    Example:
        >>> import jax, jax.numpy as jnp, jax.extend.core as jex
        >>> from jax import lax
        >>> from core_primitives import Interpreter, UnknownPrimitiveError
        >>> my_call_p = jex.Primitive("my_call")  # a higher-order primitive with no rule
        >>> my_call_p.multiple_results = True
        >>> _ = my_call_p.def_abstract_eval(lambda *avals, body: body.out_avals)
        >>> f = lambda x: my_call_p.bind(x, body=jax.make_jaxpr(jnp.sin)(x))[0]
        >>> keep = lambda ctx, eqn, invals: ctx.bind(eqn, invals)
        >>> try:
        ...     Interpreter({lax.sin_p: keep}).transform(f)(1.0)
        ... except UnknownPrimitiveError as err:
        ...     print(str(err)[:61])
        Interpreter: the higher-order primitive my_call holds a jaxpr
    """


def rewritten_inside(jaxprs: Iterable[Any], rules: Mapping[Any, Any]) -> list[Any]:
    """Every equation of a ruled primitive in ``jaxprs``, at any depth, in program order."""
    found: list[Any] = []
    seen: set[int] = set()

    def walk(j: Any) -> None:
        if id(j) in seen:  # a body shared by several equations (cond branches, scan's jvp)
            return
        seen.add(id(j))
        jaxpr = compat.jaxpr_and_consts(j)[0] if isinstance(j, compat.ClosedJaxpr) else j
        for eqn in jaxpr.eqns:
            if eqn.primitive in rules:
                found.append(eqn)
            for sub in compat.sub_jaxprs(eqn.params):
                walk(sub)

    for j in jaxprs:
        walk(j)
    return found


def unknown_primitive_error(eqn: Any, inside: list[Any]) -> UnknownPrimitiveError:
    """The interpreter's error for ``eqn``, with ``inside`` from :func:`rewritten_inside`."""
    from . import __version__

    ruled = ", ".join(dict.fromkeys(str(e.primitive) for e in inside))
    return UnknownPrimitiveError(
        f"Interpreter: the higher-order primitive {compat.primitive_name(eqn)} holds a jaxpr "
        f"that no rule of this interpreter enters, and equations its rules rewrite ({ruled}) "
        "sit inside it. Binding it unchanged would skip them silently, so the interpreter "
        f"stops.\ncore-primitives {__version__} knows the higher-order primitives of JAX "
        f"{compat.SUPPORTED_JAX} (with their flags {', '.join(compat.NEXT_FLAGS)}); this is "
        f"{compat.jax_description()}.\nFix: pin JAX to a supported version, or report this "
        "message to the core-primitives maintainers. For a primitive of your own, give the "
        "interpreter a rule for it: Interpreter({my_prim: my_rule, ...})."
    )
