"""``lox.strip`` / ``lox.keep``: remove log sites so they cost nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ._select import Filter, Selector, require_callable
from ._transform import LogInterpreter, cached


def _remove(ctx: Any, eqn: Any, invals: list[Any]) -> list[Any]:
    return invals


@cached
def _rewritten(f: Callable[..., Any], key: tuple[Any, ...]) -> Callable[..., Any]:
    names, tags, invert = key
    sel = Selector(names, tags, invert=invert)
    api = "keep" if invert else "strip"
    run = LogInterpreter(sel, _remove, mask_branches=False, api=api).transform(f)
    return lambda *a, **k: run(*a, **k)[0]


def strip(f: Callable[..., Any], *, names: Filter = None, tags: Filter = None) -> Callable:
    """Remove the selected log sites from ``f`` (all by default).

    ``jax.make_jaxpr(strip(f))`` has no trace of logging: the same equations as ``f`` without
    its ``lox.log`` calls.

    Example:
        >>> import jax, lox
        >>> f = lambda x: lox.log({"x": x})["x"] * 2
        >>> [e.primitive.name for e in jax.make_jaxpr(lox.strip(f))(1.0).eqns]
        ['mul']
    """
    require_callable(f, "strip")
    return _rewritten(f, Selector(names, tags).key())


def keep(f: Callable[..., Any], *, names: Filter = None, tags: Filter = None) -> Callable:
    """Keep only the selected log sites of ``f``; remove every other one.

    Example:
        >>> import jax, lox
        >>> def f(x):
        ...     lox.log({"a": x, "b": x})
        ...     return x
        >>> [e.params["name"] for e in jax.make_jaxpr(lox.keep(f, names="a"))(1.0).eqns]
        ['a']
    """
    require_callable(f, "keep")
    return _rewritten(f, Selector(names, tags, invert=True).key())
