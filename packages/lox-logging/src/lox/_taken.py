"""Tell every log site in a cond branch whether its branch was taken (and in a while body,
whether its loop is still running).

``vmap`` of a cond with a batched predicate runs every branch for every lane and then selects
the outputs, so the cond is gone before ``spool``/``tap`` see the jaxpr, and each branch's sites
look executed. Before that happens we rewrite the branches: each gets the branch index as an
extra operand and binds its sites with a ``taken`` tag ``(group, branch, n_branches)`` and a
mask operand ``index == branch`` (per lane once batched). ``spool`` then selects among the
alternatives (``_alternatives``) and ``tap`` skips lanes whose mask is False. The same rewrite
serves ``tap``'s own cond rule, so ``vmap(tap(f))`` skips untaken lanes too.

Untransformed code pays nothing at run time: the masks only feed sites, which XLA drops.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core_primitives import Context, Interpreter, compat

from ._log import lox_p

_group_ids = itertools.count()


Select = Callable[[dict[str, Any]], bool]


def _every_site(params: dict[str, Any]) -> bool:
    return True


class _Tagger(Interpreter):
    """Re-binds selected sites with one more ``taken`` tag, AND-ing ``flag`` into their mask."""

    def __init__(self, flag: Any, tag: tuple[int, int, int], select: Select) -> None:
        super().__init__({lox_p: self._site})
        self.flag = flag
        self.tag = tag
        self.select = select

    def _site(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        p = eqn.params
        if not self.select(p):
            return ctx.bind(eqn, invals)
        args = list(invals)
        # A site inside a vmap within the branch has nbatch batch axes on every operand.
        batch = jnp.shape(args[0])[: p["nbatch"]] if args else ()
        mask = jnp.broadcast_to(self.flag, batch)
        if p["taken"]:
            mask = jnp.logical_and(args.pop(), mask)
        outs = lox_p.bind(*args, mask, **{**p, "taken": (*p["taken"], self.tag)})
        return list(outs[: len(eqn.outvars)])


def has_sites(closed: Any, select: Select = _every_site) -> bool:
    """Whether a jaxpr holds a selected log site at any depth."""
    jaxpr = closed
    if isinstance(closed, compat.ClosedJaxpr):
        jaxpr, _ = compat.jaxpr_and_consts(closed)
    return any(
        (e.primitive is lox_p and select(e.params))
        or any(has_sites(j, select) for j in compat.sub_jaxprs(e.params))
        for e in jaxpr.eqns
    )


def thread_taken(branches: Sequence[Any], select: Select = _every_site) -> list[Any] | None:
    """Branches taking the index as a new first operand, their selected sites tagged.

    ``None`` when no branch has a selected site. vmap tags every site (any later spool/tap may
    want it); ``tap`` only those it consumes: a tag left on a site inside a cond that stays a
    cond would give its branches different event structures for an outer ``spool``.
    """
    if not any(has_sites(b, select) for b in branches):
        return None
    group, n = next(_group_ids), len(branches)
    return [_tagged(b, (group, i, n), select) for i, b in enumerate(branches)]


def _tagged(branch: Any, tag: tuple[int, int, int], select: Select) -> Any:
    def run(index: Any, *ops: Any) -> list[Any]:
        outs, _ = _Tagger(index == tag[1], tag, select).eval_jaxpr(branch, ops)
        return outs

    avals = [jax.ShapeDtypeStruct((), np.int32), *map(_spec, branch.in_avals)]
    return jax.make_jaxpr(run)(*avals)


def thread_running(
    cond: Any, body: Any, cond_nconsts: int, body_nconsts: int, select: Select = _every_site
) -> Any | None:
    """A while body taking the cond consts as new leading consts, its selected sites masked
    with whether the loop is still running (the condition on the body's carry).

    ``vmap`` of a while_loop with a batched predicate runs the body for every lane until the
    last is done, keeping finished lanes' carries; on such a carry the condition is False, so
    ``tap`` skips that lane. Otherwise the mask is True wherever the body runs. ``None`` when
    the body has no selected site.
    """
    if not has_sites(body, select):
        return None
    tag = (next(_group_ids), 0, 1)

    def run(*args: Any) -> list[Any]:
        cond_consts, rest = args[:cond_nconsts], args[cond_nconsts:]
        carry = rest[body_nconsts:]
        # The condition again, its own sites inert (they ran where the loop evaluated it).
        (running,), _ = _INERT.eval_jaxpr(cond, [*cond_consts, *carry])
        outs, _ = _Tagger(running, tag, select).eval_jaxpr(body, rest)
        return outs

    avals = [*cond.in_avals[:cond_nconsts], *body.in_avals]
    return jax.make_jaxpr(run)(*map(_spec, avals))


_INERT = Interpreter({lox_p: lambda ctx, eqn, invals: invals[: len(eqn.outvars)]})


def _spec(aval: Any) -> Any:
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=aval.weak_type)


compat.wrap_batched_cond(thread_taken)
compat.wrap_batched_while(thread_running)
