"""``lox.tap``: stream each executed log site to a host callback."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from . import _events
from ._callback import host_callback
from ._logdict import logdict, trusted
from ._select import Filter, Selector, require_callable
from ._transform import LogInterpreter, cached


def _print(logs: Any) -> None:
    print(logs)


def _site_rule(callback: Callable[..., None], with_state: Callable[[], Any] | None):
    def rule(ctx: Any, eqn: Any, invals: list[Any]) -> list[Any]:
        event = _events.from_site(eqn.params, invals)
        state, state_tree = jax.tree.flatten(with_state() if with_state is not None else None)
        host = _host(callback, event, state_tree if with_state is not None else None)
        host_callback(host, [*event.leaves(), *state])
        return invals  # consumed, as with spool

    return rule


def _host(callback: Callable[..., None], event: _events.Event, state_tree: Any) -> Callable:
    """The host side of one site: a closure that does only what must happen per event.

    Everything a checked ``logdict(...)`` would verify (key, structure, steps, one event per
    leaf) was fixed when the site was traced, and host Python runs on XLA's callback thread,
    where it is several times slower than on the main thread; so the one-event logdict is
    built unchecked, from a treedef and step names taken here.
    """
    name, (treedef, step_keys, nbatch, _) = event.name, event.meta
    nv, ns, masked = len(event.values), len(event.steps), bool(event.mask)
    n = len(event.leaves())  # the event's leaves, then (tap_with_state) the state's

    def one(leaves: Any) -> logdict:
        steps = {name: dict(zip(step_keys, leaves[nv : nv + ns]))}
        return trusted({name: treedef.unflatten(leaves[:nv])}, steps)

    def host(*leaves: Any) -> None:
        # Masks through NumPy: a jax.Array's own truth test costs ~5 us, more on this thread.
        if nbatch == 0 and state_tree is None:
            if not (masked and not np.all(leaves[-1])):
                callback(one(leaves))
            return
        leaves, state = leaves[:n], leaves[n:]
        for index in _lanes(nbatch, leaves):
            lane = [x[index] for x in leaves] if index else leaves
            if masked and not np.all(lane[-1]):
                continue  # a branch that vmap ran for every lane, not taken in this one
            if state_tree is not None:
                lane_state = [np.asarray(s)[index] for s in state]
                callback(state_tree.unflatten(lane_state), one(lane))
            else:
                callback(one(lane))

    return host


def _lanes(nbatch: int, leaves: Sequence[Any]) -> Any:
    """Indices of the lanes of ``nbatch`` leading batch axes; the callback sees one at a time."""
    shape = np.shape(leaves[0])[:nbatch] if leaves else ()
    return itertools.product(*map(range, shape))


@cached
def _tapped(f: Callable[..., Any], callback: Callable[..., None], key: tuple[Any, ...]) -> Callable:
    names, tags, _ = key
    run = LogInterpreter(
        Selector(names, tags), _site_rule(callback, None), mask_branches=True, api="tap"
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
    require_callable(f, "tap")
    if callback is not None:
        require_callable(callback, "tap", "callback")
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
    require_callable(f, "tap")
    require_callable(callback, "tap", "callback")
    sel = Selector(names, tags)

    def g(*args: Any, **kwargs: Any) -> Any:
        rule = _site_rule(callback, lambda: state)
        return LogInterpreter(sel, rule, mask_branches=True, api="tap").transform(f)(
            *args, **kwargs
        )[0]

    return g
