"""Qwen2/2.5, Qwen3, Mistral and OLMo 2: Llama's layout with one option each.

- Qwen2 (``Qwen2ForCausalLM``): biases on the query, key and value projections (``qkv_bias``).
- Qwen3 (``Qwen3ForCausalLM``): an RMSNorm on each head's queries and keys (``qk_norm``), and a
  head size of its own (``head_dim``, e.g. 128 with 1024 features and 16 heads).
- Mistral (``MistralForCausalLM``): a sliding window on every layer (``sliding_window``; null
  in the later Mistral releases: none).
- OLMo 2 (``Olmo2ForCausalLM``): the norms after each sublayer instead of before
  (``norm_placement = "post"``), and one QK-norm over all heads' features (``qk_norm_scope =
  "all"``).

The Qwen families can window some layers (``use_sliding_window``, from ``max_window_layers``
on); no released Qwen2.5 or Qwen3 model does, and it is refused.
"""

from __future__ import annotations

from typing import Any, ClassVar

from .._config.model import ModelConfig
from .hf_layout import ConfigReader
from .hf_llama import FULL, LlamaLayout

_LLAMA_NEEDS = LlamaLayout.needs


class _QwenLayout(LlamaLayout):
    false_flags: tuple[str, ...] = ()

    def family_reads(self, read: ConfigReader) -> dict[str, Any]:
        return {"use_sliding_window": read.flag("use_sliding_window", False)}

    def family_settings(self, read: ConfigReader, reads: dict[str, Any], layers: int) -> dict:
        if reads["use_sliding_window"]:
            read.refuse("use_sliding_window", True, "false (every layer attends to everything)")
        types = read.raw.get("layer_types")
        if types is not None and types != [FULL] * layers:
            read.refuse("layer_types", types, f"{layers} times {FULL!r}")
        return {}

    def family_config(self, m: ModelConfig) -> dict[str, Any]:
        return {
            "use_sliding_window": False,
            "sliding_window": None,
            "max_window_layers": m.n_layers,
            "layer_types": [FULL] * m.n_layers,
        }


class Qwen2Layout(_QwenLayout):
    architecture = "Qwen2ForCausalLM"
    model_type = "qwen2"
    name = "Qwen2"
    summary = "Llama with query/key/value biases"
    needs: ClassVar[dict[str, object]] = {**_LLAMA_NEEDS, "qkv_bias": True}


class Qwen3Layout(_QwenLayout):
    architecture = "Qwen3ForCausalLM"
    model_type = "qwen3"
    name = "Qwen3"
    summary = "Llama with a QK-norm per head"
    needs: ClassVar[dict[str, object]] = {**_LLAMA_NEEDS, "qk_norm": True, "qk_norm_scope": "head"}
    false_flags = ("attention_bias",)


class MistralLayout(LlamaLayout):
    architecture = "MistralForCausalLM"
    model_type = "mistral"
    name = "Mistral"
    summary = "Llama with a sliding window on every layer"
    needs: ClassVar[dict[str, object]] = {**_LLAMA_NEEDS, "global_every": 0}
    free: tuple[str, ...] = ("d_head", "sliding_window", "rope_scaling")
    false_flags = ()

    def family_reads(self, read: ConfigReader) -> dict[str, Any]:
        return {"sliding_window": read.int("sliding_window", 0)}

    def family_settings(self, read: ConfigReader, reads: dict[str, Any], layers: int) -> dict:
        return {"sliding_window": reads["sliding_window"]}

    def family_config(self, m: ModelConfig) -> dict[str, Any]:
        return {"sliding_window": m.sliding_window or None}


class Olmo2Layout(LlamaLayout):
    architecture = "Olmo2ForCausalLM"
    model_type = "olmo2"
    name = "OLMo 2"
    summary = "Llama with norms after each sublayer and a QK-norm over all heads"
    needs: ClassVar[dict[str, object]] = {
        **_LLAMA_NEEDS,
        "qk_norm": True,
        "qk_norm_scope": "all",
        "norm_placement": "post",
    }
    false_flags = ("attention_bias",)


QWEN2 = Qwen2Layout()
QWEN3 = Qwen3Layout()
MISTRAL = MistralLayout()
OLMO2 = Olmo2Layout()
