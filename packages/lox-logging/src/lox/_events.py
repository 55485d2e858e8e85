"""Emitted log events and how they combine across scans, branches and shards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp


@jax.tree_util.register_pytree_node_class
class Event:
    """One key's events: ``values`` and ``steps`` leaves shaped ``(*batch, n_events, ...)``."""

    def __init__(self, name: str, meta: tuple[Any, ...], values: list, steps: list) -> None:
        self.name = name
        self.meta = meta  # (treedef, step_keys, nbatch): must agree to merge
        self.values = values
        self.steps = steps

    @property
    def nbatch(self) -> int:
        return self.meta[2]

    def tree_flatten(self) -> tuple[tuple[list, list], tuple[str, tuple]]:
        return (self.values, self.steps), (self.name, self.meta)

    @classmethod
    def tree_unflatten(cls, aux: tuple[str, tuple], children: tuple[list, list]) -> Event:
        return cls(aux[0], aux[1], *children)

    def signature(self) -> str:
        treedef, step_keys, nbatch = self.meta
        shapes = [f"{jnp.result_type(v)}{list(jnp.shape(v)[nbatch + 1 :])}" for v in self.values]
        value = jax.tree.unflatten(treedef, shapes) if shapes else "{}"
        steps = f", steps {list(step_keys)}" if step_keys else ""
        batch = f", inside {nbatch} vmap(s)" if nbatch else ""
        return f"{value}{steps}{batch}".replace("'", "")

    def __repr__(self) -> str:
        return f"{self.name}: {self.signature()}"


def from_site(params: dict[str, Any], invals: Sequence[Any]) -> Event:
    """The event of one executed site: a length-1 event axis right after the batch axes."""
    nbatch = params["nbatch"]
    n_steps = len(params["step_keys"])
    leaves = [jnp.expand_dims(jnp.asarray(x), nbatch) for x in invals]
    values, steps = leaves[: len(leaves) - n_steps], leaves[len(leaves) - n_steps :]
    meta = (params["treedef"], params["step_keys"], nbatch)
    return Event(params["name"], meta, values, steps)


class LogStructureError(ValueError):
    """One key was logged with incompatible structures, shapes, dtypes or steps."""


def _signature_key(e: Event) -> tuple[Any, ...]:
    tail = [(jnp.shape(v)[e.nbatch + 1 :], jnp.result_type(v)) for v in e.values]
    return (e.meta, tail)


def _mismatch(a: Event, b: Event, where: str) -> LogStructureError:
    _, keys_a, _ = a.meta
    _, keys_b, _ = b.meta
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


def concat(a: Event, b: Event, where: str = "") -> Event:
    if _signature_key(a) != _signature_key(b):
        raise _mismatch(a, b, where)
    ax = a.nbatch
    cat = [jnp.concatenate([x, y], axis=ax) for x, y in zip(a.values + a.steps, b.values + b.steps)]
    return Event(a.name, a.meta, cat[: len(a.values)], cat[len(a.values) :])


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

    return Event(e.name, e.meta, [fold(v) for v in e.values], [fold(s) for s in e.steps])
