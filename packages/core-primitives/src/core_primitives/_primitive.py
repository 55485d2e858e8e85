"""Identity-like custom primitives in a few lines."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from . import compat

BatchRule = Callable[..., tuple[Sequence[Any], Sequence[int | None]]]
JvpRule = Callable[..., tuple[Sequence[Any], Sequence[Any]]]
TransposeRule = Callable[..., Sequence[Any]]


def _check_name_and_rules(name: Any, **rules: Any) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(
            f"identity_primitive: name must be a non-empty str (shown in jaxprs), got {name!r}."
        )
    for what, rule in rules.items():
        if rule is not None and not callable(rule):
            raise TypeError(
                f"identity_primitive({name!r}): {what} must be a callable rule or None (the "
                f"default), got {rule!r:.60} ({type(rule).__name__})."
            )


def identity_primitive(
    name: str,
    *,
    batch: BatchRule | None = None,
    jvp: JvpRule | None = None,
    transpose: TransposeRule | None = None,
    effect: Any = None,
    keep_alive: bool = False,
    differentiated_effect: Any = None,
    recompute_params: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Any:
    """Define a primitive that returns its operands unchanged: a marker in the jaxpr.

    Such a primitive lets a library leave a *site* in traced code (a log call, a tag) that a
    later jaxpr rewrite finds by primitive and params, while costing nothing when no rewrite runs.
    All rules get and return lists (``multiple_results=True``).

    Args:
        name: the primitive's name as printed in jaxprs.
        batch: ``batch(args, dims, **params) -> (outs, out_dims)`` with ``dims`` entries ``int`` or
            ``None``. Default: bind again on the batched operands, dims unchanged.
        jvp: ``jvp(primals, tangents, **params) -> (primal_outs, tangent_outs)`` (tangents
            instantiated). Default: bind on the primals only, tangents pass through, so the site
            sees primal values once and never blocks autodiff.
        transpose: ``transpose(cts, *args, **params) -> cts_in``. Default: cotangents pass through.
        effect: an effect from :func:`core_primitives.compat.make_effect`, or ``None``.
        keep_alive: never drop the equation in dead-code elimination even without an effect.
        differentiated_effect: an effect the site takes once differentiated. The default JVP
            rule then binds the primal with ``differentiated=True``, and only such an equation
            carries the effect. Partial evaluation (``linearize``/``vjp``/``grad``, inside
            ``scan``, ``cond``, ``jit``, ``checkpoint``...) keeps an equation only for its used
            outputs or a kept effect, so without one a differentiated site with an unused
            result vanishes; ``keep_alive`` reaches only plain dead-code elimination. An
            untransformed site stays effect-free, which keeps ``jax.jit``'s fast C++ dispatch.
        recompute_params: under ``jax.checkpoint``, the recomputed copy of a site gets
            ``recompute_params(params)`` so rewrites can tell it from the original.

    Returns:
        The ``jax.extend.core.Primitive``; call ``prim.bind(*operands, **params)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> tag_p = identity_primitive("doc_tag")
        >>> jax.grad(lambda x: tag_p.bind(x * 2.0, label="y")[0])(1.0)
        Array(2., dtype=float32, weak_type=True)
        >>> jax.make_jaxpr(lambda x: tag_p.bind(x, label="y"))(1.0).eqns[0].primitive.name
        'doc_tag'
    """
    _check_name_and_rules(name, batch=batch, jvp=jvp, transpose=transpose)
    prim = compat.Primitive(name)
    prim.multiple_results = True
    prim.def_impl(lambda *args, **params: list(args))
    if differentiated_effect is not None:
        marked = {differentiated_effect}
        prim.def_effectful_abstract_eval(
            lambda *avals, **params: (
                list(avals),
                marked if params.get("differentiated") else set(),
            )
        )
    elif effect is None:
        prim.def_abstract_eval(lambda *avals, **params: list(avals))
    else:
        prim.def_effectful_abstract_eval(lambda *avals, **params: (list(avals), {effect}))
    compat.register_lowering(prim, lambda *args, **params: list(args), multiple_results=True)
    compat.register_batching(prim, batch or _default_batch(prim))
    compat.register_jvp(prim, jvp or _default_jvp(prim, differentiated_effect is not None))
    if differentiated_effect is not None:
        # A site that partial evaluation stages without a JVP having run (the primal inside a
        # custom_jvp rule, a scan's loop-invariant hoisting) needs the effect as well.
        compat.register_staged_params(prim, lambda p: {**p, "differentiated": True})
    compat.register_transpose(prim, transpose or _pass_through_transpose)
    if keep_alive:
        compat.register_keep_alive(prim)
    if recompute_params is not None:
        compat.register_no_recompute(prim, mark=recompute_params)
    return prim


def _default_batch(prim: Any) -> BatchRule:
    def rule(args: Sequence[Any], dims: Sequence[int | None], **params: Any) -> Any:
        return prim.bind(*args, **params), list(dims)

    return rule


def _default_jvp(prim: Any, mark: bool = False) -> JvpRule:
    def rule(primals: Sequence[Any], tangents: Sequence[Any], **params: Any) -> Any:
        if mark:
            params = {**params, "differentiated": True}
        return prim.bind(*primals, **params), list(tangents)

    return rule


def _pass_through_transpose(cts: Sequence[Any], *args: Any, **params: Any) -> Sequence[Any]:
    # Identity is its own transpose. Non-linear operands get None, as JAX expects.
    return [ct if compat.is_undefined_primal(a) else None for ct, a in zip(cts, args)]
