"""The ``[model]`` section: the transformer's shapes and options (``ModelConfig``), the same with
LoRA adapters folded in (``LoRAModel``), and the checks of the options the imported families add
(windows, soft-caps, experts, RoPE scaling). ``schema.py`` holds it in a ``Config`` and runs the
checks with the other sections'.
"""

from __future__ import annotations

import dataclasses
import math

from .lora import LoRAConfig


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Shapes and options of the transformer.

    Attributes:
        vocab_size: number of token ids (256 for the byte tokenizer).
        vocab_real: ids the tokenizer really uses when vocab_size is padded past them for faster
            matmuls (0 = vocab_size); the padded ids get -inf logits: never sampled, never scored.
        seq_len: context length in tokens (the positions the model has); sampling is capped by
            it, and training windows are data.seq_len tokens, at most this many.
        d_model: width of the residual stream.
        n_layers: number of transformer blocks.
        n_heads: attention heads; d_model must be divisible by it unless d_head is set.
        n_kv_heads: key/value heads (0 = n_heads; a smaller divisor gives grouped-query attention).
        d_ff: hidden width of the MLP (0 = 4 * d_model).
        mlp: MLP activation: gelu, relu2 (squared ReLU), swiglu or geglu (gated SiLU or tanh GELU).
        norm: normalisation layer: rmsnorm or layernorm.
        pos: positions: rope (rotary, no parameters) or learned (an embedding table).
        rope_theta: base wavelength of the rotary embedding.
        rope_scaling: stretch RoPE's frequencies for longer contexts: none, linear (all divided
            by rope_scaling_factor) or llama3 (Llama 3.1/3.2: the low ones divided, the high
            ones kept, a blend between).
        rope_scaling_factor: with rope_scaling, how much the frequencies are divided (Llama 3.2:
            32).
        rope_low_freq_factor: with rope_scaling = llama3, frequencies whose wavelength exceeds
            rope_original_max_positions / this are divided (Llama 3: 1).
        rope_high_freq_factor: with rope_scaling = llama3, frequencies whose wavelength is under
            rope_original_max_positions / this are kept (Llama 3: 4).
        rope_original_max_positions: with rope_scaling = llama3, the pre-training context the
            wavelengths are measured against (Llama 3: 8192).
        qk_norm: normalise queries and keys before attention (tolerates higher learning rates).
        qk_norm_scope: with qk_norm, normalise each head (head: Qwen3, Gemma 3) or all heads'
            features at once (all: OLMo 2).
        logit_softcap: cap * tanh(logits / cap) on the output logits (0 = off).
        attention: the attention core: auto (the measured best: cudnn on GPU in 16 bits, else
            blocked), blocked (pure JAX, causal blocks), xla or cudnn (jax.nn.dot_product_attention;
            cudnn is the fused GPU kernel, GPU only with dtype float16/bfloat16).
        tie_embeddings: the output layer reuses the input embedding matrix.
        dtype: compute dtype; auto = bfloat16 on GPU/TPU, float32 on CPU.
        param_dtype: dtype the parameters are stored and updated in.
        remat: recompute activations in the backward pass: none, full or dots (keep matmul outputs).
        scan_layers: run the blocks with a scan (faster compile) instead of an unrolled loop.
        init_std: standard deviation of the normal initialisation of weight matrices.
        bias: biases on the query/key/value, attention-output, MLP-in and MLP-out projections
            (GPT-2 has them, Llama not).
        norm_eps: epsilon of every LayerNorm/RMSNorm (GPT-2: 1e-5; Llama: 1e-5 or 1e-6).
        dropout: probability of zeroing the embedding output, the attention probabilities and
            each residual branch's output, in training only (eval and sampling never drop), in
            [0, 1); 0 = off. The masks follow the run's seed and the step, so a resume is exact.
        d_head: features per attention head (0 = d_model / n_heads; Qwen3 and Gemma set more).
        qkv_bias: biases on the query, key and value projections only (Qwen2); bias = true
            puts them on every projection.
        sliding_window: attention sees only the newest sliding_window tokens (0 = all), on
            every layer or, with global_every, on all but every global_every-th (Mistral, Gemma).
        global_every: with sliding_window, layers global_every, 2 * global_every, ... (counted
            from 1) attend to everything (Gemma 2: 2, Gemma 3: 6; 0 = every layer windowed).
        rope_local_theta: RoPE base of the windowed layers (0 = rope_theta; Gemma 3: 10000).
        attn_softcap: cap * tanh(logits / cap) on the attention logits (0 = off; Gemma 2: 50);
            attention auto then runs the blocked core, xla and cudnn are refused.
        attn_scalar: the attention logits are divided by sqrt(attn_scalar) (0 = d_head; Gemma's
            query_pre_attn_scalar).
        norm_placement: pre (norm each sublayer's input), post (norm each sublayer's output
            before the residual add: OLMo 2) or sandwich (both: Gemma 2 and 3).
        norm_plus_one: RMSNorm scales are stored as w and multiply by 1 + w (Gemma).
        embed_scale: multiply the token embeddings by sqrt(d_model) (Gemma).
        n_experts: a mixture of n_experts SwiGLU experts instead of the MLP (0 = a dense MLP;
            Mixtral: 8), with a top-k router; the experts carry the logical axis expert.
        experts_per_token: experts each token goes through (Mixtral: 2, Qwen3-MoE: 8).
        moe_d_ff: each expert's hidden width (0 = d_ff).
        moe_norm_topk: renormalise the picked experts' router weights to sum to 1 (Mixtral;
            Qwen3-MoE's norm_topk_prob).
        router_aux_loss_coef: weight of the experts' load-balancing loss in the training loss
            (with n_experts; transformers' router_aux_loss_coef; 0 = off).
    """

    vocab_size: int = 256
    seq_len: int = 256
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 0
    d_ff: int = 0
    mlp: str = "gelu"
    norm: str = "layernorm"
    pos: str = "learned"
    rope_theta: float = 10000.0
    qk_norm: bool = False
    logit_softcap: float = 0.0
    attention: str = "auto"
    tie_embeddings: bool = True
    dtype: str = "auto"
    param_dtype: str = "float32"
    remat: str = "none"
    scan_layers: bool = True
    init_std: float = 0.02
    bias: bool = False
    norm_eps: float = 1e-6
    vocab_real: int = 0
    dropout: float = 0.0
    d_head: int = 0
    qkv_bias: bool = False
    qk_norm_scope: str = "head"
    sliding_window: int = 0
    global_every: int = 0
    rope_local_theta: float = 0.0
    attn_softcap: float = 0.0
    attn_scalar: float = 0.0
    norm_placement: str = "pre"
    norm_plus_one: bool = False
    embed_scale: bool = False
    n_experts: int = 0
    experts_per_token: int = 2
    moe_d_ff: int = 0
    moe_norm_topk: bool = True
    router_aux_loss_coef: float = 0.001
    rope_scaling: str = "none"
    rope_scaling_factor: float = 1.0
    rope_low_freq_factor: float = 1.0
    rope_high_freq_factor: float = 4.0
    rope_original_max_positions: int = 8192

    @property
    def base(self) -> ModelConfig:
        """The model without LoRA adapters (itself; a :class:`LoRAModel` drops its ``lora``)."""
        return self

    @property
    def real_vocab(self) -> int:
        """The ids in use: ``vocab_real``, or ``vocab_size`` when it is 0."""
        return self.vocab_real or self.vocab_size

    @property
    def kv_heads(self) -> int:
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        return self.d_head or self.d_model // self.n_heads

    @property
    def gated(self) -> bool:
        """Whether the MLP is gated (swiglu, geglu): it has a gate projection."""
        return self.mlp in ("swiglu", "geglu")

    def windowed(self, layer: int) -> bool:
        """Whether ``layer`` (from 0) attends through the sliding window."""
        every = self.global_every
        return self.sliding_window > 0 and not (every and (layer + 1) % every == 0)

    @property
    def ff_dim(self) -> int:
        return self.d_ff or 4 * self.d_model


@dataclasses.dataclass(frozen=True)
class LoRAModel(ModelConfig):
    """A model section with LoRA adapters: ``ModelConfig``'s keys and the run's ``[lora]``.

    A ``Config`` whose ``lora.rank > 0`` holds its model section as one of these (``Config``
    folds it in when it is built), so everything keyed by the model section (the model, compiled
    steps, samplers, scorers) builds the adapters with it and hashes apart from the plain model.
    TOML files keep ``[lora]`` as its own section; :attr:`base` is the model without adapters.
    """

    lora: LoRAConfig = dataclasses.field(default_factory=LoRAConfig)

    @property
    def base(self) -> ModelConfig:
        """The same model section without its adapters."""
        return ModelConfig(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(ModelConfig)}
        )


def with_lora(model: ModelConfig, lora: LoRAConfig) -> ModelConfig:
    """``model`` as a ``Config`` with ``lora`` holds it: with the adapters, or a plain section."""
    plain = model.base if isinstance(model, LoRAModel) else model
    if lora.rank <= 0:  # not lora.enabled: read before the [lora] section's own checks
        return plain
    if isinstance(model, LoRAModel) and model.lora == lora:
        return model
    return LoRAModel(
        **{f.name: getattr(plain, f.name) for f in dataclasses.fields(ModelConfig)}, lora=lora
    )


def heads_divide(m: ModelConfig) -> bool:
    """Whether ``model.d_model`` splits into ``model.n_heads`` heads, or ``d_head`` sizes them."""
    return m.d_model > 0 and m.n_heads > 0 and bool(m.d_head or not m.d_model % m.n_heads)


def model_problems(m: ModelConfig) -> list[str]:
    """Every problem of the ``[model]`` section alone: its shapes, then the families' options."""
    problems: list[str] = []
    if m.d_model % max(m.n_heads, 1) and not m.d_head:
        problems.append(
            f"model.d_model = {m.d_model} must be divisible by model.n_heads = {m.n_heads}"
        )
    if m.n_kv_heads < 0 or (m.n_kv_heads and m.n_heads % m.n_kv_heads):
        problems.append(
            f"model.n_kv_heads = {m.n_kv_heads} must divide model.n_heads = {m.n_heads} "
            "(0 means equal to n_heads)"
        )
    if m.pos == "rope" and m.d_head % 2:
        problems.append(f"model.d_head = {m.d_head} must be even with RoPE (pos = 'rope')")
    elif m.pos == "rope" and heads_divide(m) and m.head_dim % 2:
        fits = [h for h in range(1, m.d_model + 1) if not m.d_model % h and not m.d_model // h % 2]
        near = sorted(sorted(fits, key=lambda h: abs(h - m.n_heads))[:3])
        heads = f"--set model.n_heads=N with N in {near}, " if near else ""
        problems.append(
            f"RoPE needs an even head dim; model.d_model / model.n_heads = {m.d_model} / "
            f"{m.n_heads} = {m.head_dim}. Fix: {heads}--set model.d_model="
            f"{m.n_heads * (m.head_dim + 1)}, or --set model.pos=learned"
        )
    if not 0 <= m.vocab_real <= m.vocab_size:
        problems.append(
            f"model.vocab_real = {m.vocab_real} must be between 0 (all of model.vocab_size) and "
            f"model.vocab_size = {m.vocab_size}"
        )
    if not (math.isfinite(m.norm_eps) and m.norm_eps >= 0):
        problems.append(f"model.norm_eps = {m.norm_eps} must be a finite number >= 0")
    return problems + _family_problems(m)


def _family_problems(m: ModelConfig) -> list[str]:
    """The options of the imported families (windows, soft-caps, scalars) out of range."""
    problems = [
        f"model.{key} = {value} must be >= 0 (0 = off)"
        for key, value in (
            ("d_head", m.d_head),
            ("sliding_window", m.sliding_window),
            ("global_every", m.global_every),
            ("n_experts", m.n_experts),
            ("moe_d_ff", m.moe_d_ff),
        )
        if value < 0
    ]
    for key, value in (
        ("rope_local_theta", m.rope_local_theta),
        ("attn_softcap", m.attn_softcap),
        ("attn_scalar", m.attn_scalar),
        ("router_aux_loss_coef", m.router_aux_loss_coef),
    ):
        if not (math.isfinite(value) and value >= 0):
            problems.append(f"model.{key} = {value} must be a finite number >= 0 (0 = off)")
    if m.attn_softcap > 0 and m.attention in ("xla", "cudnn"):
        problems.append(
            f"model.attn_softcap = {m.attn_softcap} needs the blocked attention core, but "
            f"model.attention = {m.attention!r} has no soft-cap; use auto or blocked"
        )
    if m.global_every and not m.sliding_window:
        problems.append(
            f"model.global_every = {m.global_every} needs model.sliding_window > 0 (it picks "
            "the layers without a window)"
        )
    if m.n_experts and not 0 < m.experts_per_token <= m.n_experts:
        problems.append(
            f"model.experts_per_token = {m.experts_per_token} must be in 1..model.n_experts = "
            f"{m.n_experts}"
        )
    if m.n_experts and (m.mlp != "swiglu" or m.bias):
        problems.append(
            f"model.n_experts = {m.n_experts} needs SwiGLU experts without biases: "
            f"model.mlp = 'swiglu' (not {m.mlp!r}) and model.bias = false"
        )
    if m.norm_plus_one and m.norm != "rmsnorm":
        problems.append("model.norm_plus_one = true needs model.norm = 'rmsnorm'")
    return problems + _rope_scaling_problems(m)


def _rope_scaling_problems(m: ModelConfig) -> list[str]:
    """``model.rope_scaling`` and its values, checked where they apply (they are moot at none)."""
    if m.rope_scaling == "none":
        return []
    problems = []
    if m.pos != "rope":
        problems.append(
            f"model.rope_scaling = {m.rope_scaling!r} stretches RoPE, but model.pos = "
            f"{m.pos!r}; set model.pos = 'rope' or model.rope_scaling = 'none'"
        )
    if not (math.isfinite(m.rope_scaling_factor) and m.rope_scaling_factor > 0):
        problems.append(
            f"model.rope_scaling_factor = {m.rope_scaling_factor} must be a finite number > 0 "
            "(Llama 3.2: 32)"
        )
    low, high = m.rope_low_freq_factor, m.rope_high_freq_factor
    if m.rope_scaling == "llama3" and not (
        math.isfinite(low) and math.isfinite(high) and 0 < low < high
    ):
        problems.append(
            f"model.rope_low_freq_factor = {low} and model.rope_high_freq_factor = {high} must "
            "be finite with 0 < low < high (Llama 3: 1 and 4)"
        )
    if m.rope_scaling == "llama3" and m.rope_original_max_positions <= 0:
        problems.append(
            f"model.rope_original_max_positions = {m.rope_original_max_positions} must be > 0 "
            "(Llama 3: 8192)"
        )
    return problems
