"""``[lora]``: low-rank adapters on the transformer's projections, as config values.

With ``lora.rank > 0`` every block's targeted projections get LoRA adapters (blox's ``bx.LoRA``)
and only those are trained; the rest of the model is frozen. The targets are named the way the
projections are usually called:

=========  ================================================================================
``q``      the attention's query projection (Llama ``q_proj``; GPT-2's part of ``c_attn``)
``k``      the key projection (``k_proj``)
``v``      the value projection (``v_proj``)
``o``      the attention's output projection (``o_proj``; GPT-2 ``attn.c_proj``)
``gate``   the MLP's gate projection (``gate_proj``; ``model.mlp`` swiglu or geglu)
``up``     the MLP's input projection (``up_proj``; GPT-2 ``mlp.c_fc``)
``down``   the MLP's output projection (``down_proj``; GPT-2 ``mlp.c_proj``)
``attn``   q, k, v and o
``mlp``    every projection of the MLP (gate when there is one, up, down)
=========  ================================================================================
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from core_primitives import did_you_mean

if TYPE_CHECKING:  # schema.py imports this module
    from .model import ModelConfig
    from .schema import Config

# A target -> the parameter path suffix of the kernel it adapts, under a block.
KERNELS: dict[str, tuple[str, ...]] = {
    "q": ("attn", "query"),
    "k": ("attn", "key"),
    "v": ("attn", "value"),
    "o": ("attn", "out"),
    "gate": ("mlp", "gate_0", "kernel"),
    "up": ("mlp", "linear_0", "kernel"),
    "down": ("mlp", "linear_1", "kernel"),
}
GROUPS: dict[str, tuple[str, ...]] = {"attn": ("q", "k", "v", "o"), "mlp": ("gate", "up", "down")}
TARGET_NAMES = (*KERNELS, *GROUPS)
_LISTED = ", ".join(TARGET_NAMES)  # in the docs' order: attention, MLP, groups


@dataclasses.dataclass(frozen=True)
class LoRAConfig:
    """LoRA adapters: with rank > 0 only they are trained, the model's own weights stay frozen.

    Attributes:
        rank: the adapters' inner size r (0 = no LoRA: every weight is trained); 4 to 64 are
            common, and it must not exceed a targeted projection's input or output size.
        alpha: the LoRA path is scaled by alpha / rank (0 = rank, a scale of 1); PEFT's lora_alpha.
        dropout: probability of zeroing an input feature of the LoRA path in training, in [0, 1).
        targets: the projections to adapt, comma-separated: q, k, v, o (attention), gate, up,
            down (MLP), or the groups attn and mlp.
    """

    rank: int = 0
    alpha: float = 0.0
    dropout: float = 0.0
    targets: str = "q,v"

    @property
    def enabled(self) -> bool:
        """Whether the run trains adapters (``rank > 0``)."""
        return self.rank > 0

    @property
    def scale_alpha(self) -> float:
        """``alpha``, with 0 standing for ``rank`` (a scale of 1)."""
        return self.alpha or float(self.rank)

    def kernels(self, gated: bool = True) -> tuple[str, ...]:
        """The targets as single projections (groups expanded, duplicates dropped), in the
        order of ``KERNELS``; ``gate`` only for a gated MLP.

        Example:
            >>> LoRAConfig(rank=8, targets="v, attn").kernels()
            ('q', 'k', 'v', 'o')
        """
        named: set[str] = set()
        for name in _names(self.targets):
            named.update(GROUPS.get(name, (name,)))
        return tuple(k for k in KERNELS if k in named and (gated or k != "gate"))


def _names(targets: str) -> list[str]:
    return [t.strip() for t in targets.split(",") if t.strip()]


def lora_problems(cfg: Config) -> list[str]:
    """What is wrong with the ``[lora]`` section of ``cfg``, alone or with its model and
    optimizer."""
    lora, m = cfg.lora, cfg.model
    problems = []
    if lora.enabled and cfg.train.optimizer == "muon":
        problems.append(
            "train.optimizer = 'muon' with lora.rank > 0: Muon trains hidden matrices, and the "
            "LoRA adapters (the only trained weights) are low-rank factors it leaves to its AdamW "
            "part without weight decay. Use --set train.optimizer=adamw with LoRA"
        )
    if lora.rank < 0:
        problems.append(
            f"lora.rank = {lora.rank} must be >= 0: 0 turns LoRA off, a positive rank (e.g. 8) "
            "trains adapters of that inner size"
        )
    if not (math.isfinite(lora.alpha) and lora.alpha >= 0):
        problems.append(
            f"lora.alpha = {lora.alpha} must be a finite number >= 0: the LoRA path is scaled by "
            "alpha / rank (0 means alpha = rank, a scale of 1), e.g. --set lora.alpha=16"
        )
    if not 0.0 <= lora.dropout < 1.0:
        problems.append(
            f"lora.dropout = {lora.dropout} must be in [0, 1): the probability of zeroing an "
            "input feature of the LoRA path in training, e.g. 0.05 (0 = off)"
        )
    names = _names(lora.targets)
    unknown = [n for n in names if n not in TARGET_NAMES]
    for name in unknown:
        problems.append(
            f"lora.targets names {name!r}, which is no projection; valid targets: "
            f"{_LISTED}, comma-separated (e.g. 'q,v')." + did_you_mean(name, TARGET_NAMES, n=1)
        )
    if not names:
        problems.append(
            f"lora.targets = {lora.targets!r} names no projection; give at least one of "
            f"{_LISTED}, comma-separated (e.g. 'q,v')"
        )
    elif not unknown and m.n_experts and {"gate", "up", "down", "mlp"} & set(names):
        problems.append(
            f"lora.targets = {lora.targets!r} names MLP projections, but model.n_experts = "
            f"{m.n_experts}: the experts take no adapters; target the attention, e.g. "
            "--set lora.targets=attn"
        )
    elif not unknown and "gate" in names and not m.gated:
        problems.append(
            f"lora.targets names 'gate', but model.mlp = {m.mlp!r} has no gate projection (only "
            "swiglu and geglu do); target up and down instead, e.g. --set lora.targets=q,v,up,down"
        )
    if lora.rank > 0 and not unknown:
        problems += _rank_problems(lora, m)
    return problems


def _rank_problems(lora: LoRAConfig, m: ModelConfig) -> list[str]:
    # A rank above a projection's smaller side adds parameters and no expressiveness; blox refuses
    # it at the first call, too late for a config check (after the run folder is made).
    d, kv, ff = m.d_model, m.kv_heads * m.head_dim, min(m.d_model, m.ff_dim)
    sizes = {"q": d, "k": min(d, kv), "v": min(d, kv), "o": d, "gate": ff, "up": ff, "down": ff}
    kernels = lora.kernels(gated=m.gated)
    too_small = [k for k in kernels if lora.rank > sizes[k]]
    if not too_small:
        return []
    most = min(sizes[k] for k in kernels)
    return [
        f"lora.rank = {lora.rank} is larger than the projection(s) {', '.join(too_small)} allow: "
        f"the rank must be at most the smaller of a projection's input and output sizes, here "
        f"{most}. Lower it, e.g. --set lora.rank={min(8, most)}"
    ]
