"""Training FLOPs per token, the numerator of MFU: what a run's train step computes per token.

A full run trains every weight; a LoRA run (``[lora]`` with ``rank > 0``) differentiates the
adapters alone, so its frozen weights cost no weight gradient and its adapters add matmuls of
their own. Both are counted here, from the config alone, so the progress line, the metrics and
``--dry-run`` agree on one number.
"""

from __future__ import annotations

from typing import Any

from .._config.model import ModelConfig
from .lora import lora_config


def _projections(model: ModelConfig) -> dict[str, tuple[int, int]]:
    """``(inputs, outputs)`` of each block's projections, keyed by their ``lora.targets`` names."""
    d, f = model.d_model, model.ff_dim
    q, kv = model.n_heads * model.head_dim, model.kv_heads * model.head_dim
    shapes = {"q": (d, q), "k": (d, kv), "v": (d, kv), "o": (q, d), "up": (d, f), "down": (f, d)}
    if model.gated:
        shapes["gate"] = (d, f)
    if model.n_experts:  # each token runs top-k experts' gate, up and down, and the router
        k, f = model.experts_per_token, model.moe_d_ff or f
        shapes.update(gate=(d, k * f), up=(d, k * f), down=(k * f, d), router=(d, model.n_experts))
    return shapes


def flops_per_token(config: Any) -> float:
    """Training FLOPs per token (forward and backward) of the run ``config`` describes.

    A full run counts ``6 * N_matmul + 12 * n_layers * d_model * seq_len``: 2 FLOPs per
    multiply-add forward, and backward 2 for activation gradients and 2 for weight gradients.
    ``N_matmul`` counts the weights of every matrix multiply (attention and MLP projections and the
    output projection onto the vocabulary, tied or not) and excludes the embedding lookups; with
    ``model.n_experts`` the MLP counts the ``experts_per_token`` experts a token runs (the active
    weights) and the router; the
    second term is the attention scores and weighted sum (forward 2 + backward 4 FLOPs per
    multiply-add, over the full ``seq_len`` square, as in the PaLM paper's MFU definition), where
    ``seq_len`` is the run's training window (``data.seq_len``, else ``model.seq_len``).

    A LoRA run (a ``Config`` whose ``lora.rank > 0``) trains its adapters alone, so its frozen
    weights get no weight gradient: ``4 * N_matmul + 6 * N_lora`` plus the same attention term,
    where ``N_lora`` is ``rank * (inputs + outputs)`` of each adapted projection in each layer
    (the ``lora_a`` and ``lora_b`` matmuls, forward, activation and weight gradients). Activation
    gradients are counted through every matmul, down to the first block: an upper bound, since
    nothing below the first adapter trains and autodiff skips what only that would need (with the
    default ``q,v`` targets, the first block's key projection and its inputs' gradients).

    Args:
        config: a :class:`Config` (its ``[lora]`` section decides what trains, its window the
            attention term) or its ``ModelConfig`` (counted as a full run, every weight trained,
            at windows of ``model.seq_len``).

    Example:
        >>> import dataclasses
        >>> from gpt_models import PRESETS, LoRAConfig, flops_per_token
        >>> cfg = PRESETS["gpt2-small"]
        >>> f"{flops_per_token(cfg.model):.3g}"
        '8.55e+08'
        >>> f"{flops_per_token(dataclasses.replace(cfg, lora=LoRAConfig(rank=8))):.3g}"
        '6.09e+08'
    """
    model = getattr(config, "model", config)
    shapes = _projections(model)
    layers = model.n_layers
    n_matmul = layers * sum(i * o for i, o in shapes.values()) + model.d_model * model.vocab_size
    window = getattr(config, "window", model.seq_len)
    attention = 12.0 * layers * model.d_model * window
    lora = lora_config(model)
    if lora is None:
        return 6.0 * n_matmul + attention
    adapted = lora.kernels(gated=model.gated)
    n_lora = layers * lora.rank * sum(sum(shapes[k]) for k in adapted)
    return 4.0 * n_matmul + 6.0 * n_lora + attention


def idle_expert_params(config: Any) -> int:
    """The expert weights a token does not go through: ``n_layers * (n_experts -
    experts_per_token)`` experts' gate, up and down (0 for a dense model).

    ``param_count - idle_expert_params`` is the active parameter count, what ``flops_per_token``
    counts a token's matmuls by; memory holds every expert all the same.

    Example:
        >>> from gpt_models import PRESETS
        >>> f"{idle_expert_params(PRESETS['mixtral-8x7b']) / 1e9:.1f}B"
        '33.8B'
    """
    m = getattr(config, "model", config)
    if not m.n_experts:
        return 0
    per_expert = 3 * m.d_model * (m.moe_d_ff or m.ff_dim)
    return m.n_layers * (m.n_experts - m.experts_per_token) * per_expert
