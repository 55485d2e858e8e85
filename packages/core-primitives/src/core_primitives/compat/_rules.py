"""Registering rules for a primitive: lowering, batching, differentiation, partial evaluation.

The registries live in ``jax._src`` on every supported version (0.7.2 .. 0.12); the
``jax.interpreters.*`` aliases of some of them are deprecated.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from jax._src.interpreters import ad as _ad
from jax._src.interpreters import batching as _batching
from jax._src.interpreters import mlir as _mlir
from jax._src.interpreters import partial_eval as _pe

from ._jaxpr import cond_p, is_literal, while_p

_remat3: Any = None
try:  # 0.10+: the remat transform of jax_remat3 (jax.checkpoint as a hijax primitive)
    from jax._src.interpreters import (  # type: ignore[attr-defined,unused-ignore]
        remat as _remat3_module,
    )

    _remat3 = _remat3_module
except ImportError:  # pragma: no cover - JAX 0.7.2 .. 0.9
    pass


def register_lowering(prim: Any, impl: Callable[..., Any], *, multiple_results: bool) -> None:
    _mlir.register_lowering(prim, _mlir.lower_fun(impl, multiple_results=multiple_results))


def register_batching(prim: Any, rule: Callable[..., Any]) -> None:
    """``rule(args, dims, **params) -> (outs, out_dims)``; ``dims`` entries are int or None."""

    def wrapped(args: Sequence[Any], dims: Sequence[Any], **params: Any) -> Any:
        not_mapped = getattr(_batching, "not_mapped", None)
        dims = [None if d is not_mapped else d for d in dims]
        return rule(args, dims, **params)

    _batching.primitive_batchers[prim] = wrapped


def register_batching_always(prim: Any, rule: Callable[..., Any]) -> None:
    """Like :func:`register_batching`, but the rule runs under every ``vmap`` the primitive is
    bound in, even when no operand is batched: ``rule(axis_size, args, dims, **params)``.

    A plain batching rule is skipped when no operand is batched, so a marker bound on a constant
    inside ``vmap`` never learns about the vmap. 0.7.2 .. 0.12: "fancy" batchers (``AxisData``
    first) are called whatever the operands, unless the primitive is in ``skippable_batchers``.
    """

    def wrapped(axis_data: Any, args: Sequence[Any], dims: Sequence[Any], **params: Any) -> Any:
        not_mapped = getattr(_batching, "not_mapped", None)  # 0.7.2 .. 0.9; None from 0.10
        dims = [None if d is not_mapped else d for d in dims]
        return rule(axis_data.size, args, dims, **params)

    _batching.fancy_primitive_batchers[prim] = wrapped


def wrap_batched_cond(rewrite: Callable[[Sequence[Any]], Sequence[Any] | None]) -> None:
    """Let ``rewrite`` adapt a cond's branches before vmap evaluates all of them for every lane.

    With a batched index JAX's cond batching rule runs every branch and selects the outputs, so
    nothing after it can tell which branch a lane took. ``rewrite(branches)`` returns ``None``
    (keep the cond as it is) or new closed jaxprs taking the index as an extra first operand.
    0.7.2 .. 0.12: cond's rule is ``rule(axis_data, args, dims, *, branches, **params)`` in
    ``fancy_primitive_batchers``, index first. Calling this twice wraps once.
    """
    original = _batching.fancy_primitive_batchers[cond_p]
    original = getattr(original, "_unwrapped", original)
    not_mapped = getattr(_batching, "not_mapped", None)  # 0.7.2 .. 0.9; None from 0.10

    def rule(axis_data: Any, args: Sequence[Any], dims: Sequence[Any], **params: Any) -> Any:
        # A platform-dependent cond gets an unbatched index inside JAX's rule: leave it be.
        if dims[0] is not not_mapped and "branches_platforms" not in params:
            new = rewrite(params["branches"])
            if new is not None:
                params = {**params, "branches": tuple(new)}
                args, dims = [args[0], *args], [dims[0], *dims]
        return original(axis_data, args, dims, **params)

    rule._unwrapped = original  # type: ignore[attr-defined]
    _batching.fancy_primitive_batchers[cond_p] = rule


def wrap_batched_while(rewrite: Callable[[Any, Any, int, int], Any | None]) -> None:
    """Let ``rewrite`` adapt a while_loop's body before vmap batches the loop.

    With a batched predicate JAX's while batching rule runs the body for every lane until the
    last is done and keeps finished lanes' carries, so nothing inside the body can tell which
    lanes still run. ``rewrite(cond_jaxpr, body_jaxpr, cond_nconsts, body_nconsts)`` returns
    ``None`` (keep the loop) or a new body taking the cond consts as extra leading consts.
    0.7.2 .. 0.12: while's rule is ``rule(axis_data, args, dims, *, cond_nconsts, cond_jaxpr,
    body_nconsts, body_jaxpr)`` in ``fancy_primitive_batchers``, operands ordered cond consts,
    body consts, carry. Calling this twice wraps once.
    """
    original = _batching.fancy_primitive_batchers[while_p]
    original = getattr(original, "_unwrapped", original)

    def rule(axis_data: Any, args: Sequence[Any], dims: Sequence[Any], **params: Any) -> Any:
        nc, nb = params["cond_nconsts"], params["body_nconsts"]
        new = rewrite(params["cond_jaxpr"], params["body_jaxpr"], nc, nb)
        if new is not None:
            params = {**params, "body_jaxpr": new, "body_nconsts": nc + nb}
            args, dims = [*args[:nc], *args], [*dims[:nc], *dims]
        return original(axis_data, args, dims, **params)

    rule._unwrapped = original  # type: ignore[attr-defined]
    _batching.fancy_primitive_batchers[while_p] = rule


def register_jvp(prim: Any, rule: Callable[..., Any]) -> None:
    """``rule(primals, tangents, **params) -> (primal_out, tangent_out)``; zeros instantiated."""

    def wrapped(primals: Sequence[Any], tangents: Sequence[Any], **params: Any) -> Any:
        tangents = [instantiate_zero(t, p) for p, t in zip(primals, tangents)]
        return rule(primals, tangents, **params)

    _ad.primitive_jvps[prim] = wrapped


def register_transpose(prim: Any, rule: Callable[..., Any]) -> None:
    """``rule(cts, *args, **params) -> cts_in``; symbolic-zero cotangents are instantiated."""

    def wrapped(cts: Any, *args: Any, **params: Any) -> Any:
        cts = [
            instantiate_zero(ct, None, aval=getattr(a, "aval", None)) for ct, a in zip(cts, args)
        ]
        return rule(cts, *args, **params)

    _ad.primitive_transposes[prim] = wrapped


def instantiate_zero(t: Any, primal: Any, aval: Any = None) -> Any:
    """Materialise a symbolic ``ad.Zero`` tangent/cotangent as an array. 0.7.2 .. 0.12."""
    if type(t) is _ad.Zero:
        return _ad.instantiate_zeros(t)
    return t


def is_undefined_primal(x: Any) -> bool:
    """Whether a transpose-rule argument is the linear input being transposed. 0.7.2 .. 0.12."""
    return _ad.is_undefined_primal(x)


def register_keep_alive(prim: Any) -> None:
    """Never let dead-code elimination drop an equation of ``prim`` even if its outputs are unused.

    Used for identity primitives that mark a site (a log call) without an effect: an effect would
    take every jitted call off JAX's C++ fast dispatch path. 0.7.2 .. 0.12.
    """

    # 0.7.2 .. 0.10: rule(used_outputs, eqn); 0.12: rule(used_outputs, live_ins, eqn).
    def rule(used_outputs: list[bool], *rest: Any) -> tuple[list[bool], Any]:
        eqn = rest[-1]
        return [True] * len(eqn.invars), eqn

    _pe.dce_rules[prim] = rule


def register_staged_params(prim: Any, update: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """When tracing-based partial evaluation stages ``prim`` (an operand unknown), use
    ``update(params)``.

    ``partial_eval_jaxpr_nounits`` (scan's and custom_jvp's rules under ``grad``, loop-invariant
    hoisting in a scan) builds the staged jaxpr from what its outputs reach, plus equations with
    a kept effect; a marker whose output nobody reads is dropped unless ``update`` gives it one.
    All-known equations are evaluated as they are. 0.7.2 .. 0.12: ``custom_partial_eval_rules``
    rules are ``rule(trace, *tracers, **params)`` and ``JaxprTrace.default_process_primitive``
    takes ``(prim, tracers, params)``.
    """

    def rule(trace: Any, *tracers: Any, **params: Any) -> Any:
        if any(not t.pval.is_known() for t in tracers):
            params = update(params)
        return trace.default_process_primitive(prim, tracers, params)

    _pe.custom_partial_eval_rules[prim] = rule


def register_no_recompute(
    prim: Any, *, mark: Callable[[dict[str, Any]], dict[str, Any]] | None
) -> None:
    """Under remat, a recomputed copy of ``prim`` gets ``mark(params)`` instead of ``params``.

    Remat's partial evaluation copies known equations into the backward pass to recompute them;
    for a site marker that copy must be told apart so transformations do not see it twice.
    ``mark=None`` (for a primitive without outputs, such as a host callback): there is no copy,
    the equation runs once, in the forward pass, whatever the checkpoint policy (JAX's own rule
    for ``jax.debug.callback`` runs it in both passes).
    0.7.2 .. 0.12: ``partial_eval_jaxpr_custom_rules`` has the same signature throughout.
    With ``jax_remat3`` (0.10+), ``jax.checkpoint`` recomputes through its own remat transform;
    registered in its ``rules`` too: 0.12's take ``(trace, *args, **params)`` and return
    ``(outputs, residuals, rem)``, ``rem(residuals, *args)`` rebuilding the outputs in the backward
    pass; 0.10/0.11's take ``(policy, *args, **params)`` and return ``(outputs, rem)``.
    """
    if _remat3 is not None:
        _remat3.rules[prim] = _remat3_rule(prim, mark)

    def rule(saveable: Any, unks_in: Sequence[bool], inst_in: Sequence[bool], eqn: Any) -> Any:
        # Inputs the staged copy reads must be available there: save those not already present,
        # exactly as JAX does for a recomputed equation.
        res = [v for v, inst in zip(eqn.invars, inst_in) if not inst and not is_literal(v)]
        n = len(eqn.outvars)
        if any(unks_in):
            # Depends on backward-pass values: it runs once, in the staged jaxpr.
            return None, eqn, [True] * n, [True] * n, res
        # Known: runs in the forward pass; the staged copy only re-creates the values.
        if mark is None:
            assert n == 0, f"{prim} has outputs: the backward pass would need a copy"
            return eqn, None, [], [], []
        staged = eqn.replace(params=mark(dict(eqn.params)))
        return eqn, staged, [False] * n, [True] * n, res

    _pe.partial_eval_jaxpr_custom_rules[prim] = rule


def _remat3_rule(prim: Any, mark: Callable[[dict[str, Any]], dict[str, Any]] | None) -> Any:
    # The forward pass binds the equation as it is; the backward pass gets the marked copy
    # (nothing at all for a primitive without outputs), never a second unmarked one.
    def forward(args: Sequence[Any], params: dict[str, Any]) -> tuple[Any, Callable[..., Any]]:
        outs = prim.bind(*args, **params)
        if mark is None:
            assert not outs, f"{prim} has outputs: the backward pass would need a copy"
            return outs, lambda *a: []
        marked = mark(dict(params))
        return outs, lambda *a: prim.bind(*a, **marked)

    if _REMAT3_HAS_RESIDUALS:  # 0.12: rule(trace, *args) -> (outs, residuals, rem(res, *args))

        def rule(trace: Any, *args: Any, **params: Any) -> Any:
            outs, rem = forward(args, params)
            return outs, (), lambda res, *a: rem(*a)

        return rule
    # 0.10 .. 0.11: rule(policy, *args) -> (outs, rem(*args))
    return lambda policy, *args, **params: forward(args, params)


# 0.12's remat transform passes residuals to rem (remat_transform gained custom_vjp_rules with it).
_REMAT3_HAS_RESIDUALS = _remat3 is not None and "custom_vjp_rules" in str(
    inspect.signature(_remat3.remat_transform)
)
