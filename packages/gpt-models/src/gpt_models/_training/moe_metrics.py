"""A mixture of experts' metrics: its load-balancing loss and the share of tokens each expert got.

The columns stay few whatever the model: one per expert up to :data:`MAX_EXPERT_COLUMNS`
experts, and past that the spread of the shares (min, max, standard deviation), which is what
one reads a many-expert router's balance by.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

# Experts up to which each expert's share gets a column of its own (metrics.csv, TensorBoard,
# wandb): Mixtral's 8 and most models' up to 64; Qwen3-MoE's 128 would be 128 columns.
MAX_EXPERT_COLUMNS = 64


def moe_metrics(stats: dict[str, Any]) -> dict[str, Any]:
    """``moe/aux_loss`` and ``moe/expert_fraction/<i>`` (or ``/min``, ``/max``, ``/std`` past
    :data:`MAX_EXPERT_COLUMNS` experts) from a model's MoE ``stats``; ``{}`` for a dense model.

    ``expert_fraction`` is the share of the router's picks each expert got (they sum to 1;
    ``1 / n_experts`` each when balanced), averaged over the layers and the step's micro-batches.

    Example:
        >>> import jax.numpy as jnp
        >>> stats = {"aux_loss": jnp.float32(2.0), "expert_fraction": jnp.array([0.75, 0.25])}
        >>> {k: float(v) for k, v in moe_metrics(stats).items()}
        {'moe/aux_loss': 2.0, 'moe/expert_fraction/0': 0.75, 'moe/expert_fraction/1': 0.25}
    """
    if not stats:
        return {}
    fraction = stats["expert_fraction"]
    out = {"moe/aux_loss": stats["aux_loss"]}
    if fraction.shape[-1] <= MAX_EXPERT_COLUMNS:
        return out | {f"moe/expert_fraction/{i}": fraction[i] for i in range(fraction.shape[-1])}
    spread = {"min": fraction.min(), "max": fraction.max(), "std": jnp.std(fraction)}
    return out | {f"moe/expert_fraction/{k}": v for k, v in spread.items()}
