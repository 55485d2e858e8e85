"""A jaxpr interpreter: rules keyed by primitive, recursion through higher-order primitives.

The interpreter evaluates a jaxpr equation by equation under whatever trace is current (so the
result is itself traced, jitted or differentiated as usual). A *rule* may replace an equation and
may *emit* extra values; emitted values leave every enclosing higher-order primitive as extra
outputs (stacked by ``scan``, selected by ``cond``, concatenated by ``shard_map``) and come back to
the caller next to the function's outputs. That is all ``lox.spool`` needs.

Higher-order primitives are re-bound with rewritten bodies through public APIs (``lax.scan``,
``jax.checkpoint``, ``jax.custom_jvp``/``custom_vjp``, ``jax.shard_map``), or by binding the same
primitive with the same params and freshly traced jaxprs: ``jit`` and ``closed_call`` (keeps
donation, shardings, layouts and the name exactly), ``while`` (a predicate vmap left batched is
not a boolean scalar, which ``lax.while_loop`` would reject) and ``cond`` (traced by
``lax.switch``, bound without the index clamp ``lax.switch`` adds, so no equation is added).
Jaxprs are only read: JAX caches them, so mutating one would corrupt later, unrelated calls.
The rules for higher-order primitives are in ``_higher_order.py``; the hooks at their borders
(``body_exit`` and the others) are methods of ``Interpreter``, for subclasses to override.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import jax
from jax.sharding import AbstractMesh, Mesh

from . import compat
from ._context import Context, Rule, bind_eqn
from ._higher_order import HigherOrderRules
from ._interpreter_errors import EmittedStructureError, check_eval_args, check_rule_outputs
from ._unknown_primitive import rewritten_inside, unknown_primitive_error


def _default_rule(ctx: Context, eqn: Any, invals: list[Any]) -> Sequence[Any]:
    return bind_eqn(eqn, invals)


def _split(j: Any) -> tuple[Any, list[Any]]:
    # Higher-order params hold closed jaxprs (scan, cond, while, jit) or open ones (remat,
    # shard_map); from JAX 0.11 the two are one class.
    if isinstance(j, compat.ClosedJaxpr):
        return compat.jaxpr_and_consts(j)
    return j, []


def _checked_rules(rules: Mapping[Any, Rule] | None) -> dict[Any, Rule]:
    if rules is None:
        return {}
    if not isinstance(rules, Mapping):
        raise TypeError(
            f"Interpreter: rules must be a mapping {{primitive: rule}}, got "
            f"{type(rules).__name__}. Example: Interpreter({{lax.sin_p: my_rule}})."
        )
    for prim, rule in rules.items():
        if not isinstance(prim, compat.Primitive):
            raise TypeError(
                f"Interpreter: rules are keyed by primitive objects (e.g. lax.sin_p), got the key "
                f"{prim!r} ({type(prim).__name__}). Names do not work: several primitives can "
                "share one."
            )
        if not callable(rule):
            raise TypeError(
                f"Interpreter: the rule for {prim} must be callable fn(ctx, eqn, invals) -> "
                f"outvals, got {rule!r:.60} ({type(rule).__name__})."
            )
    return dict(rules)


class Interpreter(HigherOrderRules):
    """Evaluate jaxprs with per-primitive rules, recursing into higher-order primitives.

    Args:
        rules: ``{primitive: rule}``; ``rule(ctx, eqn, invals) -> outvals`` (a list, one per
            ``eqn.outvars``; anything else raises ``RuleOutputError`` naming the rule). A rule may
            call ``ctx.emit(value)`` to add an extra output and
            ``ctx.bind(eqn, invals)`` to evaluate the equation unchanged. Rules for higher-order
            primitives replace the built-in recursion.
        default: rule for primitives without one; default: bind unchanged.

    Subclasses adjust what happens to emitted values at control-flow boundaries by overriding
    :meth:`body_exit`, :meth:`scan_exit`, :meth:`cond_mismatch`, :meth:`while_emitted` and
    :meth:`shard_map_exit`, and what an unknown higher-order primitive with ruled equations
    inside raises (:meth:`unknown_primitive`; ``UnknownPrimitiveError`` by default).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jax import lax
        >>> def double_sin(ctx, eqn, invals):
        ...     (x,) = invals
        ...     ctx.emit(x)                      # an extra output from inside the scan
        ...     return [jnp.sin(x) * 2]
        >>> interp = Interpreter({lax.sin_p: double_sin})
        >>> f = lambda xs: lax.scan(lambda c, x: (c + jnp.sin(x), None), 0.0, xs)[0]
        >>> out, emitted = interp.transform(f)(jnp.zeros(4))
        >>> float(out), emitted[0].shape
        (0.0, (4,))
    """

    def __init__(self, rules: Mapping[Any, Rule] | None = None, default: Rule | None = None):
        self.rules: dict[Any, Rule] = _checked_rules(rules)
        if default is not None and not callable(default):
            raise TypeError(
                f"Interpreter: default must be a rule fn(ctx, eqn, invals) -> outvals or None, "
                f"got {default!r:.60} ({type(default).__name__})."
            )
        self.default: Rule = default or _default_rule
        self._higher_order = self._higher_order_rules()

    # --- entry points ----------------------------------------------------------------------
    def transform(self, fn: Callable[..., Any]) -> Callable[..., tuple[Any, list[Any]]]:
        """``fn`` rewritten: ``g(*args, **kwargs) -> (fn's output, emitted values)``."""
        if not callable(fn):
            raise TypeError(
                f"Interpreter.transform: fn must be callable, got {fn!r:.60} "
                f"({type(fn).__name__}). Pass the function itself, not its result."
            )

        def g(*args: Any, **kwargs: Any) -> tuple[Any, list[Any]]:
            closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args, **kwargs)
            flat = jax.tree.leaves((args, kwargs))
            outs, emitted = self.eval_jaxpr(closed, flat)
            return jax.tree.unflatten(jax.tree.structure(shapes), outs), emitted

        return g

    def eval_jaxpr(self, closed: Any, args: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        """Evaluate a (closed or open) jaxpr on ``args``: ``(outputs, emitted values)``.

        Raises:
            TypeError: ``closed`` is not a jaxpr, or ``args`` has not one value per input.
            RuleOutputError: a rule returned other than one value per equation output.
        """
        jaxpr, consts = _split(closed)
        check_eval_args(jaxpr, args)
        ctx = Context(self)
        outs = self._eval(ctx, jaxpr, consts, list(args))
        return outs, ctx.emitted

    def _eval(self, ctx: Context, jaxpr: Any, consts: Sequence[Any], args: Sequence[Any]) -> list:
        env: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            return v.val if compat.is_literal(v) else env[v]

        env.update(zip(jaxpr.constvars, consts))
        env.update(zip(jaxpr.invars, args))
        for eqn in jaxpr.eqns:
            rule = self._rule_for(eqn)
            outs = rule(ctx, eqn, [read(v) for v in eqn.invars])
            check_rule_outputs(rule, eqn, outs)
            for v, x in zip(eqn.outvars, outs):
                if not compat.is_drop_var(v):
                    env[v] = x
        return [read(v) for v in jaxpr.outvars]

    def _rule_for(self, eqn: Any) -> Rule:
        prim = eqn.primitive
        if prim in self.rules:
            return self.rules[prim]
        rule = self._higher_order.get(compat.rule_key(eqn))
        if rule is not None:
            return rule
        if self.rules:
            # A higher-order primitive without a rule is bound unchanged: equations inside it
            # that a rule would rewrite would be skipped silently. Refuse that instead.
            jaxprs = compat.sub_jaxprs(eqn.params)
            inside = rewritten_inside(jaxprs, self.rules) if jaxprs else None
            if inside:
                self.unknown_primitive(eqn, inside)
        return self.default

    # --- hooks for emitted values at boundaries (override in subclasses) --------------------
    def body_exit(self, emitted: list[Any]) -> list[Any]:
        """Called on the values a scan body or cond branch emitted, before they leave it."""
        return emitted

    def scan_exit(self, emitted: list[Any], *, length: int, reverse: bool) -> list[Any]:
        """Called after a scan; every leaf has a new leading axis of ``length`` in index order."""
        return emitted

    def cond_mismatch(self, branches: list[Any]) -> NoReturn:
        """Branches emitted values of different structures; ``branches[i]`` describes branch i."""
        lines = [f"  branch {i}: {b}" for i, b in enumerate(branches)]
        raise EmittedStructureError(
            "The branches of a cond/switch emitted values of different structures, shapes or "
            "dtypes, so they cannot become outputs of the cond:\n"
            + "\n".join(lines)
            + "\nMake every branch emit the same structure."
        )

    def while_emitted(self, emitted: list[Any], *, part: str) -> NoReturn:
        """Values were emitted inside a while loop, whose trip count is unknown at trace time."""
        raise EmittedStructureError(
            f"Values were emitted inside the {part} of a while_loop; a while loop's trip count "
            "is unknown when tracing, so they cannot be stacked into outputs. Use lax.scan (or "
            "fori_loop with static bounds), or a transformation that does not emit."
        )

    def shard_map_exit(
        self, emitted: list[Any], *, axes: tuple[str, ...], mesh: Mesh | AbstractMesh
    ) -> list:
        """After a shard_map; each leaf gained a leading axis over ``axes`` (one row per shard)."""
        return emitted

    def unknown_primitive(self, eqn: Any, inside: list[Any]) -> NoReturn:
        """``eqn``'s primitive holds a jaxpr no rule enters, with equations of ruled primitives
        (``inside``, in program order) in it; binding it unchanged would skip them."""
        raise unknown_primitive_error(eqn, inside)

    # --- emitted values dropped ----------------------------------------------------------
    def _without_emission(self) -> Interpreter:
        # Same rules, emitted values dropped: for custom-derivative rules, whose logs would
        # otherwise be collected a second time (their primal values come from the primal body).
        return _Discarding(self)


class _Discarding(Interpreter):
    """An interpreter with another's rules and hooks whose emitted values are dropped."""

    def __init__(self, inner: Interpreter) -> None:
        super().__init__(inner.rules, inner.default)
        self._inner = inner

    def eval_jaxpr(self, closed: Any, args: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        outs, _ = self._inner.eval_jaxpr(closed, args)
        return outs, []
