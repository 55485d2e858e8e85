"""The host callback of a tapped site: an ordered ``io_callback`` that runs once under remat.

``tap`` puts a callback where a site was. When that happens before differentiation
(``grad(tap(f))``), remat copies the callback into the backward pass along with the forward
computation it recomputes (the site is gone by then, so its ``lox_p`` no-recompute mark cannot
help), and JAX runs a callback in both copies. ``lox_tap`` is a primitive of its own so that its
remat rule can drop the copy: it lowers to an ordered ``io_callback`` (callbacks fire in program
order, threaded on a token of lox's own effect), but stays in the forward pass only.

It replaces a flag operand that told the copy to do nothing on the host: every operand of a
callback costs a device-to-host transfer per call, and the flag made a one-value site's callback
about a quarter slower (benchmark 4 in ``benchmarks/lox``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from jax import lax
from jax.experimental import io_callback

from core_primitives import compat

# Ordered: XLA otherwise runs callbacks in any order its schedule likes (a nested jit's site came
# before the sites preceding it in a scan body). tap's contract is program order.
_effect = compat.make_ordered_effect("LoxTapEffect")

tap_p = compat.Primitive("lox_tap")
tap_p.multiple_results = True


def _callback(*args: Any, host: Callable[..., None]) -> list[Any]:
    io_callback(host, None, *args, ordered=True)
    return []


def _batch(args: Sequence[Any], dims: Sequence[int | None], *, host: Callable) -> Any:
    # One call per lane, in lane order.
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    for i in range(size):
        lane = [
            a if d is None else lax.index_in_dim(a, i, d, keepdims=False)
            for a, d in zip(args, dims)
        ]
        tap_p.bind(*lane, host=host)
    return [], []


def _jvp(primals: Sequence[Any], tangents: Sequence[Any], *, host: Callable) -> Any:
    return tap_p.bind(*primals, host=host), []


tap_p.def_impl(_callback)  # eager: the host is called right away
tap_p.def_effectful_abstract_eval(lambda *avals, host: ([], {_effect}))
compat.register_ordered_callback_lowering(tap_p, _callback, _effect)
compat.register_batching(tap_p, _batch)
compat.register_jvp(tap_p, _jvp)
compat.register_transpose(tap_p, lambda cts, *args, host: [None] * len(args))
compat.register_no_recompute(tap_p, mark=None)  # no copy in remat's backward pass


def host_callback(host: Callable[..., None], leaves: Sequence[Any]) -> None:
    """Call ``host(*leaves)`` on the host each time this point of the program executes.

    Like ``io_callback(host, None, *leaves, ordered=True)`` (arrays only, no pytrees), except
    that ``jax.checkpoint`` does not run it a second time while recomputing the forward pass, and
    that it may sit under ``vmap`` of a ``cond`` with a batched predicate (one call per lane).
    """
    tap_p.bind(*leaves, host=host)
