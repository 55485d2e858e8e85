"""A preference run's part of the train step: the objective of one micro-batch of pairs (see
``preference.py`` for where its reference comes from)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._config.schema import Config
from .._model.preference import pair_mask, pair_sums


def preference_objective(
    params: Any,
    batch: Any,
    *,
    cfg: Config,
    constrain: Any,
    total: jax.Array,
    ref: Any,
    dropout_key: jax.Array | None = None,
) -> tuple[jax.Array, Any]:
    """This micro-batch's share of the global batch's mean preference loss (its sum over the
    global batch's ``total`` pairs), with the sums of the loss and the metrics."""
    sums = pair_sums(
        params,
        batch,
        config=cfg.model,
        pref=cfg.preference,
        constrain=constrain,
        ref=ref,
        dropout_key=dropout_key,
    )
    return sums["loss"] / total, (sums, None, {})  # no rows, no experts' stats


def total_pairs(batch: Any) -> jax.Array:
    """The pairs of a whole ``(grad_accum, rows, 2W)`` batch (at least 1: data, not compute)."""
    flat = jax.tree.map(lambda a: a.reshape(-1, a.shape[-1]), batch)
    return jnp.maximum(jnp.sum(pair_mask(flat)), 1.0)
