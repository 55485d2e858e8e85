"""A model with LoRA adapters: the ``bx.LoRA`` of a model section that carries ``[lora]``.

A ``Config`` with ``lora.rank > 0`` holds its model section as a ``LoRAModel`` (``_config``),
so ``cfg.model`` alone builds the adapted model, wherever it travels.
"""

from __future__ import annotations

from typing import Any

import blox as bx

from .._config.lora import KERNELS, LoRAConfig
from .._config.model import LoRAModel, ModelConfig

BLOCK_PATH = ("gpt", "model", "blocks", "block")


def lora_config(model: ModelConfig) -> LoRAConfig | None:
    """The ``[lora]`` section a model section carries (``None``: a plain model)."""
    return model.lora if isinstance(model, LoRAModel) and model.lora.enabled else None


def make_lora(model: ModelConfig, rng: bx.Rng) -> bx.LoRA | None:
    """The ``bx.LoRA`` the blocks of ``model`` are built with (``None`` without LoRA).

    Its targets are the block kernels ``lora.targets`` names, matched on the end of each
    kernel's parameter path (inside the stacked blocks, where no other layer has them).
    """
    lora = lora_config(model)
    if lora is None:
        return None
    wanted = {KERNELS[k] for k in lora.kernels(gated=model.gated)}

    def targets(path: tuple[str, ...]) -> bool:
        return path[: len(BLOCK_PATH)] == BLOCK_PATH and any(path[-len(k) :] == k for k in wanted)

    return bx.LoRA(
        lora.rank, alpha=lora.scale_alpha, dropout=lora.dropout, targets=targets, rng=rng
    )


def is_adapter(path: tuple[str, ...]) -> bool:
    """Whether ``path`` is a LoRA adapter's parameter (``*lora_a``, ``*lora_b``)."""
    return path[-1].endswith(("lora_a", "lora_b"))


def trainable_count(params: Any) -> tuple[int, int]:
    """``(trainable, total)`` parameter counts of ``params`` (arrays or shape structs)."""
    trainable = total = 0
    for param in params.values():
        n = 1
        for d in param.value.shape:
            n *= d
        total += n
        trainable += n if param.trainable else 0
    return trainable, total


def lora_summary(model: ModelConfig) -> str:
    """``"rank 8 (alpha 16) on q,v"``: the adapters of a model section, for messages."""
    lora = lora_config(model)
    if lora is None:
        return "no LoRA"
    kernels = ",".join(lora.kernels(gated=model.gated))
    return f"rank {lora.rank} (alpha {lora.scale_alpha:g}) on {kernels}"
