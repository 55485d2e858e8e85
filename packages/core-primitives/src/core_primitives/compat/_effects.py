"""Effects: new effect types and the lowering of a primitive into an ordered effect's token chain.

0.7.2 .. 0.12: the effect type registries live in ``jax._src.effects`` under the names used here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jax._src import effects as _effects
from jax._src.interpreters import mlir as _mlir


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
