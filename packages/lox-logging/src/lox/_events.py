"""Emitted log events and how they combine across scans, branches and shards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp


@jax.tree_util.register_pytree_node_class
class Event:
    """One key's events: ``values``, ``steps`` and ``mask`` leaves shaped ``(*batch, n_events,
    ...)``.

    ``meta`` is ``(treedef, step_keys, nbatch, taken)``; it must agree to merge. ``taken`` is empty
    unless the site sat in a branch of a cond that vmap ran for every lane (a batched predicate):
    then it holds one ``(group, branch, n_branches)`` per such cond, outermost first, and ``mask``
    one bool leaf saying, per lane and event, whether all those branches were really taken.
    """

    def __init__(
        self, name: str, meta: tuple[Any, ...], values: list, steps: list, mask: list | None = None
    ) -> None:
        self.name = name
        self.meta = meta
        self.values = values
        self.steps = steps
        self.mask = mask or []

    @property
    def nbatch(self) -> int:
        return self.meta[2]

    @property
    def taken(self) -> tuple[tuple[int, int, int], ...]:
        return self.meta[3]

    def leaves(self) -> list[Any]:
        return [*self.values, *self.steps, *self.mask]

    def with_leaves(self, leaves: Sequence[Any], meta: tuple[Any, ...] | None = None) -> Event:
        """The same event with new leaves (as ordered by :meth:`leaves`) and optionally meta."""
        meta = self.meta if meta is None else meta
        nv, ns = len(self.values), len(self.steps)
        mask = list(leaves[nv + ns :]) if meta[3] else []
        return Event(self.name, meta, list(leaves[:nv]), list(leaves[nv : nv + ns]), mask)

    def tree_flatten(self) -> tuple[tuple[list, list, list], tuple[str, tuple]]:
        return (self.values, self.steps, self.mask), (self.name, self.meta)

    @classmethod
    def tree_unflatten(cls, aux: tuple[str, tuple], children: tuple[list, list, list]) -> Event:
        return cls(aux[0], aux[1], *children)

    def signature(self) -> str:
        treedef, step_keys, nbatch, _ = self.meta
        shapes = [f"{jnp.result_type(v)}{list(jnp.shape(v)[nbatch + 1 :])}" for v in self.values]
        value = jax.tree.unflatten(treedef, shapes) if shapes else "{}"
        steps = f", steps {list(step_keys)}" if step_keys else ""
        batch = f", inside {nbatch} vmap(s)" if nbatch else ""
        return f"{value}{steps}{batch}".replace("'", "")

    def __repr__(self) -> str:
        return f"{self.name}: {self.signature()}"


def from_site(params: dict[str, Any], invals: Sequence[Any]) -> Event:
    """The event of one executed site: a length-1 event axis right after the batch axes.

    Operands are the value leaves, then the steps, then (when ``params["taken"]``) the mask.
    """
    nbatch = params["nbatch"]
    n_steps, n_mask = len(params["step_keys"]), 1 if params["taken"] else 0
    leaves = [jnp.expand_dims(jnp.asarray(x), nbatch) for x in invals]
    n_values = len(leaves) - n_steps - n_mask
    meta = (params["treedef"], params["step_keys"], nbatch, params["taken"])
    return Event(
        params["name"],
        meta,
        leaves[:n_values],
        leaves[n_values : n_values + n_steps],
        leaves[n_values + n_steps :],
    )


class LogStructureError(ValueError):
    """One key was logged with incompatible structures, shapes, dtypes or steps."""


def _signature_key(e: Event) -> tuple[Any, ...]:
    tail = [(jnp.shape(v)[e.nbatch + 1 :], jnp.result_type(v)) for v in e.values]
    return (e.meta, tail)


def _mismatch(a: Event, b: Event, where: str) -> LogStructureError:
    keys_a, keys_b = a.meta[1], b.meta[1]
    hint = (
        "Every event of a key must have one pytree structure, shape and dtype; log different "
        "things under different keys, or cast/reshape before logging."
    )
    if keys_a != keys_b:
        missing = sorted(set(keys_a) ^ set(keys_b))
        hint = (
            f"The step(s) {missing} are given at some events of key {a.name!r} and not at "
            "others; pass the same steps at every lox.log call for this key."
        )
    return LogStructureError(
        f"lox: key {a.name!r} was logged with two different signatures {where}:\n"
        f"  first:  {a.signature()}\n  second: {b.signature()}\n{hint}"
    )


def branch_mismatch(branches: Sequence[Sequence[Event] | None]) -> LogStructureError:
    """The error for a cond/switch whose branches log different things (``None``: not traced)."""
    lines = []
    for i, events in enumerate(branches):
        logged = "; ".join(repr(e) for e in events or []) or "nothing"
        lines.append(f"  branch {i} logged: {logged}")
    keys = sorted({e.name for events in branches for e in events or []})
    return LogStructureError(
        f"lox.spool: the branches of a cond/switch log different keys, shapes or dtypes "
        f"(keys involved: {keys}):\n" + "\n".join(lines) + "\nOnly the taken branch's "
        "events are returned, so every branch must log the same keys with the same shapes "
        "and dtypes. Log the same keys in each branch (e.g. a zero placeholder), or move "
        "the lox.log call out of the cond."
    )


def concat(a: Event, b: Event, where: str = "") -> Event:
    if _signature_key(a) != _signature_key(b):
        raise _mismatch(a, b, where)
    ax = a.nbatch
    return a.with_leaves([jnp.concatenate([x, y], axis=ax) for x, y in zip(a.leaves(), b.leaves())])


def merge(events: Sequence[Event], where: str = "") -> list[Event]:
    """One event per key, in first-appearance order, concatenated in program order."""
    by_key: dict[str, Event] = {}
    for e in events:
        by_key[e.name] = concat(by_key[e.name], e, where) if e.name in by_key else e
    return list(by_key.values())


def fold_leading(e: Event) -> Event:
    """A new leading axis (scan iterations or shards) becomes part of the event axis.

    ``(T, *batch, n, ...) -> (*batch, T * n, ...)``: row-major, so iteration 0's events come
    first. Batch axes stay in front, never interleaved with time.
    """
    nb = e.nbatch

    def fold(x: Any) -> Any:
        x = jnp.moveaxis(x, 0, nb)
        shape = jnp.shape(x)
        return jnp.reshape(x, (*shape[:nb], shape[nb] * shape[nb + 1], *shape[nb + 2 :]))

    return e.with_leaves([fold(x) for x in e.leaves()])
