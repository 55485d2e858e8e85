"""``lox.tap``: stream each executed log site to a host callback."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from . import _events
from ._fresh import fresh
from ._select import Filter, Selector
from ._transform import LogInterpreter, cached, to_logdict


def _print(logs: Any) -> None:
    print(logs)


def _per_lane(nbatch: int, tree: Any) -> list[tuple[tuple[int, ...], Any]]:
    """Split leading batch axes so the callback sees one lane at a time, as under vmap(tap)."""
    if nbatch == 0:
        return [((), tree)]
    leaves = jax.tree.leaves(tree)
    shape = np.shape(leaves[0])[:nbatch] if leaves else ()
    return [
        (i, jax.tree.map(lambda x, i=i: x[i], tree)) for i in itertools.product(*map(range, shape))
    ]


def _site_rule(callback: Callable[..., None], with_state: Callable[[], Any] | None):
    def rule(ctx: Any, eqn: Any, invals: list[Any]) -> list[Any]:
        event = _events.from_site(eqn.params, invals)
        nbatch = event.nbatch
        state = with_state() if with_state is not None else None

        def host(event: Any, state: Any, first: Any) -> None:
            if not first:
                return  # jax.checkpoint's recomputation in the backward pass
            for index, lane in _per_lane(nbatch, event):
                if lane.mask and not np.all(lane.mask[0]):
                    continue  # a branch that vmap ran for every lane, not taken in this one
                logs = to_logdict([lane_event(lane)])
                if with_state is None:
                    callback(logs)
                else:
                    callback(jax.tree.map(lambda s, i=index: np.asarray(s)[i], state), logs)

        jax.debug.callback(host, event, state, fresh())
        return invals  # consumed, as with spool

    return rule


def lane_event(e: Any) -> Any:
    return _events.Event(e.name, (*e.meta[:2], 0, ()), e.values, e.steps)


@cached
def _tapped(f: Callable[..., Any], callback: Callable[..., None], key: tuple[Any, ...]) -> Callable:
    names, tags, _ = key
    run = LogInterpreter(
        Selector(names, tags), _site_rule(callback, None), mask_branches=True
    ).transform(f)
    return jax.jit(lambda *a, **k: run(*a, **k)[0], inline=True)


def tap(
    f: Callable[..., Any],
    callback: Callable[[Any], None] | None = None,
    *,
    names: Filter = None,
    tags: Filter = None,
) -> Callable[..., Any]:
    """Transform ``f`` so each executed log site calls ``callback(logdict)`` on the host.

    Callbacks run in program order, at every nesting depth (scan, cond, jit, ...), never for an
    untaken branch and never twice because of ``jax.checkpoint``. Under ``vmap`` the callback is
    called once per lane. Works inside ``while_loop`` (where ``spool`` cannot).

    Args:
        f: the function whose ``lox.log`` calls to stream.
        callback: called with a one-event ``logdict``; default: ``print``.
        names: keys to tap (exact match); ``None`` all; ``[]`` none.
        tags: tap sites with any of these tags; combined with ``names`` by AND.

    Returns:
        ``g`` with the same signature and outputs as ``f``.

    Example:
        >>> import jax.numpy as jnp, lox
        >>> seen = []
        >>> g = lox.tap(lambda x: lox.log({"x": x})["x"] + 1, seen.append)
        >>> float(g(jnp.float32(2.0)))
        3.0
        >>> seen[0]["x"].tolist()
        [2.0]
    """
    return _tapped(f, callback or _print, Selector(names, tags).key())


def tap_with_state(
    f: Callable[..., Any],
    callback: Callable[[Any, Any], None],
    state: Any,
    *,
    names: Filter = None,
    tags: Filter = None,
) -> Callable[..., Any]:
    """Like :func:`tap`, with ``callback(state, logdict)``; ``state`` travels as an argument.

    The state's arrays are callback operands (never a closure over concrete values), so the
    result can be jitted and vmapped over states: each lane's callback gets its lane's state.
    """
    sel = Selector(names, tags)

    def g(*args: Any, **kwargs: Any) -> Any:
        rule = _site_rule(callback, lambda: state)
        return LogInterpreter(sel, rule, mask_branches=True).transform(f)(*args, **kwargs)[0]

    return g
