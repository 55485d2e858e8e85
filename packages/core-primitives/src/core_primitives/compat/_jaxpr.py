"""Jaxprs and their equations: types, higher-order primitives, reading and re-binding equations.

0.7.2 .. 0.12. Public in ``jax.extend.core`` where JAX offers it; the parameters of higher-order
primitives (which changed shape across releases) are read through the helpers here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import jax.extend.core as jex_core
from jax._src import core as _core  # 0.7.2 .. 0.12: these internal module paths are stable
from jax._src import source_info_util as _source_info
from jax._src.interpreters import partial_eval as _pe
from jax._src.sharding_impls import UNSPECIFIED as _UNSPECIFIED
from jax.extend.core import primitives as _prims

# --- jaxpr types --------------------------------------------------------------------------------
# Public in jax.extend.core on every supported version. At 0.11 ClosedJaxpr became an alias of
# Jaxpr (a Jaxpr carries its own consts); the helpers below hide the difference.
Jaxpr = jex_core.Jaxpr
ClosedJaxpr = jex_core.ClosedJaxpr
JaxprEqn = jex_core.JaxprEqn
Literal = jex_core.Literal
Var = jex_core.Var
Primitive = jex_core.Primitive

# --- higher-order primitives --------------------------------------------------------------------
jit_p = _prims.jit_p
scan_p = _prims.scan_p
cond_p = _prims.cond_p
while_p = _prims.while_p
closed_call_p = _prims.closed_call_p
custom_jvp_call_p = _prims.custom_jvp_call_p
custom_vjp_call_p = _prims.custom_vjp_call_p

# remat_p is public in jax.extend from 0.8; 0.7.x only has the private spelling. Drop the fallback
# when the floor reaches 0.8.
if hasattr(_prims, "remat_p"):
    remat_p = _prims.remat_p
else:  # pragma: no cover - JAX 0.7.x
    from jax._src.ad_checkpoint import remat_p as remat_p

# shard_map_p has no public spelling on any supported version (0.7.2 .. 0.12).
from jax._src.shard_map import shard_map_p as shard_map_p  # noqa: E402

# call_p: old-style call primitive still bound by a few libraries.
call_p = _prims.call_p


def jaxpr_and_consts(closed: Any) -> tuple[Any, list[Any]]:
    """Split a closed jaxpr into ``(jaxpr, consts)``.

    Serves 0.7.2 .. 0.12: before 0.11 ``ClosedJaxpr`` wraps a ``Jaxpr``; from 0.11 they are one
    class and ``closed.jaxpr`` is the object itself. Both spell ``.jaxpr`` and ``.consts``.
    """
    return closed.jaxpr, list(closed.consts)


def is_drop_var(v: Any) -> bool:
    """Whether an equation output is discarded (``_`` in a printed jaxpr). 0.7.2 .. 0.12."""
    return isinstance(v, _core.DropVar)


def is_literal(v: Any) -> bool:
    return isinstance(v, Literal)


def bind(prim: Any, args: Sequence[Any], params: dict[str, Any]) -> Any:
    """Bind ``prim`` with jaxpr-level ``params`` (as stored in an equation). 0.7.2 .. 0.12."""
    leading, bound = _bind_params(prim, params)
    return prim.bind(*leading, *args, **bound)


def _bind_params(prim: Any, params: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """``(leading_args, params)`` to bind ``prim`` as tracing originally did.

    0.7.2 .. 0.9: ``get_bind_params`` returns ``(subfuns, params)`` and subfuns lead the operands.
    0.10+: it returns only params (subfuns travel inside them). Drop the tuple branch at 0.10.
    """
    bound = prim.get_bind_params(params)
    if isinstance(bound, tuple):
        subfuns, params = bound
        return list(subfuns), params
    return [], bound


def eqn_context(eqn: Any) -> Any:
    """Context manager that attributes ops traced now to the user code that made ``eqn``.

    Keeps source locations and ``jax.named_scope`` names in rewritten jaxprs and HLO.
    0.7.2 .. 0.12.
    """
    stack = contextlib.ExitStack()
    name_stack = _source_info.current_name_stack() + eqn.source_info.name_stack
    stack.enter_context(_source_info.user_context(eqn.source_info.traceback, name_stack=name_stack))
    # Equation context (compute_on, xla_metadata, ...): present on every supported version.
    stack.enter_context(eqn.ctx.manager)
    return stack


def const_args_jaxpr(closed: Any) -> tuple[Any, list[Any]]:
    """Turn a closed jaxpr's consts into leading arguments: ``(closed_without_consts, consts)``.

    Needed where a jaxpr traced inside another trace closes over that trace's tracers: such consts
    cannot stay inside a jaxpr that becomes a ``jit`` parameter. 0.7.2 .. 0.12.
    """
    jaxpr, consts = jaxpr_and_consts(closed)
    if not consts:
        return closed, []
    return _pe.close_jaxpr(_pe.convert_constvars_jaxpr(jaxpr)), consts


def extend_jit_params(params: dict[str, Any], n_new_in: int, n_new_out: int) -> dict[str, Any]:
    """Params for ``jit_p`` after ``n_new_in`` leading inputs and ``n_new_out`` trailing outputs
    were added to its jaxpr; every existing input/output keeps its sharding, layout and donation.

    The per-argument tuples are the same on 0.7.2 .. 0.12.
    """
    p = dict(params)
    lead_in = (_UNSPECIFIED,) * n_new_in
    p["in_shardings"] = lead_in + tuple(p["in_shardings"])
    p["in_layouts"] = (None,) * n_new_in + tuple(p["in_layouts"])
    p["donated_invars"] = (False,) * n_new_in + tuple(p["donated_invars"])
    p["out_shardings"] = tuple(p["out_shardings"]) + (_UNSPECIFIED,) * n_new_out
    p["out_layouts"] = tuple(p["out_layouts"]) + (None,) * n_new_out
    return p


def scan_layout(params: dict[str, Any]) -> tuple[int, int]:
    """``(num_consts, num_carry)`` of a scan equation.

    0.7.2 .. 0.10: explicit ``num_consts``/``num_carry`` params. 0.11+: a flat-tree ``ft_in`` of
    (consts, carry, xs). Drop the first branch when the floor passes 0.10.
    """
    if "num_consts" in params:
        return params["num_consts"], params["num_carry"]
    consts, carry, _ = params["ft_in"].unpack()
    return len(list(consts)), len(list(carry))


def scan_unroll(params: dict[str, Any]) -> int | bool:
    return params.get("unroll", 1)


def _manual_axes(params: dict[str, Any]) -> frozenset[Any]:
    # 0.7.2 .. 0.9 call it manual_axes; 0.10+ newly_manual_axes.
    axes = params.get("newly_manual_axes", params.get("manual_axes"))
    if axes is None:
        raise TypeError(
            f"shard_map equation has neither manual_axes nor newly_manual_axes: {sorted(params)}"
        )
    return frozenset(axes)


def shard_map_params(params: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``jax.shard_map`` that reproduce a ``shard_map`` equation.

    0.7.2 .. 0.9: ``manual_axes``; 0.10+: ``newly_manual_axes``. Both name the axes this
    shard_map makes manual, which ``jax.shard_map`` takes as ``axis_names``.
    """
    axes = _manual_axes(params)
    return {
        "mesh": params["mesh"],
        "in_specs": tuple(params["in_specs"]),
        "out_specs": tuple(params["out_specs"]),
        "axis_names": axes,
        "check_vma": params.get("check_vma", params.get("check_rep", True)),
    }


def shard_map_manual_axes(params: dict[str, Any]) -> tuple[str, ...]:
    """The mesh axes a shard_map equation maps over, in mesh order. 0.7.2 .. 0.12."""
    axes = _manual_axes(params)
    return tuple(a for a in params["mesh"].axis_names if a in axes)
