"""The presets: named configs ``--config`` takes (``gpt_models.PRESETS``), each a ``Config``
built once at import and checked like any other."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from .lora import LoRAConfig
from .model import ModelConfig
from .schema import Config, TrainConfig


def _tiny() -> Config:
    # Tuned so that the default `gpt train` ends in a few minutes on a 2-core CPU (the docs have
    # the measurements): ReLU², RMSNorm, RoPE and QK-norm tolerate a high learning rate, which
    # matters more than size when the budget is ~1M tokens. No scan over 4 layers: on CPU the
    # unrolled loop is ~25% faster (XLA fuses across layers), and compile time is still seconds.
    model = ModelConfig(
        seq_len=128,
        d_model=128,
        n_layers=4,
        n_heads=4,
        mlp="relu2",
        norm="rmsnorm",
        pos="rope",
        qk_norm=True,
        tie_embeddings=True,
        scan_layers=False,
    )
    train = TrainConfig(
        steps=300, batch_size=32, lr=3e-3, warmup_steps=30, eval_every=100, checkpoint_every=100
    )
    return Config(model=model, train=train)


def _gpt2(d_model: int, n_layers: int, n_heads: int) -> Config:
    # GPT-2 exactly (its checkpoints import into it): linear biases, LayerNorm eps 1e-5, learned
    # positions, tanh-GELU, tied embeddings, 50257 ids padded to a multiple of 64 (50304) for fast
    # matmuls (the padded ids are masked).
    model = ModelConfig(
        vocab_size=50304,
        vocab_real=50257,
        seq_len=1024,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        mlp="gelu",
        norm="layernorm",
        pos="learned",
        tie_embeddings=True,
        remat="none",
        bias=True,
        norm_eps=1e-5,
    )
    train = TrainConfig(
        steps=5000,
        batch_size=512,
        lr=6e-4,
        warmup_steps=700,
        grad_accum=8,
        eval_every=250,
        checkpoint_every=1000,
        beta2=0.95,
    )
    return Config(model=model, train=train)


def _llama(d_model: int, n_layers: int, n_heads: int, n_kv_heads: int, d_ff: int) -> Config:
    # The Llama architecture: RMSNorm (eps 1e-5), SwiGLU, RoPE, grouped-query attention, no
    # biases, an untied output head. Sized like the small Llama-style models; the byte tokenizer
    # by default (a Llama tokenizer.json via data.tokenizer sets the vocabulary).
    model = ModelConfig(
        seq_len=256,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        d_ff=d_ff,
        mlp="swiglu",
        norm="rmsnorm",
        pos="rope",
        tie_embeddings=False,
        bias=False,
        norm_eps=1e-5,
        rope_theta=10000.0,
    )
    train = TrainConfig(
        steps=300, batch_size=32, lr=3e-3, warmup_steps=30, eval_every=100, checkpoint_every=100
    )
    return Config(model=model, train=train)


def _finetune() -> Config:
    # What `gpt train --init-from` starts with when no --config is given: the model is the source's
    # (its architecture is kept), so only the schedule matters. A tenth of tiny's learning rate,
    # a short warmup and frequent evaluations: a pretrained model drifts fast at pre-training
    # rates, and a fine-tune is short.
    tiny = _tiny()
    train = dataclasses.replace(
        tiny.train, steps=200, lr=3e-4, warmup_steps=20, eval_every=50, checkpoint_every=100
    )
    return dataclasses.replace(tiny, train=train)


def _finetune_lora() -> Config:
    # finetune with LoRA adapters on the attention's query and value projections (the original
    # LoRA recipe, and peft's default targets), rank 8 and alpha 16 (a scale of 2, the common
    # pairing). The adapters start at zero and are few, so they take a higher rate than a full
    # fine-tune: 1e-3, the usual LoRA rate for small models.
    base = _finetune()
    train = dataclasses.replace(base.train, lr=1e-3)
    return dataclasses.replace(base, train=train, lora=LoRAConfig(rank=8, alpha=16.0))


def _published(**shape: object) -> Config:
    # The published shapes of the families people fine-tune (their config.json on the Hub, read
    # 2026-11), for planning with --dry-run on the devices one has: a fine-tune of such a model
    # starts from its folder (gpt train --init-from), which brings the weights and this shape
    # anyway. seq_len is a 4096-token training context, not the model's longest; params are kept
    # in float32 for the optimizer, activations recomputed per block (remat full).
    common = {
        "norm": "rmsnorm",
        "pos": "rope",
        "mlp": "swiglu",
        "bias": False,
        "seq_len": 4096,
        "remat": "full",
    }
    model = ModelConfig(**{**common, **shape})  # type: ignore[arg-type]
    train = dataclasses.replace(_finetune().train, lr=2e-5, batch_size=16)
    return Config(model=model, train=train)


# v0.1 of Mistral 7B has the window; v0.2 and later have none.
# Hub config.json -> ours: hidden_size d_model, intermediate_size d_ff, num_hidden_layers
# n_layers, num_attention_heads n_heads, num_key_value_heads n_kv_heads, head_dim d_head.
_QWEN25_05B = _published(vocab_size=151936, d_model=896, d_ff=4864, n_layers=24, n_heads=14,
                         n_kv_heads=2, rope_theta=1e6, tie_embeddings=True,
                         qkv_bias=True)  # fmt: skip
_QWEN3_06B = _published(vocab_size=151936, d_model=1024, d_ff=3072, n_layers=28, n_heads=16,
                        n_kv_heads=8, d_head=128, rope_theta=1e6, tie_embeddings=True,
                        qk_norm=True)  # fmt: skip
_GEMMA3_1B = _published(vocab_size=262144, d_model=1152, d_ff=6912, n_layers=26, n_heads=4,
                        n_kv_heads=1, d_head=256, mlp="geglu", rope_theta=1e6,
                        rope_local_theta=1e4, sliding_window=512, global_every=6,
                        attn_scalar=256.0, qk_norm=True, norm_placement="sandwich",
                        norm_plus_one=True, embed_scale=True, tie_embeddings=True)  # fmt: skip
# Llama 3.2 stretches RoPE (rope_scaling: rope_type llama3, factor 32, low 1, high 4, 8192).
_LLAMA32_1B = _published(vocab_size=128256, d_model=2048, d_ff=8192, n_layers=16, n_heads=32,
                         n_kv_heads=8, rope_theta=5e5, norm_eps=1e-5, tie_embeddings=True,
                         rope_scaling="llama3", rope_scaling_factor=32.0, rope_low_freq_factor=1.0,
                         rope_high_freq_factor=4.0,
                         rope_original_max_positions=8192)  # fmt: skip
_MISTRAL_7B = _published(vocab_size=32000, d_model=4096, d_ff=14336, n_layers=32, n_heads=32,
                         n_kv_heads=8, sliding_window=4096, norm_eps=1e-5,
                         tie_embeddings=False)  # fmt: skip
# Mixtral's config.json weighs its load-balancing loss 0.02 (transformers' default: 0.001).
_MIXTRAL_8X7B = _published(vocab_size=32000, d_model=4096, d_ff=14336, n_layers=32, n_heads=32,
                           n_kv_heads=8, n_experts=8, experts_per_token=2, rope_theta=1e6,
                           norm_eps=1e-5, tie_embeddings=False,
                           router_aux_loss_coef=0.02)  # fmt: skip

PRESETS: Mapping[str, Config] = {
    "tiny": _tiny(),
    "finetune": _finetune(),
    "finetune-lora": _finetune_lora(),
    "gpt2-small": _gpt2(768, 12, 12),
    "gpt2-medium": _gpt2(1024, 24, 16),
    "llama-tiny": _llama(128, 4, 4, 2, 352),
    "qwen2.5-0.5b": _QWEN25_05B,
    "qwen3-0.6b": _QWEN3_06B,
    "gemma3-1b": _GEMMA3_1B,
    "llama3.2-1b": _LLAMA32_1B,
    "mistral-7b": _MISTRAL_7B,
    "mixtral-8x7b": _MIXTRAL_8X7B,
}
