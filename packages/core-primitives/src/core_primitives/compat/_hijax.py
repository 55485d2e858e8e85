"""JAX's next primitives: ``scan``, ``checkpoint``, ``custom_jvp`` and ``custom_vjp`` as "hijax".

From JAX 0.12, opt-in flags (``jax_scan3``, ``jax_remat3``, ``jax_custom_vjp3``,
``jax_custom_jvp3``) make these transformations bind one primitive, ``call_hi_primitive``, whose
only param ``_prim`` is an object (a ``HiPrim``) holding the body and the rules: ``Scan3``,
``RematTraced``, ``CustomVJPTraced``, ``CustomJVPTraced``. The interpreter keys its rules for them
by that object's class (:func:`rule_key`). A ``custom_vjp`` with ``generic_batching`` takes this
path even without a flag.

Serves 0.12 (the first release with the flags and with ``HiPrim`` objects as the ``_prim``
param). Everything here is ``None`` (and :func:`rule_key` is the primitive) on 0.7.2 .. 0.11,
where no supported spelling binds these objects. When the flags become JAX's defaults, the old
rules (``scan_p``, ``remat_p``, ``custom_*_call_p``) go and these stay; re-check the class names
and constructor params below at every JAX upgrade (the flag session of the noxfile runs them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.extend.core as jex_core
import numpy as np
from jax._src import core as _core

_hijax: Any = None
try:  # 0.10+ (the flags' first releases); 0.7.2 .. 0.9 have none of this
    from jax._src import hijax as _hijax_module

    _hijax = _hijax_module
except ImportError:  # pragma: no cover - JAX 0.7.2 .. 0.9
    pass
# The base class of the objects ``_prim`` holds: ``HiPrim`` from 0.12, ``VJPHiPrimitive`` on 0.10.
HiPrim: Any = getattr(_hijax, "HiPrim", None) or getattr(_hijax, "VJPHiPrimitive", None)
call_hi_primitive_p: Any = getattr(_hijax, "call_hi_primitive_p", None)
CustomVJPTraced: Any = getattr(_hijax, "CustomVJPTraced", None)
CustomJVPTraced: Any = getattr(_hijax, "CustomJVPTraced", None)  # 0.12+
RematTraced: Any = None
Scan3: Any = None
if call_hi_primitive_p is not None:
    from jax._src import ad_checkpoint as _ad_checkpoint
    from jax._src.lax.control_flow import loops as _loops

    # Each arrived in its own release: RematTraced in 0.9, Scan3 in 0.10 (0.8 has neither).
    RematTraced = getattr(_ad_checkpoint, "RematTraced", None)
    Scan3 = getattr(_loops, "Scan3", None)

# ``eval_jaxpr``: the call primitive a ``jax.stages.Traced`` binds when called, 0.12+ (where it is
# also ``closed_call_p``: one object, one rule). ``None`` where JAX does not have it.
eval_jaxpr_p: Any = getattr(_core, "eval_jaxpr_p", None)

# The releases whose higher-order primitives the interpreter knows (and so, those it supports).
SUPPORTED_JAX = "0.7.2 .. 0.12.x"

# The JAX flags that switch to these primitives, in the order JAX added them. The nox session
# ``next_primitives`` runs the suites once per flag; add a flag here when JAX adds one.
NEXT_FLAGS = ("jax_scan3", "jax_remat3", "jax_custom_vjp3", "jax_custom_jvp3")


def next_flags() -> tuple[str, ...]:
    """The flags of :data:`NEXT_FLAGS` this JAX has in the form 0.12 defines (and we test).

    0.10 and 0.11 have some of them in an earlier form (``VJPHiPrimitive`` objects): the
    interpreter enters their ``Scan3``/``RematTraced``/``CustomVJPTraced`` where those look like
    0.12's and raises ``UnknownPrimitiveError`` for the rest, but they are not tested there.
    """
    if getattr(_hijax, "HiPrim", None) is None:
        return ()
    return tuple(f for f in NEXT_FLAGS if hasattr(jax.config, f))


def rule_key(eqn: Any) -> Any:
    """The key of ``eqn`` in a rule table: its primitive, or for a hijax application the class
    of the ``HiPrim`` it applies (all of them bind ``call_hi_primitive``)."""
    prim = eqn.primitive
    if prim is call_hi_primitive_p and call_hi_primitive_p is not None:
        return type(eqn.params["_prim"])
    return prim


def hi_prim(eqn: Any) -> Any:
    """The ``HiPrim`` object a ``call_hi_primitive`` equation applies."""
    return eqn.params["_prim"]


def hi_params(eqn: Any) -> dict[str, Any]:
    """Its params (``Scan3``: extensives, length, jaxpr, reverse, unroll; ``RematTraced``:
    jaxpr, policy, prevent_cse), the arguments of its class's constructor."""
    return dict(hi_prim(eqn).params)


def hi_bind(eqn: Any, params: dict[str, Any], args: Sequence[Any]) -> list[Any]:
    """Apply a new object of ``eqn``'s HiPrim class, built from ``params``, to flat ``args``.

    0.12: ``Scan3`` and ``RematTraced`` take their params as constructor arguments and derive
    the avals from the jaxpr, so a rewritten body with more inputs and outputs is a new object.
    """
    prim = type(hi_prim(eqn))(**params)
    return list(call_hi_primitive_p.bind(*args, _prim=prim))


def hi_call_jaxpr(eqn: Any) -> Any:
    """The primal body of a ``CustomVJPTraced``/``CustomJVPTraced`` application (a jaxpr)."""
    return hi_prim(eqn).traced.jaxpr


def hi_primal_args(eqn: Any, args: Sequence[Any]) -> list[Any]:
    """The arguments of :func:`hi_call_jaxpr` among the equation's flat operands.

    A ``CustomVJPTraced`` application takes ``(consts, fwd_consts, *args)`` and its primal
    ``(consts, *args)``: ``fwd_consts`` (the residuals of a helper that ``remat`` builds; usually
    empty) are dropped. Nondiff arguments are ``Static`` nodes without leaves on both sides.
    """
    prim = hi_prim(eqn)
    drop = getattr(prim, "drop_fwd_consts", None)
    if drop is None:
        return list(args)
    structured = prim.in_tree.unflatten(list(args))
    return list(_hijax.tracing_registry.flatten(drop(*structured))[0])


# Param types that never hold a jaxpr: most params, and the items of shape tuples. Exact types,
# looked up in a set: this runs on every equation without a rule, so it is kept cheap.
_PLAIN = frozenset({bool, int, float, str, type(None), np.dtype})
_JAXPRS = (jex_core.Jaxpr, jex_core.ClosedJaxpr)


def _jaxprs_in(value: Any, found: list[Any]) -> None:
    kind = type(value)
    if kind in _PLAIN:
        return
    if kind is tuple or kind is list:
        for v in value:
            if type(v) not in _PLAIN:
                _jaxprs_in(v, found)
    elif isinstance(value, _JAXPRS):
        found.append(value)
    elif HiPrim is not None and isinstance(value, HiPrim):
        for v in value.params.values():
            _jaxprs_in(v, found)
    elif isinstance(value, jax.stages.Traced):
        found.append(value.jaxpr)


def sub_jaxprs(params: dict[str, Any]) -> list[Any]:
    """Every jaxpr an equation's params hold, inside tuples, HiPrim objects and ``Traced``s.

    One level only: the jaxprs of the equation itself, not of the equations inside them.
    """
    found: list[Any] = []
    for v in params.values():
        if type(v) not in _PLAIN and not isinstance(v, np.dtype):
            _jaxprs_in(v, found)
    return found


def primitive_name(eqn: Any) -> str:
    """How to name ``eqn``'s primitive to a user: ``scan``, or ``Scan3 (call_hi_primitive)``."""
    key = rule_key(eqn)
    if key is eqn.primitive:
        return str(eqn.primitive)
    return f"{key.__name__} ({eqn.primitive})"


def jax_description() -> str:
    """The installed JAX and the next-primitive flags that are on: ``JAX 0.12.0 (jax_scan3 on)``."""
    on = [f for f in NEXT_FLAGS if getattr(jax.config, f, False)]
    return f"JAX {jax.__version__}" + (f" ({', '.join(on)} on)" if on else "")
