"""``lox.log``: a log site is one identity primitive per key, with its steps as operands."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from core_primitives import compat, identity_primitive


def _batch(size: int, args: Sequence[Any], dims: Sequence[int | None], **params: Any) -> Any:
    # Runs under every vmap, even when nothing logged is batched (a constant), so that
    # spool(vmap(f)) == vmap(spool(f)): the site sees every operand (steps included) with the
    # batch axis in front, unbatched ones broadcast, and nbatch counts the vmaps around it.
    moved = [
        jnp.broadcast_to(a, (size, *jnp.shape(a))) if d is None else jnp.moveaxis(a, d, 0)
        for a, d in zip(args, dims)
    ]
    lox_p.bind(*moved, **{**params, "nbatch": params["nbatch"] + 1})
    # The caller keeps the values as they came: code after a log site stays unbatched where it
    # was, and the broadcast copies feed only the site, which XLA drops unless lox rewrote it.
    return list(args), list(dims)


lox_p = identity_primitive(
    "lox_log",
    keep_alive=True,  # a site whose result is unused must still be found by spool/tap
    # Under grad/vjp/linearize partial evaluation drops what has neither a used output nor a
    # kept effect (a site in a scan body was lost that way): a differentiated site has one.
    differentiated_effect=compat.make_effect("LoxSiteEffect"),
    recompute_params=lambda p: {**p, "recomputed": True},  # remat's copy is not a new event
)
"""The primitive a ``lox.log`` site binds, one equation per logged key.

Public so that code outside lox can recognise log sites in a jaxpr, e.g. to check that
``lox.strip`` left none, or to key a ``core_primitives.Interpreter`` rule on them. The
equation's params (key name, tags, step names, batching bookkeeping) are lox's own and may
change between versions; select sites with ``names=``/``tags=`` of ``spool``/``tap``/``strip``.
docs/lox.md ("Removing logs") counts the sites of a function this way.
"""
compat.register_batching_always(lox_p, _batch)


def _as_tags(tags: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(tags, str):
        return (tags,)
    tags = tuple(tags)
    bad = [t for t in tags if not isinstance(t, str)]
    if bad:
        raise TypeError(
            f"lox.log: tags must be strings, got {bad!r} in tags={tags!r}. "
            "Pass a string or a sequence of strings, e.g. tags=('train',)."
        )
    return tags


def _as_step(name: str, value: Any) -> Any:
    dtype = jnp.result_type(value)
    if not jnp.issubdtype(dtype, jnp.integer) or jnp.ndim(value) != 0:
        raise TypeError(
            f"lox.log: step {name}={value!r} must be a scalar integer (Python int or int array "
            f"of shape ()), got dtype {dtype} and shape {jnp.shape(value)}. Steps are counters "
            "kept next to the data; log float values as data instead."
        )
    return value if isinstance(value, jax.Array) else np.asarray(value, dtype=np.int32)


_ARRAY_LIKE = (jax.Array, np.ndarray, np.generic, int, float, complex)


def _check_leaves(key: str, value: Any, leaves: list[Any]) -> None:
    for leaf in leaves:
        if not isinstance(leaf, _ARRAY_LIKE) and not hasattr(leaf, "__jax_array__"):
            raise TypeError(
                f"lox.log: the value of {key!r} holds a {type(leaf).__name__} ({leaf!r:.60}), "
                "expected arrays or numbers (or a pytree of them). Text and other Python objects "
                "cannot pass through JAX; handle them on the host, e.g. in a lox.tap callback."
            )


def log(data: Mapping[str, Any], *, tags: str | Sequence[str] = (), **steps: Any) -> Any:
    """Record one event per key of ``data``; returns ``data`` unchanged.

    Untransformed, a log site is an identity and costs nothing. ``lox.spool`` returns the events
    as outputs, ``lox.tap`` sends them to the host, ``lox.strip`` removes them.

    Args:
        data: mapping from key to a pytree of arrays (or scalars).
        tags: a tag or tags for filtering sites (``spool(f, tags=...)``).
        **steps: integer metadata kept aligned with the data, e.g. ``step=i, epoch=e``.

    Returns:
        ``data``, with the same structure and values.

    Raises:
        TypeError: ``data`` is not a mapping with string keys, a value holds something that is
            not an array or a number, or a step is not a scalar integer.

    Example:
        >>> import jax.numpy as jnp, lox
        >>> def f(x):
        ...     lox.log({"x": x}, step=3)
        ...     return x * 2
        >>> out, logs = lox.spool(f)(jnp.float32(1.5))
        >>> float(out), logs["x"].tolist(), logs.steps["x"]["step"].tolist()
        (3.0, [1.5], [3])
    """
    if not isinstance(data, Mapping):
        raise TypeError(
            f"lox.log expects a mapping from names to values, got {type(data).__name__}. "
            'Wrap the value in a dict: lox.log({"loss": loss}).'
        )
    tags = _as_tags(tags)
    step_keys = tuple(sorted(steps))
    step_vals = [_as_step(k, steps[k]) for k in step_keys]
    out = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise TypeError(
                f"lox.log: keys must be strings, got {key!r} ({type(key).__name__}). "
                "Use str keys such as 'loss' or 'train/loss'."
            )
        leaves, treedef = jax.tree.flatten(value)
        _check_leaves(key, value, leaves)
        res = lox_p.bind(
            *leaves,
            *step_vals,
            name=key,
            tags=tags,
            treedef=treedef,
            step_keys=step_keys,
            nbatch=0,
            recomputed=False,
            differentiated=False,
            taken=(),  # set by _taken when the site is in a branch vmap runs for every lane
        )
        out[key] = jax.tree.unflatten(treedef, res[: len(leaves)])
    return type(data)(out) if isinstance(data, dict) else out
