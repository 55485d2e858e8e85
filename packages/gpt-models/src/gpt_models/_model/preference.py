"""Preference losses (DPO, IPO, SimPO) on packed pairs, with TRL's reward metrics.

A preference batch (``packing.py``, ``group`` 2) is a dict of ``(B, 2 * (T + 1))`` arrays:
``tokens``, ``mask``, ``segments``, each row a chosen sub-row then a rejected sub-row of ``T + 1``
ids, a pair's two answers under the same segment id (1, 2, ...); with reference log-probs
computed beforehand also ``ref`` (float32), the pair's reference log-prob of each answer at its
segment id in each sub-row. The two sub-rows are read as separate rows of one forward pass (each
example attends only to itself), and each answer's log-probability is the sum over its counted
tokens (``mask``), gathered by segment.

The losses, with ``pi`` the policy's and ``ref`` the reference's log-probs of an answer (summed
for DPO; for IPO and SimPO the mean per counted token, as TRL computes them)::

    dpo:    h = (pi_c - pi_r) - (ref_c - ref_r)
            loss = -(1 - ls) log sigmoid(beta h) - ls log sigmoid(-beta h)
    ipo:    loss = (h - 1 / (2 beta))^2
    simpo:  h = pi_c - pi_r - gamma / beta, the loss as dpo's (no reference)

and the rewards ``beta (pi - ref)`` (SimPO: ``beta pi``); ``rewards/accuracies`` is the share of
pairs whose chosen reward is the larger, ``rewards/margins`` their mean difference.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

import blox as bx

from .._config.preference import PreferenceConfig
from .block import no_constraint
from .lora import is_adapter
from .loss import next_token_losses

Array = jax.Array

# The metrics of a preference step or evaluation, TRL's names, each a mean over the pairs.
METRICS = (
    "rewards/chosen",
    "rewards/rejected",
    "rewards/margins",
    "rewards/accuracies",
    "logps/chosen",
    "logps/rejected",
)
# What each metric is measured in (for gpt eval): the rewards are beta x nats, a share has none.
UNITS = {
    "rewards/accuracies": "(share of pairs)",
    "logps/chosen": "nats",
    "logps/rejected": "nats",
}


def sub_rows(batch: Any) -> dict[str, Array]:
    """A preference batch's ``(B, 2W)`` arrays as ``(2B, W)``: chosen, rejected, chosen, ..."""
    out = {}
    for k in ("tokens", "mask", "segments"):
        a = jnp.asarray(batch[k])
        out[k] = a.reshape(a.shape[0] * 2, a.shape[1] // 2)
    return out


def answer_logps(
    params: bx.Params,
    batch: Any,
    config: Any,
    constrain: Any = no_constraint,
    *,
    dropout_key: Array | None = None,
) -> tuple[Array, Array]:
    """``(logps, counts)``, each ``(B, 2, W)``: at ``[b, k, s]`` the summed log-probability
    (nats) of the counted tokens of answer ``k`` (0 chosen, 1 rejected) with segment ``s`` in row
    ``b``, and how many tokens it counts (0 where there is no such answer)."""
    rows = sub_rows(batch)
    n, width = rows["tokens"].shape
    logp = -next_token_losses(params, rows, config, constrain, dropout_key=dropout_key)
    return _by_segment(logp, rows, n, width)


def _by_segment(logp: Array, rows: dict[str, Array], n: int, width: int) -> tuple[Array, Array]:
    counted = (rows["mask"][:, 1:] != 0).astype(jnp.float32)
    ids = (jnp.arange(n)[:, None] * width + rows["segments"][:, 1:]).reshape(-1)
    sums = jax.ops.segment_sum((logp * counted).reshape(-1), ids, num_segments=n * width)
    counts = jax.ops.segment_sum(counted.reshape(-1), ids, num_segments=n * width)
    shape = (n // 2, 2, width)
    return sums.reshape(shape), counts.reshape(shape)


def pair_mask(batch: Any) -> Array:
    """``(B, W)``: 1 at each segment id that holds a pair whose two answers count tokens (data
    only: known before any forward pass)."""
    rows = sub_rows(batch)
    n, width = rows["tokens"].shape
    zeros = jnp.zeros((n, width - 1), jnp.float32)
    _, counts = _by_segment(zeros, rows, n, width)
    valid = (counts[:, 0] > 0) & (counts[:, 1] > 0)
    return valid.at[:, 0].set(False).astype(jnp.float32)


def reference_params(params: bx.Params, config: Any) -> tuple[bx.Params, Any]:
    """The reference of a LoRA run: its base weights with the adapters off, and the model
    section without them; the same arrays, no copy. A run without LoRA: ``params`` as given."""
    base = getattr(config, "base", config)
    if base is config:
        return params, config
    frozen = params.split(lambda path, _: not is_adapter(path))[0]
    return frozen, base


def reference_logps(
    params: Any, batch: Any, *, config: Any, constrain: Any, ref: Any, precomputed: bool
) -> jax.Array:
    """The reference's summed log-probs ``(B, 2, W)`` of a batch's answers: carried by the batch
    (``precomputed``), from the reference weights ``ref``, or (``ref`` None: LoRA) from
    ``params`` with the adapters off."""
    if precomputed:
        r = jnp.asarray(batch["ref"])
        return r.reshape(r.shape[0], 2, r.shape[1] // 2)
    weights, model = (ref, config) if ref is not None else reference_params(params, config)
    return jax.lax.stop_gradient(answer_logps(weights, batch, model, constrain)[0])


def pair_logps(
    params: bx.Params,
    batch: Any,
    *,
    config: Any,
    pref: PreferenceConfig,
    constrain: Any = no_constraint,
    ref: Any = None,
    dropout_key: Array | None = None,
) -> tuple[tuple[Array, Array], Array | None, Array]:
    """What :func:`preference_sums` takes of a batch of pairs: the policy's ``(logps, counts)``,
    the reference's logps (:func:`reference_logps`: the batch's ``ref``, the weights ``ref``, or
    LoRA's adapters off; None for SimPO) and :func:`pair_mask`."""
    policy = answer_logps(params, batch, config, constrain, dropout_key=dropout_key)
    reference = None
    if pref.uses_reference:
        reference = reference_logps(
            params,
            batch,
            config=config,
            constrain=constrain,
            ref=ref,
            precomputed=pref.precompute_ref and "ref" in batch,
        )
    return policy, reference, pair_mask(batch)


def pair_sums(
    params: bx.Params,
    batch: Any,
    *,
    config: Any,
    pref: PreferenceConfig,
    constrain: Any = no_constraint,
    ref: Any = None,
    dropout_key: Array | None = None,
) -> dict[str, Array]:
    """:func:`preference_sums` of a batch of pairs: the policy ``params`` against the reference
    (:func:`pair_logps`)."""
    options = {"config": config, "pref": pref, "constrain": constrain, "ref": ref}
    return preference_sums(*pair_logps(params, batch, dropout_key=dropout_key, **options), pref)


def preference_sums(
    policy: tuple[Array, Array], ref: Array | None, valid: Array, p: PreferenceConfig
) -> dict[str, Array]:
    """The sums over the valid pairs of the loss and of :data:`METRICS`, and ``pairs`` (their
    count): a step's or an evaluation's means are ratios of totals over its batches.

    ``policy`` is :func:`answer_logps`'s ``(logps, counts)``; ``ref`` the reference's summed
    logps ``(B, 2, W)`` (None for SimPO); ``valid`` :func:`pair_mask`'s ``(B, W)``.
    """
    each = _each_pair(policy, ref, p)
    sums = {k: jnp.sum(jnp.where(valid > 0, v, 0.0)) for k, v in each.items()}
    return sums | {"pairs": jnp.sum(valid)}


def row_losses(
    policy: tuple[Array, Array], ref: Array | None, valid: Array, p: PreferenceConfig
) -> Array:
    """``(B,)``: each row's mean preference loss over its valid pairs (0 for a row without one),
    of :func:`preference_sums`'s inputs: what a mixture's ``loss/<source>`` averages."""
    losses = jnp.where(valid > 0, _each_pair(policy, ref, p)["loss"], 0.0)
    return jnp.sum(losses, axis=-1) / jnp.maximum(jnp.sum(valid, axis=-1), 1.0)


def _each_pair(
    policy: tuple[Array, Array], ref: Array | None, p: PreferenceConfig
) -> dict[str, Array]:
    """The loss and :data:`METRICS` of every pair slot ``(B, W)``, valid or not."""
    logps, counts = policy
    mean = p.loss in ("ipo", "simpo")  # log-probs per counted token, as TRL takes them
    scale = 1.0 / jnp.maximum(counts, 1.0) if mean else jnp.ones_like(counts)
    pi = logps * scale
    chosen, rejected = pi[:, 0], pi[:, 1]
    if p.uses_reference:
        assert ref is not None
        r = jax.lax.stop_gradient(ref) * scale
        r_chosen, r_rejected = r[:, 0], r[:, 1]
    else:
        r_chosen = r_rejected = jnp.zeros_like(chosen)
    h = (chosen - rejected) - (r_chosen - r_rejected)
    if p.loss == "simpo":
        h = h - p.gamma / p.beta
    if p.loss == "ipo":
        losses = (h - 1.0 / (2.0 * p.beta)) ** 2
    else:
        ls = p.label_smoothing
        losses = -jax.nn.log_sigmoid(p.beta * h) * (1 - ls) - jax.nn.log_sigmoid(-p.beta * h) * ls
    good, bad = p.beta * (chosen - r_chosen), p.beta * (rejected - r_rejected)
    return {
        "loss": losses,
        "rewards/chosen": good,
        "rewards/rejected": bad,
        "rewards/margins": good - bad,
        "rewards/accuracies": (good > bad).astype(jnp.float32),
        "logps/chosen": chosen,
        "logps/rejected": rejected,
    }


def means(sums: dict[str, Any]) -> dict[str, Any]:
    """The loss and :data:`METRICS` as means over the pairs of ``sums`` (0 where there is none)."""
    n = jnp.maximum(sums["pairs"], 1.0)
    return {k: sums[k] / n for k in ("loss", *METRICS)}
