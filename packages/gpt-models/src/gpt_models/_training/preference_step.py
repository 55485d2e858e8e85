"""A preference run's part of the train step: the objective of one micro-batch of pairs (see
``preference.py`` for where its reference comes from)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .._config.schema import Config
from .._model.preference import pair_logps, pair_mask, preference_sums, row_losses


def preference_objective(
    params: Any,
    batch: Any,
    *,
    cfg: Config,
    constrain: Any,
    total: jax.Array,
    ref: Any,
    rows: bool = False,
    dropout_key: jax.Array | None = None,
) -> tuple[jax.Array, Any]:
    """This micro-batch's share of the global batch's mean preference loss (its sum over the
    global batch's ``total`` pairs), with the sums of the loss and the metrics, and with ``rows``
    (a mixture, ``data.sources``) each row's mean loss over its pairs."""
    inputs = pair_logps(
        params,
        batch,
        config=cfg.model,
        pref=cfg.preference,
        constrain=constrain,
        ref=ref,
        dropout_key=dropout_key,
    )
    sums = preference_sums(*inputs, cfg.preference)
    row = row_losses(*inputs, cfg.preference) if rows else None
    return sums["loss"] / total, (sums, row, {})  # no experts' stats


def total_pairs(batch: Any) -> jax.Array:
    """The pairs of a whole ``(grad_accum, rows, 2W)`` batch (at least 1: data, not compute)."""
    flat = jax.tree.map(lambda a: a.reshape(-1, a.shape[-1]), batch)
    return jnp.maximum(jnp.sum(pair_mask(flat)), 1.0)
