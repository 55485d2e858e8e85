"""The Hugging Face families ``gpt import`` and ``gpt export`` know, and the pick of one.

The registry imports :mod:`hf_layout` and every family module; none of them imports this one, so
there is no import cycle (the families subclass ``hf_layout.Layout``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._config.model import ModelConfig
from .._errors import CheckpointFormatError
from .hf_dense import MISTRAL, OLMO2, QWEN2, QWEN3
from .hf_gemma import GEMMA2, GEMMA3
from .hf_gpt2 import GPT2
from .hf_layout import Layout
from .hf_llama import LLAMA
from .hf_moe import MIXTRAL, QWEN3_MOE

# Export picks the first family that represents a model exactly: the plainest first.
FAMILIES: tuple[Layout, ...] = (
    GPT2, LLAMA, QWEN2, QWEN3, MISTRAL, OLMO2, GEMMA2, GEMMA3, MIXTRAL, QWEN3_MOE,
)  # fmt: skip
# The families the hints of a refused export name: the two a new run trains most easily.
_HINTED = (GPT2, LLAMA)


def layouts() -> dict[str, Layout]:
    """The families by transformers class.

    Example:
        >>> list(layouts())[:3]
        ['GPT2LMHeadModel', 'LlamaForCausalLM', 'Qwen2ForCausalLM']
    """
    return {layout.architecture: layout for layout in FAMILIES}


def layout_of(raw: dict[str, Any], source: Path) -> Layout:
    """The family config.json names (``architectures``, else ``model_type``), or a refusal."""
    found = layouts()
    archs = raw.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        arch: Any = archs[0]
    else:
        kind = raw.get("model_type")
        by_type = {layout.model_type: layout for layout in found.values()}
        if isinstance(kind, str) and kind in by_type:
            return by_type[kind]
        arch = archs if archs is not None else kind
    if arch not in found:
        raise CheckpointFormatError(
            f"{source}: architecture {arch!r} cannot be imported; supported: "
            f"{', '.join(found)} (config.json 'architectures')."
        )
    return found[arch]


def export_layout(m: ModelConfig) -> Layout:
    """The family ``m`` exports as, or a :class:`CheckpointFormatError` that names every
    ``--set`` flag a run needs to train an exportable model of the plainest families."""
    for layout in FAMILIES:
        if not layout.lacking(m):
            return layout
    lacks = {layout.architecture: layout.lacking(m) for layout in _HINTED}
    hints = [
        " ".join(f"--set model.{k}={str(v).lower()}" for k, v in lacks[layout.architecture].items())
        + f" ({layout.name})"
        for layout in _HINTED
    ]
    fix = (
        f"The architecture is fixed when a run starts: train one with {' or '.join(hints)}; "
        "this run stays readable by gpt sample and gpt eval."
    )
    near = [layout for layout in FAMILIES if _shaped_like(m, layout)]
    if near:  # the family whose base shape it has, and the first option it has no place for
        layout = min(near, key=lambda lay: len(lay.lacking(m)))
        key, value = next(iter(layout.lacking(m).items()))
        raise CheckpointFormatError(
            f"model.{key} = {getattr(m, key)!r} has no {layout.architecture} equivalent; "
            f"only models with model.{key} = {value!r} can be exported as {layout.name}. {fix}"
        )
    kinds = " nor ".join(f"{layout.name} ({layout.summary})" for layout in _HINTED)
    others = ", ".join(layout.name for layout in FAMILIES if layout not in _HINTED)
    raise CheckpointFormatError(
        f"This model (model.norm = {m.norm!r}, pos = {m.pos!r}, mlp = {m.mlp!r}, tie_embeddings = "
        f"{m.tie_embeddings}, bias = {m.bias}) is neither {kinds}, nor one of their variants "
        f"({others}), so it cannot be exported. {fix}"
    )


def _shaped_like(m: ModelConfig, layout: Layout) -> bool:
    """Whether ``m`` has the basic settings (norm, positions, MLP, ...) ``layout`` needs."""
    return all(getattr(m, k) == v for k, v in layout.needs.items() if k in _BASIC)


_BASIC = ("norm", "pos", "mlp", "tie_embeddings", "bias", "norm_placement")
