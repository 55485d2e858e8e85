"""The next-token loss of a batch: plain token windows, or packed examples weighted by a loss mask.

A plain batch is an integer array ``(B, T + 1)``: every next token counts. A packed batch (the
dataset of a store ``gpt prepare`` made from chat or prompt/completion data) is a dict of
``(B, T + 1)`` arrays: ``tokens``, ``mask`` (1 where the token is a target the loss counts: the
answers) and ``segments`` (1, 2, ... per example in the row, 0 for padding). The model reads
``tokens[:, :-1]`` with ``segment_ids=segments[:, :-1]``, so no example sees another, and the loss
is ``sum(loss * mask) / sum(mask)`` over the targets ``tokens[:, 1:]`` (:func:`loss_fn`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp

import blox as bx

from .block import no_constraint
from .gpt import drops, gpt

Array = jax.Array

# A packed batch's keys and what each holds (the messages name them).
PACKED_KEYS = {
    "tokens": "token ids (padding 0)",
    "mask": "1 where the token is a target the loss counts",
    "segments": "1, 2, ... per example in the row, 0 for padding",
}


def is_packed(batch: Any) -> bool:
    """Whether ``batch`` is a packed batch (a dict of ``tokens``, ``mask``, ``segments``)."""
    return isinstance(batch, Mapping)


def check_packed(batch: Mapping[str, Any]) -> None:
    """A packed batch has exactly :data:`PACKED_KEYS`, all integer arrays of one 2-D shape.

    Raises:
        ValueError: a key missing or unknown, a shape or dtype that does not fit, each named.
    """
    keys = set(batch)
    if keys != set(PACKED_KEYS):
        wanted = "; ".join(f"{k!r}: {v}" for k, v in PACKED_KEYS.items())
        missing, extra = sorted(set(PACKED_KEYS) - keys), sorted(keys - set(PACKED_KEYS))
        raise ValueError(
            f"A packed batch is a dict of three (B, T + 1) arrays, {wanted}; got the keys "
            f"{sorted(keys)} (missing {missing}, unknown {extra}). Build it with those keys, or "
            "pass a plain (B, T + 1) array of token ids to score every token."
        )
    shapes = {k: tuple(jnp.shape(v)) for k, v in batch.items()}
    dtypes = {k: jnp.result_type(v) for k, v in batch.items()}
    if len(set(shapes.values())) != 1 or len(shapes["tokens"]) != 2:
        raise ValueError(
            f"The arrays of a packed batch must share one (B, T + 1) shape, got {shapes}. Each "
            "row holds T + 1 tokens with the mask and segment id of each."
        )
    if not all(jnp.issubdtype(d, jnp.integer) for d in dtypes.values()):
        shown = {k: str(d) for k, d in dtypes.items()}
        raise ValueError(
            f"The arrays of a packed batch must be integers (token ids, a 0/1 mask, segment "
            f"ids), got the dtypes {shown}. Convert them, e.g. mask.astype(np.uint8)."
        )


def loss_weights(batch: Any) -> tuple[Array, Array]:
    """``(answers, examples)``, each ``(B, T)`` float32: the weight of each target token.

    ``answers`` is the loss mask of the targets (``mask[:, 1:]``), what :func:`loss_fn` averages;
    ``examples`` counts every target inside an example (prompts too): its segment is not padding
    and is the one of the token before it, so no target is predicted across an example's start.
    A plain batch weighs every target 1 in both.

    Example:
        >>> import numpy as np
        >>> batch = {"tokens": np.array([[5, 6, 7, 8, 9, 0]]),
        ...          "mask": np.array([[0, 0, 1, 0, 1, 0]]),
        ...          "segments": np.array([[1, 1, 1, 2, 2, 0]])}
        >>> [w.tolist() for w in loss_weights(batch)]
        [[[0.0, 1.0, 0.0, 1.0, 0.0]], [[1.0, 1.0, 0.0, 1.0, 0.0]]]
    """
    if not is_packed(batch):
        ones = jnp.ones(jnp.shape(batch[:, 1:]), jnp.float32)
        return ones, ones
    check_packed(batch)
    seg = jnp.asarray(batch["segments"])
    inside = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] != 0)
    answers = jnp.asarray(batch["mask"])[:, 1:] != 0
    return answers.astype(jnp.float32), inside.astype(jnp.float32)


def next_token_losses(
    params: bx.Params,
    batch: Any,
    config: Any,
    constrain: Any = no_constraint,
    *,
    dropout_key: Array | None = None,
) -> Array:
    """Next-token cross-entropy (nats) of every target of ``batch``, unweighted: ``(B, T)``.

    A packed batch's rows are read with their segment ids; its weights are :func:`loss_weights`.
    """
    return losses_and_stats(params, batch, config, constrain, dropout_key=dropout_key)[0]


def losses_and_stats(
    params: bx.Params,
    batch: Any,
    config: Any,
    constrain: Any = no_constraint,
    *,
    dropout_key: Array | None = None,
) -> tuple[Array, dict[str, Array]]:
    """:func:`next_token_losses` and the model's mixture-of-experts stats (``{}`` if dense):
    ``aux_loss`` and ``expert_fraction`` (``moe_stats``), from the same forward pass."""
    if is_packed(batch):
        check_packed(batch)
        tokens, segments = jnp.asarray(batch["tokens"]), jnp.asarray(batch["segments"])[:, :-1]
    else:
        tokens, segments = batch, None
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    model = gpt(config)
    training = dropout_key is not None and drops(model.cfg)
    if training:  # the Rng state lives only inside this call: not trained, saved or sharded
        params = params.merge(model.rng.seed(bx.Params(), seed=dropout_key))
    options = {"segment_ids": segments, "is_training": training, "constrain": constrain}
    (logits, stats), _ = model(params, inputs, stats=True, **options)
    logz = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return logz - picked, stats


def with_aux(loss: Array, config: Any, stats: dict[str, Array], share: float = 1.0) -> Array:
    """``loss`` plus ``share`` of what the experts' balance adds to the training loss,
    ``model.router_aux_loss_coef * aux_loss``. A dense model (``stats`` empty) or a coefficient
    of 0 adds nothing: ``loss`` itself, so a dense step computes exactly what it did before."""
    coef = getattr(config, "model", config).router_aux_loss_coef
    if not stats or not coef:
        return loss
    return loss + (coef * share) * stats["aux_loss"]


def train_loss(
    params: bx.Params,
    batch: Any,
    config: Any,
    constrain: Any = no_constraint,
    *,
    dropout_key: Array | None = None,
) -> tuple[Array, dict[str, Array]]:
    """The training objective of ``batch`` and what it is made of: ``(loss, stats)``.

    ``loss`` is :func:`loss_fn`'s mean next-token cross-entropy plus, for a mixture of experts
    (``model.n_experts``), ``model.router_aux_loss_coef * aux_loss``, the load-balancing loss
    of Switch and Mixtral over all the layers (as transformers adds it). ``stats`` holds
    ``cross_entropy`` (what :func:`loss_fn` gives) and, for a mixture of experts,
    ``aux_loss`` and ``expert_fraction`` ``(n_experts,)``, the share of the router's picks each
    expert got, averaged over the layers. A dense model's ``loss`` is its cross-entropy.
    The train step differentiates the same sum (over its micro-batches).

    Example:
        >>> import jax, dataclasses
        >>> from gpt_models import PRESETS, init_params, train_loss
        >>> cfg = dataclasses.replace(PRESETS["llama-tiny"].model, n_layers=1, n_experts=4)
        >>> batch = jax.random.randint(jax.random.key(1), (2, 9), 0, 256)
        >>> loss, stats = train_loss(init_params(cfg, jax.random.key(0)), batch, cfg)
        >>> sorted(stats), stats["expert_fraction"].shape
        (['aux_loss', 'cross_entropy', 'expert_fraction'], (4,))
    """
    losses, stats = losses_and_stats(params, batch, config, constrain, dropout_key=dropout_key)
    if is_packed(batch):
        weights = loss_weights(batch)[0]
        ce = jnp.sum(losses * weights) / jnp.maximum(weights.sum(), 1.0)
    else:
        ce = losses.mean()
    return with_aux(ce, config, stats), {"cross_entropy": ce, **stats}


def token_losses(
    params: bx.Params,
    batch: Any,
    config: Any,
    constrain: Any = no_constraint,
    *,
    dropout_key: Array | None = None,
) -> Array:
    """Next-token cross-entropy (nats) of each target of ``batch``, weighted: ``(B, T)``.

    A plain ``(B, T + 1)`` batch: every position's loss. A packed batch: each loss times its
    mask weight (0 where the loss does not count). :func:`loss_fn` divides their sum by the
    weights'; the train step of a data mixture also takes each row's mean, the loss of the source
    the row came from.
    """
    losses = next_token_losses(params, batch, config, constrain, dropout_key=dropout_key)
    return losses if not is_packed(batch) else losses * loss_weights(batch)[0]


def loss_fn(
    params: bx.Params,
    batch: Any,
    config: Any,
    constrain: Any = no_constraint,
    *,
    dropout_key: Array | None = None,
) -> Array:
    """Mean next-token cross-entropy (nats per counted token) of ``batch``.

    ``batch`` is a ``(B, T + 1)`` array of token ids (every next token counts), or a packed
    batch: a dict of ``(B, T + 1)`` arrays ``tokens``, ``mask`` and ``segments``, whose loss is
    ``sum(loss * mask) / sum(mask)`` over the targets ``tokens[:, 1:]`` weighted by
    ``mask[:, 1:]``, each example attended and positioned as if alone (0 when nothing counts).

    ``constrain(x, logical_axes)`` places activations (the trainer passes ``paramspec.constrain``
    with its mesh and rules). ``dropout_key`` (a ``jax.random.key``) makes it a training loss:
    with ``model.dropout`` or ``lora.dropout`` > 0 the model's Rng is seeded with it and the
    forward pass drops; the same key gives the same masks. Without it (evaluation) nothing is
    dropped.

    Raises:
        ValueError: a packed batch whose keys, shapes or dtypes do not fit (named in the message).

    Example:
        >>> import jax, dataclasses, math
        >>> from gpt_models import PRESETS, init_params, loss_fn
        >>> cfg = dataclasses.replace(PRESETS["tiny"].model, n_layers=1)
        >>> batch = jax.random.randint(jax.random.key(1), (2, 9), 0, 256)
        >>> loss = loss_fn(init_params(cfg, jax.random.key(0)), batch, cfg)
        >>> abs(float(loss) - math.log(256)) < 0.3  # the untrained model is near uniform
        True
    """
    losses = token_losses(params, batch, config, constrain, dropout_key=dropout_key)
    if not is_packed(batch):
        return losses.mean()
    return losses.sum() / jnp.maximum(loss_weights(batch)[0].sum(), 1.0)


def packed_sums(
    params: bx.Params,
    batch: Any,
    *,
    config: Any,
    constrain: Any = no_constraint,
    dropout_key: Array | None = None,
) -> tuple[dict[str, Array], Array]:
    """The sums a packed batch's losses are made of, and each row's masked loss ``(B,)``.

    ``answers`` is ``sum(loss * mask)`` and ``answer_tokens`` ``sum(mask)``; ``all_tokens`` and
    ``example_tokens`` the same over every target inside an example (``loss_weights``). Sums, not
    means: a loss over several micro-batches (or eval batches) is their totals' ratio.
    """
    losses = next_token_losses(params, batch, config, constrain, dropout_key=dropout_key)
    return sums_of(losses, batch)


def sums_of(losses: Array, batch: Any) -> tuple[dict[str, Array], Array]:
    """:func:`packed_sums` of a packed batch's ``losses`` (``next_token_losses``), computed."""
    answers, examples = loss_weights(batch)
    sums = {
        "answers": jnp.sum(losses * answers),
        "answer_tokens": jnp.sum(answers),
        "all_tokens": jnp.sum(losses * examples),
        "example_tokens": jnp.sum(examples),
    }
    rows = jnp.sum(losses * answers, axis=-1) / jnp.maximum(jnp.sum(answers, axis=-1), 1.0)
    return sums, rows
