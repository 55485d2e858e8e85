"""``model.attention``: refuse a core this backend cannot run, before anything is compiled."""

from __future__ import annotations

import jax

from .._config.model import ModelConfig
from .._errors import ConfigError
from .block import compute_dtype


def check_attention(cfg: ModelConfig) -> None:
    """Raise ``ConfigError`` when ``model.attention = "cudnn"`` cannot run here.

    cuDNN's fused kernel runs on NVIDIA GPUs only, in float16 or bfloat16.

    Example:
        >>> check_attention(ModelConfig(attention="xla"))  # xla and blocked run anywhere
    """
    if cfg.attention != "cudnn":
        return
    backend, dtype = jax.default_backend(), compute_dtype(cfg)
    if backend != "gpu":
        raise ConfigError(
            f"model.attention = 'cudnn' is NVIDIA's fused attention kernel, which runs on GPUs "
            f"only; this process runs on {backend!r}. Use --set model.attention=auto (the best "
            "core of each backend), blocked or xla."
        )
    if dtype.name not in ("float16", "bfloat16"):
        raise ConfigError(
            f"model.attention = 'cudnn' needs float16 or bfloat16 activations, but model.dtype "
            f"resolves to {dtype.name}. Use --set model.dtype=bfloat16 (or auto), or "
            "--set model.attention=xla."
        )
