"""The interpreter behind spool/tap/strip: what happens at a site and at control-flow borders."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn

import jax
from jax.sharding import AbstractMesh, Mesh

from core_primitives import Context, Interpreter, UnknownPrimitiveError, compat

from . import _events
from ._alternatives import resolve
from ._events import Event, LogStructureError
from ._log import lox_p
from ._logdict import logdict
from ._select import Selector
from ._taken import thread_running, thread_taken

SiteRule = Callable[[Context, Any, list[Any]], list[Any]]


class LogInterpreter(Interpreter):
    """Applies ``site_rule`` to selected, non-recomputed log sites; emitted values are Events."""

    def __init__(
        self, selector: Selector, site_rule: SiteRule, *, mask_branches: bool, api: str
    ) -> None:
        super().__init__({lox_p: self._site})
        self.selector = selector
        self.site_rule = site_rule
        self.mask_branches = mask_branches
        self.api = api  # the public function, for messages: "spool", "tap", "strip", "keep"

    def _site(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        if not self.selector(eqn.params):
            return ctx.bind(eqn, invals)  # left in place for an outer transformation
        if eqn.params["recomputed"]:
            return invals  # remat's copy of a site that already ran in the forward pass
        return self.site_rule(ctx, eqn, invals)

    def _cond(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        # tap: each site learns whether its branch was taken (index == branch), so that under
        # an outer vmap, which runs every branch for every lane, it can skip the untaken lanes.
        # spool needs no mask: its events leave the cond as outputs, which vmap selects.
        branches = eqn.params["branches"]
        tagged = thread_taken(branches, self.selector) if self.mask_branches else None
        if tagged is None:
            return super()._cond(ctx, eqn, invals)
        eqn = eqn.replace(params={**eqn.params, "branches": tuple(tagged)})
        return super()._cond(ctx, eqn, [invals[0], *invals])

    def _while(self, ctx: Context, eqn: Any, invals: list[Any]) -> list[Any]:
        # tap: each body site learns whether the loop still runs, so that under an outer vmap
        # with a batched predicate, which runs the body for finished lanes too, it skips them.
        p = eqn.params
        nc, nb = p["cond_nconsts"], p["body_nconsts"]
        body = None
        if self.mask_branches:
            body = thread_running(p["cond_jaxpr"], p["body_jaxpr"], nc, nb, self.selector)
        if body is None:
            return super()._while(ctx, eqn, invals)
        eqn = eqn.replace(params={**p, "body_jaxpr": body, "body_nconsts": nc + nb})
        return super()._while(ctx, eqn, [*invals[:nc], *invals])

    def body_exit(self, emitted: list[Any]) -> list[Any]:
        emitted = resolve(emitted, complete=False)
        return _events.merge(emitted, "inside one loop iteration")

    def scan_exit(self, emitted: list[Any], *, length: int, reverse: bool) -> list[Any]:
        return [_events.fold_leading(e) for e in emitted]

    def shard_map_exit(
        self, emitted: list[Any], *, axes: tuple[str, ...], mesh: Mesh | AbstractMesh
    ) -> list:
        return [_events.fold_leading(e) for e in emitted]

    def cond_mismatch(self, branches: list[Any]) -> NoReturn:
        raise _events.branch_mismatch(branches)

    def while_emitted(self, emitted: list[Any], *, part: str) -> NoReturn:
        keys = sorted({e.name for e in emitted})
        raise LogStructureError(
            f"lox.{self.api}: key(s) {keys} are logged inside the {part} of a while_loop (or a "
            "fori_loop with traced bounds). Its trip count is unknown when tracing, so the "
            "number of events is too. Use lax.scan or fori_loop with Python-int bounds, or "
            "stream the logs with lox.tap, or exclude these keys with spool(f, names=...)."
        )

    def unknown_primitive(self, eqn: Any, inside: list[Any]) -> NoReturn:
        keys = sorted({e.params["name"] for e in inside if e.primitive is lox_p})
        raise UnknownPrimitiveError(
            f"lox.{self.api}: log site(s) {keys} sit inside {compat.primitive_name(eqn)}, a "
            f"higher-order JAX primitive that lox cannot enter on {compat.jax_description()}; "
            f"{self.api} would lose their events without a word, so it stops here. lox knows the "
            f"higher-order primitives of JAX {compat.SUPPORTED_JAX}, with or without the flags "
            f"{', '.join(compat.NEXT_FLAGS)}.\nFix: pin JAX to a supported version (or turn off "
            "the JAX flag that made this primitive, if you set one), move the lox.log calls out "
            "of it, or report this message to the lox maintainers."
        )


def to_logdict(events: list[Event]) -> logdict:
    data, steps = {}, {}
    for e in _events.merge(resolve(events, complete=True), "in one function"):
        treedef, step_keys = e.meta[:2]
        data[e.name] = jax.tree.unflatten(treedef, e.values)
        steps[e.name] = dict(zip(step_keys, e.steps))
    return logdict(data, steps)


def cached(make: Callable[..., Callable[..., Any]]) -> Callable[..., Callable[..., Any]]:
    """Memoise transformed functions so re-creating ``spool(f)`` does not re-trace ``f``.

    Unhashable arguments (a bound method of a list, say) skip the cache rather than fail.
    """
    memo = functools.lru_cache(maxsize=256)(make)

    @functools.wraps(make)
    def get(*args: Any) -> Callable[..., Any]:
        try:
            return memo(*args)
        except TypeError:
            return make(*args)

    return get


__all__ = ["LogInterpreter", "LogStructureError", "cached", "to_logdict"]
