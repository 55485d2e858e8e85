"""Mixtral (``MixtralForCausalLM``) and Qwen3-MoE (``Qwen3MoeForCausalLM``): Mistral's and
Qwen3's layouts with a mixture of SwiGLU experts in place of the MLP.

Transformers saves each expert's projections on their own (``experts.{j}.w1``, ``w3``, ``w2`` in
Mixtral; ``experts.{j}.gate_proj``, ``up_proj``, ``down_proj`` in Qwen3-MoE), ``(out, in)``;
ours are stacked over the experts, ``(E, in, out)``, so one param is made of ``E`` tensors. The
router (``gate``) is ``(E, D)``. Mixtral renormalises the picked experts' weights (a softmax over
the top-k logits); Qwen3-MoE does when ``norm_topk_prob``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from .._config.model import ModelConfig
from .hf_dense import MistralLayout, Qwen3Layout
from .hf_layout import BLOCK, ConfigReader, Entry, json_text, one

_MOE = ("n_experts", "experts_per_token", "moe_d_ff", "moe_norm_topk")


def _experts(m: ModelConfig, layer: str, names: tuple[str, str, str]) -> list[Entry]:
    """The stacked ``gate``, ``up`` and ``down`` params from each expert's three tensors."""
    E, D, F = m.n_experts, m.d_model, m.moe_d_ff or m.ff_dim
    out = []
    for ours, theirs, shape in zip(
        ("gate", "up", "down"), names, ((F, D), (F, D), (D, F)), strict=True
    ):
        hf = tuple(f"{layer}experts.{j}.{theirs}.weight" for j in range(E))
        out.append(
            Entry(
                ((*BLOCK, "moe", ours),),
                hf,
                (shape,) * E,
                lambda *ws: (np.stack([w.T for w in ws]),),
                lambda a: tuple(a[j].T for j in range(a.shape[0])),
                True,
            )
        )
    router = one((*BLOCK, "moe", "router"), f"{layer}gate.weight", (E, D), _t, _t)
    return [router, *out]


def aux_loss_coef(read: ConfigReader) -> float:
    """``router_aux_loss_coef``: the weight of the load-balancing loss in training, a number
    >= 0 (transformers' default 0.001 when absent)."""
    value = read.raw.get("router_aux_loss_coef")
    if value is None:
        return 0.001
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    read.problems.append(f"router_aux_loss_coef = {json_text(value)} (expected a number >= 0)")
    return 0.0


def _t(a: np.ndarray) -> np.ndarray:
    return a.T


def _dense_mlp(entries: list[Entry]) -> list[Entry]:
    """``entries`` without the dense MLP's (the experts replace it)."""
    return [e for e in entries if not any(p[len(BLOCK)] == "mlp" for p in e.ours if p[:2] == BLOCK)]


class MixtralLayout(MistralLayout):
    architecture = "MixtralForCausalLM"
    model_type = "mixtral"
    name = "Mixtral"
    summary = "Mistral with a mixture of experts, top-k renormalised"
    needs: ClassVar[dict[str, object]] = {**MistralLayout.needs, "moe_norm_topk": True}
    free = (*MistralLayout.free, "n_experts", "experts_per_token", "moe_d_ff")

    def family_reads(self, read: ConfigReader) -> dict[str, Any]:
        return {
            **super().family_reads(read),
            "experts": read.int("num_local_experts"),
            "k": read.int("num_experts_per_tok"),
            "jitter": read.raw.get("router_jitter_noise") or 0,
            "aux": aux_loss_coef(read),
        }

    def family_settings(self, read: ConfigReader, reads: dict[str, Any], layers: int) -> dict:
        if reads["jitter"]:
            read.refuse("router_jitter_noise", reads["jitter"], "0 (no noise on the router)")
        return {
            **super().family_settings(read, reads, layers),
            "n_experts": reads["experts"],
            "experts_per_token": reads["k"],
            "router_aux_loss_coef": reads["aux"],
        }

    def family_config(self, m: ModelConfig) -> dict[str, Any]:
        return {
            **super().family_config(m),
            "num_local_experts": m.n_experts,
            "num_experts_per_tok": m.experts_per_token,
            "router_jitter_noise": 0.0,
            "router_aux_loss_coef": m.router_aux_loss_coef,
        }

    def entries(self, m: ModelConfig) -> list[Entry]:
        layer = "model.layers.{i}.block_sparse_moe."
        return _dense_mlp(super().entries(m)) + _experts(m, layer, ("w1", "w3", "w2"))


class Qwen3MoeLayout(Qwen3Layout):
    architecture = "Qwen3MoeForCausalLM"
    model_type = "qwen3_moe"
    name = "Qwen3-MoE"
    summary = "Qwen3 with a mixture of experts on every layer"
    free = (*Qwen3Layout.free, *_MOE)

    def family_reads(self, read: ConfigReader) -> dict[str, Any]:
        experts = "num_experts" if "num_experts" in read.raw else "num_local_experts"
        return {
            **super().family_reads(read),
            "experts": read.int(experts),
            "k": read.int("num_experts_per_tok"),
            "d_ff": read.int("moe_intermediate_size"),
            "norm": read.flag("norm_topk_prob", False),
            "step": read.int("decoder_sparse_step", 1),
            "dense": read.raw.get("mlp_only_layers") or [],
            "aux": aux_loss_coef(read),
        }

    def family_settings(self, read: ConfigReader, reads: dict[str, Any], layers: int) -> dict:
        if reads["step"] != 1:
            read.refuse("decoder_sparse_step", reads["step"], "1 (experts on every layer)")
        if reads["dense"]:
            read.refuse("mlp_only_layers", reads["dense"], "[] (experts on every layer)")
        return {
            **super().family_settings(read, reads, layers),
            "n_experts": reads["experts"],
            "experts_per_token": reads["k"],
            "router_aux_loss_coef": reads["aux"],
            "moe_d_ff": reads["d_ff"],
            "moe_norm_topk": reads["norm"],
        }

    def family_config(self, m: ModelConfig) -> dict[str, Any]:
        return {
            **super().family_config(m),
            "num_experts": m.n_experts,
            "num_experts_per_tok": m.experts_per_token,
            "moe_intermediate_size": m.moe_d_ff or m.ff_dim,
            "norm_topk_prob": m.moe_norm_topk,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "router_aux_loss_coef": m.router_aux_loss_coef,
        }

    def entries(self, m: ModelConfig) -> list[Entry]:
        layer = "model.layers.{i}.mlp."
        return _dense_mlp(super().entries(m)) + _experts(
            m, layer, ("gate_proj", "up_proj", "down_proj")
        )


MIXTRAL = MixtralLayout()
QWEN3_MOE = Qwen3MoeLayout()
