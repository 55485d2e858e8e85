"""Every use of JAX internals in the repository, in one place.

Nothing else in the repo imports ``jax._src`` or looks at ``jax.__version__``. Each shim says which
JAX versions it serves and when it can go. Where JAX offers a public name we use it; the shims
here cover what has no public spelling (registering rules for a primitive, the parameters of
higher-order primitives, which changed shape across releases).

Supported range: JAX 0.7.2 (the floor: orbax-checkpoint >= 0.12 breaks below it) to 0.12.x.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import jax.extend.core as jex_core
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

# Internal modules used below. 0.7.2 .. 0.12: stable module paths.
from jax._src import core as _core  # noqa: E402
from jax._src import source_info_util as _source_info  # noqa: E402
from jax._src.interpreters import ad as _ad  # noqa: E402
from jax._src.interpreters import batching as _batching  # noqa: E402
from jax._src.interpreters import mlir as _mlir  # noqa: E402
from jax._src.interpreters import partial_eval as _pe  # noqa: E402
from jax._src.sharding_impls import UNSPECIFIED as _UNSPECIFIED  # noqa: E402


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


# --- registering rules for a primitive ----------------------------------------------------------
# The registries below live in jax._src on every supported version; jax.interpreters.* aliases of
# some of them are deprecated. 0.7.2 .. 0.12.


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
    """When tracing-based partial evaluation stages ``prim`` (an operand unknown), use ``update(params)``.

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
    """

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


# --- effects -------------------------------------------------------------------------------------
# 0.7.2 .. 0.12: the effect type registries live in jax._src.effects under these names.
from jax._src import effects as _effects  # noqa: E402


def make_effect(name: str) -> Any:
    """A new unordered effect, allowed inside control flow, custom derivatives and remat.

    An effect keeps an equation alive through dead-code elimination and makes JAX treat the call
    as side-effecting (which also disables the C++ fast dispatch path of ``jax.jit``). Registered
    where JAX registers its debug-callback effect, ``partial_eval_kept_effects`` included (an
    equation with unknown operands and unused outputs stays in the staged jaxpr). 0.7.2 .. 0.12.
    """
    cls = type(name, (_effects.Effect,), {"__repr__": lambda self: name})
    for registry in (
        _effects.lowerable_effects,
        _effects.control_flow_allowed_effects,
        _effects.custom_derivatives_allowed_effects,
        _effects.remat_allowed_effects,
        _effects.partial_eval_kept_effects,
    ):
        registry.add_type(cls)
    return cls()


def make_ordered_effect(name: str) -> Any:
    """A new *ordered* effect: JAX threads a token through every equation that has it.

    Equations with the effect run in program order through ``jit``, ``scan``, ``cond``,
    ``while_loop`` and nested jits; without one XLA may schedule a nested computation's host
    callback before earlier ones. Registered as allowed in control flow, remat and custom
    derivatives and, like ``io_callback(ordered=True)``'s, on more than one device. It is a type
    of its own (not io_callback's effect) because JAX refuses IO effects in a ``vmap`` of
    ``cond`` with a batched predicate, which ``lox.tap`` supports by masking lanes.
    Lower a primitive declaring it with :func:`register_ordered_callback_lowering`.
    0.7.2 .. 0.12: same registries in ``jax._src.effects``.
    """
    cls = type(name, (_effects.Effect,), {"__repr__": lambda self: name})
    for registry in (
        _effects.lowerable_effects,
        _effects.control_flow_allowed_effects,
        _effects.custom_derivatives_allowed_effects,
        _effects.remat_allowed_effects,
        _effects.partial_eval_kept_effects,
        _effects.ordered_effects,
        _effects.shardable_ordered_effects,
    ):
        registry.add_type(cls)
    return cls()


def register_ordered_callback_lowering(prim: Any, impl: Callable[..., Any], effect: Any) -> None:
    """Lower ``prim`` (declaring the ordered ``effect``) as ``impl``, an ordered ``io_callback``.

    ``impl(*args, **params)`` calls ``jax.experimental.io_callback(..., ordered=True)``; the
    rule hands it ``effect``'s token as io_callback's own and passes the token it returns on, so
    ``prim`` sits in ``effect``'s token chain. 0.7.2 .. 0.12: ``LoweringRuleContext.replace``,
    ``TokenSet`` and ``jax._src.callback._OrderedIOEffect`` throughout.
    """
    from jax._src.callback import _OrderedIOEffect as io_effect

    lowered = _mlir.lower_fun(impl, multiple_results=True)

    def rule(ctx: Any, *args: Any, **params: Any) -> Any:
        token = ctx.tokens_in.get(effect)
        sub = ctx.replace(tokens_in=_mlir.TokenSet({io_effect: token}), tokens_out=None)
        out = lowered(sub, *args, **params)
        token = sub.tokens_out.get(io_effect)
        ctx.set_tokens_out(ctx.tokens_in.update_tokens(_mlir.TokenSet({effect: token})))
        return out

    _mlir.register_lowering(prim, rule)


# --- threefry lowering on CPU ----------------------------------------------------------------------
# JAX lowers the threefry2x32 hash on CPU as a rolled 5-step fori_loop (to keep compile times down);
# its carry holds two buffers of the output's size plus a copy, which XLA cannot fuse away, so an
# array of random numbers needs ~3x its own bytes of temporaries while it is generated. The
# unrolled lowering that JAX uses on GPU/TPU computes the same bits elementwise and fuses into the
# consumer: no temporaries. Module path: jax._src.prng on 0.7.2 .. 0.9, jax._src.random.threefry2x32
# from 0.10 (both keep `threefry2x32_p` and `_threefry2x32_lowering(..., use_rolled_loops)`).
import functools  # noqa: E402
import threading  # noqa: E402

try:
    from jax._src.random import threefry2x32 as _threefry  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - JAX 0.7.2 .. 0.9
    from jax._src import prng as _threefry  # type: ignore[no-redef,attr-defined]

_threefry_lock = threading.RLock()
_threefry_depth = 0
_threefry_saved: list[Any] = []


@functools.cache
def _unrolled_threefry_rule() -> Any:
    impl = getattr(_threefry, "_threefry2x32_lowering", None)
    prim = getattr(_threefry, "threefry2x32_p", None)
    if impl is None or prim is None:  # pragma: no cover - a JAX that moved them: keep the default
        return None, None
    rule = _mlir.lower_fun(functools.partial(impl, use_rolled_loops=False), multiple_results=True)
    return prim, rule


@contextlib.contextmanager
def unrolled_threefry_on_cpu() -> Any:
    """Lower threefry on CPU without the rolled loop while the block runs (same bits, no temporaries).

    Only what is lowered inside the block is affected. The rule is process-wide while the block
    runs, so a computation another thread lowers at that moment gets it too; that is harmless,
    since both lowerings compute identical bits. Nested and concurrent use is counted.
    """
    global _threefry_depth
    prim, rule = _unrolled_threefry_rule()
    if prim is None:  # pragma: no cover
        yield
        return
    table = _mlir._platform_specific_lowerings["cpu"]
    with _threefry_lock:
        if _threefry_depth == 0:
            _threefry_saved.append(table.get(prim))
            _mlir.register_lowering(prim, rule, platform="cpu")
        _threefry_depth += 1
    try:
        yield
    finally:
        with _threefry_lock:
            _threefry_depth -= 1
            if _threefry_depth == 0:
                saved = _threefry_saved.pop()
                if saved is None:
                    table.pop(prim, None)
                else:
                    table[prim] = saved


def xla_cpu_xnn_fusion_supported() -> bool:
    """Whether jaxlib's XLA:CPU runs XNNPACK greedy graph fusion on a training step.

    jaxlib 0.7.2 compiles the option but fails at run time ("XNNPACK operation failed: unsupported
    parameter"); 0.10.2 runs it. 0.8/0.9 are untested, so they are left off. Serves JAX < 0.10;
    delete when the floor reaches 0.10.
    """
    import jaxlib

    major, minor = (int(p) for p in jaxlib.__version__.split(".")[:2])
    return (major, minor) >= (0, 10)


def backends_initialized() -> bool:
    """Whether JAX has started its backends (``jax.devices()`` or a first computation did).

    No public spelling on 0.7.2 .. 0.12 (``jax._src.xla_bridge.backends_are_initialized`` on each).
    """
    from jax._src import xla_bridge

    return bool(xla_bridge.backends_are_initialized())
