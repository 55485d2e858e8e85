"""Events of a cond that vmap ran for every lane: keep, per lane, the taken branch's.

With a batched predicate JAX evaluates every branch and selects the outputs, so a spool after
the vmap sees each branch's sites one after the other. ``_taken`` tagged them with their group
(the cond), branch and a per-lane mask; here the alternatives become one event per lane, as
``vmap(spool(f))`` would give.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import jax.numpy as jnp

from ._events import Event, branch_mismatch, merge


def resolve(events: list[Event], *, complete: bool) -> list[Event]:
    """Replace each group of alternatives whose branches are all in ``events`` by its selection.

    Alternatives are adjacent: a cond's branches run back to back where vmap inlined it. A list
    whose events all come from one branch (a scan body inside that branch) is left alone: the
    other branches are further out. ``complete``: nothing is further out (the final logdict).
    """
    if not any(e.taken for e in events):
        return events
    return _resolve(events, 0 if complete else _shared_depth(events))


def _shared_depth(events: Sequence[Event]) -> int:
    first = events[0].taken
    depth = min(len(e.taken) for e in events)
    for k in range(depth):
        if any(e.taken[k] != first[k] for e in events):
            return k
    return depth


def _resolve(events: Sequence[Event], depth: int) -> list[Event]:
    out: list[Event] = []
    for group, run in _runs(events, depth):
        if group is None:
            out.extend(run)
            continue
        n = run[0].taken[depth][2]
        branches = [[e for e in run if e.taken[depth][1] == i] for i in range(n)]
        merged = [merge(_resolve(b, depth + 1), "inside one cond branch") for b in branches]
        out.extend(_select(merged, depth))
    return out


def _runs(events: Sequence[Event], depth: int) -> Iterator[tuple[Any, list[Event]]]:
    # Maximal stretches of events that are plain at this depth (group None) or share a group.
    # One group id can repeat (vmap's batched jaxprs are cached, so a re-used cond keeps its
    # id); selecting such a stretch as a whole is still right, as masks are per event.
    run: list[Event] = []
    current: Any = None
    for e in events:
        group = e.taken[depth][0] if len(e.taken) > depth else None
        if run and group != current:
            yield current, run
            run = []
        current = group
        run.append(e)
    if run:
        yield current, run


def _select(branches: list[list[Event]], depth: int) -> list[Event]:
    """Per key, branch i's leaves where its mask is set, else the next branch's."""
    by_name = [{e.name: e for e in events} for events in branches]
    if any(_shape_key(b) != _shape_key(by_name[0]) for b in by_name):
        raise branch_mismatch(branches)
    out = []
    for name, first in by_name[0].items():
        alts = [b[name] for b in by_name]
        masks = [e.mask[0] for e in alts]
        leaves = alts[-1].leaves()[: len(first.values) + len(first.steps)]
        for e, m in zip(alts[-2::-1], masks[-2::-1]):
            mine = e.leaves()
            leaves = [jnp.where(_expand(m, x), x, y) for x, y in zip(mine, leaves)]
        meta = (*first.meta[:3], first.taken[:depth])
        if depth:  # still inside an outer cond's branch: taken where any alternative was
            leaves.append(jnp.any(jnp.stack(masks), axis=0))
        out.append(first.with_leaves(leaves, meta))
    return out


def _shape_key(events: dict[str, Event]) -> dict[str, Any]:
    # Selection needs equal shapes, event counts included (a branch logging a key twice cannot
    # be paired with one logging it once).
    return {
        n: (e.meta[:3], [(jnp.shape(x), jnp.result_type(x)) for x in e.leaves()])
        for n, e in events.items()
    }


def _expand(mask: Any, x: Any) -> Any:
    return jnp.reshape(mask, (*jnp.shape(mask), *([1] * (jnp.ndim(x) - jnp.ndim(mask)))))
