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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import AbstractMesh, Mesh, PartitionSpec

from . import compat
from ._interpreter_errors import (
    check_bind_args,
    check_emitted,
    check_eval_args,
    check_rule_outputs,
)

Rule = Callable[["Context", Any, list[Any]], Sequence[Any]]


class EmittedStructureError(ValueError):
    """Values emitted inside a higher-order primitive cannot leave it as they are."""


class Context:
    """What a rule sees next to its equation: the interpreter and a place to emit values."""

    def __init__(self, interpreter: Interpreter) -> None:
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


class Interpreter:
    """Evaluate jaxprs with per-primitive rules, recursing into higher-order primitives.

    Args:
        rules: ``{primitive: rule}``; ``rule(ctx, eqn, invals) -> outvals`` (a list, one per
            ``eqn.outvars``; anything else raises ``RuleOutputError`` naming the rule). A rule may call ``ctx.emit(value)`` to add an extra output and
            ``ctx.bind(eqn, invals)`` to evaluate the equation unchanged. Rules for higher-order
            primitives replace the built-in recursion.
        default: rule for primitives without one; default: bind unchanged.

    Subclasses adjust what happens to emitted values at control-flow boundaries by overriding
    :meth:`body_exit`, :meth:`scan_exit`, :meth:`cond_mismatch`, :meth:`while_emitted` and
    :meth:`shard_map_exit`.

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
        self._higher_order: dict[Any, Callable[[Context, Any, list[Any]], list[Any]]] = {
            compat.jit_p: self._jit,
            compat.closed_call_p: self._closed_call,
            compat.scan_p: self._scan,
            compat.while_p: self._while,
            compat.cond_p: self._cond,
            compat.remat_p: self._remat,
            compat.custom_jvp_call_p: self._custom_jvp,
            compat.custom_vjp_call_p: self._custom_vjp,
            compat.shard_map_p: self._shard_map,
        }

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
            rule = self._rule_for(eqn.primitive)
            outs = rule(ctx, eqn, [read(v) for v in eqn.invars])
            check_rule_outputs(rule, eqn, outs)
            for v, x in zip(eqn.outvars, outs):
                if not compat.is_drop_var(v):
                    env[v] = x
        return [read(v) for v in jaxpr.outvars]

    def _rule_for(self, prim: Any) -> Rule:
        if prim in self.rules:
            return self.rules[prim]
        if prim in self._higher_order:
            return self._higher_order[prim]
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

    # --- helpers ---------------------------------------------------------------------------
    def _sub(self, closed: Any, args: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        return self.eval_jaxpr(closed, args)

    def _flat_body(self, closed: Any, box: dict[str, Any]) -> Callable[..., list[Any]]:
        # A Python function for the rewritten body: outputs, then emitted leaves. The emitted
        # structure is static and recorded in ``box`` while the body is traced.
        def body(*args: Any) -> list[Any]:
            outs, emitted = self._sub(closed, args)
            leaves, box["tree"] = jax.tree.flatten(emitted)
            return [*outs, *leaves]

        return body

    def _retrace(self, eqn: Any, closed: Any, invals: Sequence[Any]) -> tuple[Any, list, Any]:
        """The rewritten body as a const-free closed jaxpr, its const args and emitted treedef."""
        box: dict[str, Any] = {}
        with compat.eqn_context(eqn):
            new = jax.make_jaxpr(self._flat_body(closed, box))(*invals)
        new, const_args = compat.const_args_jaxpr(new)
        return new, const_args, box["tree"]

    # --- higher-order primitives -----------------------------------------------------------
    def _rebind_call(
        self, ctx: Context, eqn: Any, invals: list[Any], key: str, extend: Callable | None = None
    ) -> list[Any]:
        """Bind ``eqn``'s primitive again, same params, with ``params[key]`` rewritten.

        ``extend(params, n_consts, n_emitted)`` adapts per-argument params (jit's shardings,
        layouts, donation) to the consts and emitted outputs the rewritten body gained.
        """
        new, const_args, tree = self._retrace(eqn, eqn.params[key], invals)
        params = dict(eqn.params)
        if extend is not None:
            params = extend(params, len(const_args), tree.num_leaves)
        params[key] = new
        with compat.eqn_context(eqn):
            outs = compat.bind(eqn.primitive, [*const_args, *invals], params)
        n_out = len(eqn.outvars)
        ctx.emitted.extend(jax.tree.unflatten(tree, list(outs[n_out:])))
        return list(outs[:n_out])

    def _jit(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        return self._rebind_call(ctx, eqn, invals, "jaxpr", compat.extend_jit_params)

    def _closed_call(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        return self._rebind_call(ctx, eqn, invals, "call_jaxpr")

    def _scan(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        p = eqn.params
        n_consts, n_carry = compat.scan_layout(p)
        consts = invals[:n_consts]
        init, xs = invals[n_consts : n_consts + n_carry], invals[n_consts + n_carry :]
        box: dict[str, Any] = {}

        def body(carry: list[Any], x: list[Any]) -> tuple[list[Any], tuple[list, list]]:
            outs, emitted = self._sub(p["jaxpr"], [*consts, *carry, *x])
            leaves, box["tree"] = jax.tree.flatten(self.body_exit(emitted))
            return outs[:n_carry], (outs[n_carry:], leaves)

        with compat.eqn_context(eqn):
            carry, (ys, leaves) = lax.scan(
                body,
                list(init),
                list(xs),
                length=p["length"],
                reverse=p["reverse"],
                unroll=compat.scan_unroll(p),
            )
        emitted = jax.tree.unflatten(box["tree"], leaves)
        if emitted:
            ctx.emitted.extend(self.scan_exit(emitted, length=p["length"], reverse=p["reverse"]))
        return [*carry, *ys]

    def _while(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        # Re-bound as the same primitive with the same params, not through lax.while_loop:
        # under vmap with a batched predicate the cond jaxpr returns one bool per lane, which
        # the equation accepts and lax.while_loop rejects ('cond_fun must return a boolean
        # scalar').
        p = eqn.params
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        cond_consts, body_consts, init = invals[:nc], invals[nc : nc + nb], invals[nc + nb :]

        def rewrite(part: str, key: str, args: list[Any]) -> tuple[Any, list[Any]]:
            # The rewritten part as a const-free closed jaxpr and its const args, which lead
            # that part's operands (a rule may close over values of the enclosing trace).
            def run(*a: Any) -> list[Any]:
                outs, emitted = self._sub(p[key], a)
                if emitted:
                    self.while_emitted(emitted, part=part)
                return outs

            with compat.eqn_context(eqn):
                return compat.const_args_jaxpr(jax.make_jaxpr(run)(*args))

        cond, cond_args = rewrite("condition", "cond_jaxpr", [*cond_consts, *init])
        body, body_args = rewrite("body", "body_jaxpr", [*body_consts, *init])
        params = {**p, "cond_jaxpr": cond, "cond_nconsts": len(cond_args) + nc}
        params.update(body_jaxpr=body, body_nconsts=len(body_args) + nb)
        operands = [*cond_args, *cond_consts, *body_args, *body_consts, *init]
        with compat.eqn_context(eqn):
            return list(compat.bind(eqn.primitive, operands, params))

    def _cond(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        index, *ops = invals
        branches = eqn.params["branches"]
        seen: dict[int, Any] = {}

        def make(i: int, closed: Any) -> Callable[..., Any]:
            def branch(*operands: Any) -> tuple[list[Any], list[Any]]:
                outs, emitted = self._sub(closed, operands)
                emitted = self.body_exit(emitted)
                leaves, tree = jax.tree.flatten(emitted)
                seen[i] = (tree, [(jnp.shape(x), jnp.result_type(x)) for x in leaves], emitted)
                return outs, leaves

            return branch

        fns = [make(i, b) for i, b in enumerate(branches)]
        try:
            with compat.eqn_context(eqn):
                outs, leaves = _switch_unclamped(index, fns, ops)
        except TypeError as err:
            self._check_branches(seen, len(branches), err)
            raise
        self._check_branches(seen, len(branches), None)
        ctx.emitted.extend(jax.tree.unflatten(seen[0][0], leaves))
        return list(outs)

    def _check_branches(self, seen: dict[int, Any], n: int, err: Exception | None) -> None:
        sigs = [(seen[i][0], seen[i][1]) if i in seen else None for i in range(n)]
        if any(s != sigs[0] for s in sigs):
            try:
                self.cond_mismatch([seen[i][2] if i in seen else None for i in range(n)])
            except Exception as mismatch:
                raise mismatch from err

    def _remat(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        p = eqn.params
        box: dict[str, Any] = {}
        body = self._flat_body(p["jaxpr"], box)
        with compat.eqn_context(eqn):
            outs = jax.checkpoint(body, prevent_cse=p["prevent_cse"], policy=p["policy"])(*invals)
        return self._split_outs(ctx, eqn, outs, box)

    def _split_outs(self, ctx: Context, eqn: Any, outs: Sequence[Any], box: dict) -> list[Any]:
        n = len(eqn.outvars)
        ctx.emitted.extend(jax.tree.unflatten(box["tree"], list(outs[n:])))
        return list(outs[:n])

    def _without_emission(self) -> Interpreter:
        # Same rules, emitted values dropped: for custom-derivative rules, whose logs would
        # otherwise be collected a second time (their primal values come from the primal body).
        return _Discarding(self)

    def _custom_parts(
        self, eqn: Any
    ) -> tuple[dict[str, Any], Callable, int, Interpreter, Callable]:
        """Shared by both custom-derivative rules: the rewritten primal body (outputs, then
        emitted leaves), the output count, a non-emitting interpreter for the user's rule, and the
        original equation as a function (so JAX applies the user's rule to it)."""
        box: dict[str, Any] = {}
        primal = self._flat_body(eqn.params["call_jaxpr"], box)

        def original(*args: Any) -> list[Any]:
            return bind_eqn(eqn, args)

        return box, primal, len(eqn.outvars), self._without_emission(), original

    def _custom_jvp(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        box, primal, n_out, plain, original = self._custom_parts(eqn)
        f = jax.custom_jvp(primal)

        @f.defjvp
        def f_jvp(primals: tuple, tangents: tuple) -> tuple[list, list]:
            # The user's JVP rule, itself rewritten (so tap/strip reach sites inside it).
            (outs, touts), _ = plain.transform(lambda p, t: jax.jvp(original, p, t))(
                primals, tangents
            )
            extra = primal(*primals)[n_out:] if _emits(box, primal, primals) else []
            return [*outs, *extra], [*touts, *map(_zero_tangent, extra)]

        with compat.eqn_context(eqn):
            outs = f(*invals)
        return self._split_outs(ctx, eqn, outs, box)

    def _custom_vjp(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        box, primal, n_out, plain, original = self._custom_parts(eqn)
        f = jax.custom_vjp(primal)

        def fwd(*args: Any) -> tuple[list[Any], Any]:
            # The user's fwd rule, rewritten; its vjp function (a pytree) is the residual.
            (outs, vjp_fn), _ = plain.transform(lambda *a: jax.vjp(original, *a))(*args)
            extra = primal(*args)[n_out:] if _emits(box, primal, args) else []
            return [*outs, *extra], vjp_fn

        def bwd(vjp_fn: Any, cts: list[Any]) -> tuple[Any, ...]:
            return tuple(vjp_fn(list(cts[:n_out])))

        f.defvjp(fwd, bwd)
        with compat.eqn_context(eqn):
            outs = f(*invals)
        return self._split_outs(ctx, eqn, outs, box)

    def _shard_map(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        kw = compat.shard_map_params(eqn.params)
        axes = compat.shard_map_manual_axes(eqn.params)
        box: dict[str, Any] = {}

        def body(*args: Any) -> tuple[tuple[Any, ...], list[Any]]:
            outs, emitted = self._sub(eqn.params["jaxpr"], args)
            # One row per shard: a new leading axis sharded over the manual axes.
            leaves, box["tree"] = jax.tree.flatten(emitted)
            return tuple(outs), [jnp.expand_dims(x, 0) for x in leaves]

        out_specs = (kw.pop("out_specs"), PartitionSpec(axes))
        with compat.eqn_context(eqn):
            outs, leaves = jax.shard_map(body, out_specs=out_specs, **kw)(*invals)
        emitted = jax.tree.unflatten(box["tree"], leaves)
        if emitted:
            ctx.emitted.extend(self.shard_map_exit(emitted, axes=axes, mesh=kw["mesh"]))
        return list(outs)


class _Discarding(Interpreter):
    """An interpreter with another's rules and hooks whose emitted values are dropped."""

    def __init__(self, inner: Interpreter) -> None:
        super().__init__(inner.rules, inner.default)
        self._inner = inner

    def eval_jaxpr(self, closed: Any, args: Sequence[Any]) -> tuple[list[Any], list[Any]]:
        outs, _ = self._inner.eval_jaxpr(closed, args)
        return outs, []


def _switch_unclamped(index: Any, fns: list[Callable], ops: Sequence[Any]) -> Any:
    """``lax.switch(index, fns, *ops)`` without the index clamp ``lax.switch`` adds.

    The index comes from an existing ``cond`` equation, so it is already what that equation
    used; re-binding it unclamped keeps the rewritten program equation-for-equation equal to
    the original (``lax.switch`` itself does the branch tracing and the weak-type joins).
    """
    switch = lambda i, *o: lax.switch(i, fns, *o)
    closed, shapes = jax.make_jaxpr(switch, return_shape=True)(index, *ops)
    jaxpr, consts = compat.jaxpr_and_consts(closed)
    env: dict[Any, Any] = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, [index, *ops]))

    def read(v: Any) -> Any:
        return v.val if compat.is_literal(v) else env[v]

    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if eqn.primitive is lax.clamp_p and eqn.invars[1] is jaxpr.invars[0]:
            outs = [invals[1]]  # (lo, index, hi) -> index
        else:
            outs = bind_eqn(eqn, invals)
        env.update(zip(eqn.outvars, outs))
    flat = [read(v) for v in jaxpr.outvars]
    return jax.tree.unflatten(jax.tree.structure(shapes), flat)


def _emits(box: dict[str, Any], body: Callable[..., Any], args: Sequence[Any]) -> bool:
    # Under differentiation JAX may call the rule without ever tracing the primal body; learn
    # the emitted structure by tracing it abstractly (nothing runs, so no callback fires twice).
    if "tree" not in box:
        jax.eval_shape(body, *args)
    return box["tree"].num_leaves > 0


def _zero_tangent(x: Any) -> Any:
    dtype = jnp.result_type(x)
    if jnp.issubdtype(dtype, jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(jnp.shape(x), dtype=jax.dtypes.float0)
