"""``lox.spool``: return the logs of a function as an extra output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from . import _events
from ._select import Filter, Selector, require_callable
from ._transform import LogInterpreter, cached, to_logdict


def _collect(ctx: Any, eqn: Any, invals: list[Any]) -> list[Any]:
    ctx.emit(_events.from_site(eqn.params, invals))
    return invals  # the site is consumed: an outer spool/tap does not see it again


@cached
def _spooled(f: Callable[..., Any], selector_key: tuple[Any, ...]) -> Callable[..., Any]:
    names, tags, _ = selector_key
    interp = LogInterpreter(Selector(names, tags), _collect, mask_branches=False, api="spool")
    run = interp.transform(f)

    def g(*args: Any, **kwargs: Any) -> tuple[Any, Any]:
        out, events = run(*args, **kwargs)
        return out, to_logdict(events)

    # inline: under an outer jit this adds no nested call; on its own it compiles once per shape.
    return jax.jit(g, inline=True)


def spool(f: Callable[..., Any], *, names: Filter = None, tags: Filter = None) -> Callable:
    """Transform ``f`` so that it also returns its logs: ``g(*args) -> (f's output, logdict)``.

    Every entry has one leading event axis: events in program order, a scan's iterations in
    index order (nested scans row-major), vmap batch axes in front of the event axis. Sites that
    are not selected stay in place for an outer transformation; selected ones are consumed.

    Args:
        f: the function whose ``lox.log`` calls to collect (arguments: arrays / pytrees).
        names: keys to collect (exact match); a string is one key; ``None`` all; ``[]`` none.
        tags: collect sites with any of these tags; combined with ``names`` by AND.

    Returns:
        ``g`` with ``g(*args, **kwargs) -> (f(*args, **kwargs), logdict)``, jit-compiled and
        cached: calling ``spool(f)`` again with same-shaped inputs does not re-trace.

    Raises:
        LogStructureError: a key changes structure/shape/dtype between events, cond branches log
            different things, or a key is logged inside a ``while_loop``.

    Example:
        >>> import jax, jax.numpy as jnp, lox
        >>> def step(c, x):
        ...     lox.log({"x": x}, step=c)
        ...     return c + 1, None
        >>> _, logs = lox.spool(lambda xs: jax.lax.scan(step, 0, xs))(jnp.arange(3.0))
        >>> logs["x"].tolist(), logs.steps["x"]["step"].tolist()
        ([0.0, 1.0, 2.0], [0, 1, 2])
    """
    require_callable(f, "spool")
    return _spooled(f, Selector(names, tags).key())
