"""A model with LoRA adapters: the model section that carries ``[lora]``, and the ``bx.LoRA`` of it.

The model is built from its model section alone (``gpt(cfg.model)``), and everything keyed by
it (compiled steps, samplers, scorers) takes that section as a static argument. A run with
``lora.rank > 0`` needs the adapters in all of them, so :func:`model_of` gives its model section
as a :class:`LoRAModel`: a ``ModelConfig`` (every key reads the same) that also carries the
``[lora]`` section, hashes apart from the plain model, and builds the adapted model. Every
function that takes "a ``Config`` or its ``ModelConfig``" (``gpt``, ``forward``, ``init_params``,
``param_specs``, ``generate``) builds the adapted model from a ``Config`` whose LoRA is on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import blox as bx

from .._config.lora import KERNELS, LoRAConfig
from .._config.schema import ModelConfig

BLOCK_PATH = ("gpt", "model", "blocks", "block")


@dataclasses.dataclass(frozen=True)
class LoRAModel(ModelConfig):
    """A model section with LoRA adapters: ``ModelConfig``'s keys and the run's ``[lora]``."""

    lora: LoRAConfig = dataclasses.field(default_factory=LoRAConfig)


def model_of(config: Any) -> ModelConfig:
    """The model section of ``config`` (a ``Config`` or a ``ModelConfig``), with its LoRA.

    Example:
        >>> import dataclasses
        >>> from gpt_models import PRESETS, LoRAConfig
        >>> cfg = dataclasses.replace(PRESETS["tiny"], lora=LoRAConfig(rank=4))
        >>> model_of(cfg).lora.rank, model_of(PRESETS["tiny"]) == PRESETS["tiny"].model
        (4, True)
    """
    model = getattr(config, "model", config)
    lora = getattr(config, "lora", None)
    if model is config or lora is None or not lora.enabled:
        return model  # type: ignore[no-any-return]
    fields = {f.name: getattr(model, f.name) for f in dataclasses.fields(ModelConfig)}
    return LoRAModel(**fields, lora=lora)


def lora_config(model: ModelConfig) -> LoRAConfig | None:
    """The ``[lora]`` section a model section carries (``None``: a plain model)."""
    lora = getattr(model, "lora", None)
    return lora if lora is not None and lora.enabled else None


def make_lora(model: ModelConfig, rng: bx.Rng) -> bx.LoRA | None:
    """The ``bx.LoRA`` the blocks of ``model`` are built with (``None`` without LoRA).

    Its targets are the block kernels ``lora.targets`` names, matched on the end of each
    kernel's parameter path (inside the stacked blocks, where no other layer has them).
    """
    lora = lora_config(model)
    if lora is None:
        return None
    wanted = {KERNELS[k] for k in lora.kernels(gated=model.mlp == "swiglu")}

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
    kernels = ",".join(lora.kernels(gated=model.mlp == "swiglu"))
    return f"rank {lora.rank} (alpha {lora.scale_alpha:g}) on {kernels}"
