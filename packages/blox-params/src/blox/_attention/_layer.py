"""``MultiHeadAttention``: grouped KV heads, RoPE, QK-norm, causal/padding masks, packed rows,
sliding windows, logit soft-capping, a KV cache, attention-probability dropout, LoRA on its
projections."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from .._checks import positive_int, static_flag
from .._graph import Graph
from .._lora import LoRA, check_lora
from .._module import Initializer, Module
from .._norm import RMSNorm
from .._params import Params
from .._rng import Rng
from . import _cache
from ._cores import Logits, attend, choose
from ._masks import check_segment_ids, layer_mask, window_mask
from ._options import (
    check_biases,
    check_dropout,
    check_implementation,
    check_metadata,
    check_qk_norm,
    check_softcap,
)
from ._projections import output, project
from ._rope import RopeScaling, call_positions, rope


class MultiHeadAttention(Module):
    """Dot-product attention over ``(..., T, features)``: self- or cross-attention.

    ``y, params = mha(params, x, kv=None, mask=None, causal=False)``. Queries come from ``x``;
    keys and values from ``kv`` (default ``x``). ``mask`` is boolean (``True`` = attend),
    broadcastable to ``(..., num_heads, T, S)``: a key padding mask of shape ``(batch, S)`` is
    passed as ``mask[:, None, None, :]``. A numeric mask is read as ``mask != 0`` (Flax's 0/1
    float masks work); an additive mask (0 / -inf) is not supported, convert it with
    ``mask == 0``. ``causal=True`` lets query ``t`` see keys up to
    ``t + S - T`` (queries aligned to the end of the keys, as when decoding with a cache).

    Packed rows (self-attention): ``segment_ids`` ``(*batch, T)`` integers label which example
    each token belongs to; a token attends only to tokens with its id, on top of ``mask`` and
    ``causal``, and with RoPE it is rotated by its position within its example (the number of
    earlier tokens with its id). So a row packing several examples gives each one the output
    it gets alone. ``positions`` ``(T,)`` or ``(*batch, T)`` sets the RoPE positions of
    self-attention instead (e.g. from a data pipeline).

    Sliding windows: ``window=W`` (an int, or a traced integer scalar, so one scanned layer
    can serve local and global layers) lets query ``t`` see only the ``W`` newest keys up to its
    causal position ``t + S - T`` (itself included), in every core and while decoding with a
    cache, however far past ``W`` the cache has grown; ``None`` or ``W <= 0`` is no window.
    ``rope_base=`` overrides the constructor's RoPE base for one call (a local layer with a
    base of its own, as in Gemma 3).

    Keyword arguments passed on as in the base layer:

    - ``dtype``, ``param_dtype``: mixed precision; the softmax always runs in float32.

    Args:
        graph: the node to bind to.
        num_heads: query heads.
        head_dim: features per head.
        rng: draws init keys (and, with ``dropout_rate``, one dropout key per training call).
        num_kv_heads: key/value heads (grouped-query attention); must divide ``num_heads``.
            Default ``num_heads``.
        use_rope: rotary position embeddings on queries and keys (positions ``0..T-1`` and
            ``0..S-1``).
        rope_base: RoPE frequency base.
        rope_scaling: a ``bx.RopeScaling`` that stretches RoPE's frequencies (Llama 3's
            ``llama3``, ``linear``), in every call and while decoding.
        output_size: output features (default: ``x``'s features).
        use_bias: biases on the four projections (``True``), on none (``False``), or on the
            projections named in a collection of ``"query"``, ``"key"``, ``"value"``, ``"out"``
            (Qwen2 biases the first three only).
        kernel_init: initializer of the query/key/value projections (default LeCun normal).
        out_init: initializer of the output projection (default LeCun normal); e.g. a smaller
            normal scaled by depth for residual networks.
        qk_norm: RMS-normalise queries and keys (learnt scale each) before RoPE and the dot
            product; keeps the attention logits bounded. ``True`` or ``"head"``: each head over
            its ``head_dim`` (scales ``(hd,)``, shared by the heads; Qwen3, Gemma 3); ``"all"``:
            over all heads' features at once (scales ``(H, hd)`` and ``(KVH, hd)``; OLMo 2).
        qk_norm_eps: the norms' epsilon.
        qk_norm_offset: the norms' ``scale_offset`` (``1.0``: Gemma's ``1 + w`` scales, which
            then start at zero).
        scale: the logits' factor (default ``head_dim ** -0.5``); Gemma's
            ``query_pre_attn_scalar ** -0.5``, say.
        logit_softcap: ``cap * tanh(logits / cap)`` on the scaled logits before the mask and
            softmax (Gemma 2); 0 = off. Only the ``blocked`` core applies it
            (``jax.nn.dot_product_attention`` has no soft-cap), so a cap with
            ``implementation='xla'`` or ``'cudnn'`` is refused and ``auto`` runs ``blocked``.
        metadata: per-parameter metadata, keyed by parameter name (``query``, ``key``, ``value``,
            ``out``, their ``*_bias``, and ``query_norm``/``key_norm`` for the QK-norm scales),
            e.g. ``{'query': {'logical_axes': ('embed', 'heads', 'head_dim')}}`` for paramspec.
        causal_block: with ``causal=True``, attend in blocks of this many query rows, each over
            the keys up to its last row only: the keys a block skips are the ones the causal mask
            zeroes, so the output is the same (up to float rounding) for about half the work of
            the score and value products at long sequences. Default: on CPU, blocks of
            ``max(64, T / 8)`` rows (1.38x tokens/s for a GPT train step at context 256 on
            XLA:CPU); on other backends one block. Pass ``T`` (or more) for one block anywhere.
        implementation: the attention core. ``blocked``: the pure-JAX softmax above (with
            ``causal_block``); ``xla`` or ``cudnn``: ``jax.nn.dot_product_attention`` with that
            implementation (``cudnn`` is the fused GPU kernel: GPU only, float16/bfloat16);
            ``auto``: the measured best of the backend (``cudnn`` on a GPU for 16-bit
            self-attention, else ``blocked``; benchmarks/gpt/RESULTS-gpu.md), and ``blocked``
            whenever dropout is active. Every one takes the same masks, causal alignment,
            grouped heads, RoPE, QK-norm and cache, and gives the same outputs and gradients up
            to float rounding.
        dropout_rate: probability of zeroing each attention weight (after the softmax; the
            kept ones are scaled by ``1 / (1 - rate)``) in calls with ``is_training=True``, in
            ``[0, 1)``. Needs ``rng``; each such call draws one key from it. Only the ``blocked``
            core applies it (``jax.nn.dot_product_attention`` has no dropout), so a rate above
            0 with ``implementation='xla'`` or ``'cudnn'`` is refused; ``auto`` runs
            ``blocked`` while dropping and its usual choice otherwise. The masks depend on the
            key and on ``causal_block`` (each block of query rows folds its first row into the
            key), not on anything else.
        lora: a ``bx.LoRA``: low-rank adapters next to the ``query``, ``key``, ``value`` and
            ``out`` kernels its ``targets`` select (``query_lora_a``, ``query_lora_b``, ...).
            With LoRA dropout, every call says ``is_training=``.

    Segment ids in each core: ``blocked`` folds them into its mask block by block; ``xla``
    and ``cudnn`` pass them as part of ``jax.nn.dot_product_attention``'s boolean ``mask``,
    since it has no segment-id argument in any JAX this package supports (0.7.2 to 0.12).
    cuDNN turns such a mask into a ``(batch, 1, T, T)`` bias, so packed rows cost that much
    memory there, which plain causal cuDNN attention does not.

    Params: ``query (D, H, hd)``, ``key (Dkv, KVH, hd)``, ``value (Dkv, KVH, hd)``,
    ``out (H, hd, output_size)``; with biases ``query_bias (H, hd)``, ``key_bias`` and
    ``value_bias`` ``(KVH, hd)``, ``out_bias (output_size,)``; with ``qk_norm`` also
    ``query_norm/scale`` and ``key_norm/scale`` (``(hd,)``, or per head with ``"all"``).

    Cached decoding: ``params = mha.init_cache(params, batch_shape, max_length)`` adds a
    key/value cache (non-trainable ``cache_key``, ``cache_value`` and ``cache_index``); each call
    with ``decode=True`` then appends its ``T`` keys and values at ``cache_index``, attends
    causally over everything written so far, rotates by the absolute positions
    ``cache_index + 0..T-1`` and advances the index. A prompt can be fed at once (prefill), then
    one token per call; the outputs equal those of one uncached causal call on the whole sequence.

    Dropout: with ``dropout_rate > 0`` every call says whether it trains, ``is_training=True``
    (drops, draws a key) or ``False`` (the plain layer); leaving it out is an error, as for
    ``MLP`` and ``Dropout``.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> mha = bx.MultiHeadAttention(graph / 'attn', num_heads=4, head_dim=8, rng=rng,
        ...                             num_kv_heads=2, use_rope=True)
        >>> y, params = mha(rng.seed(bx.Params(), seed=0), jnp.ones((2, 5, 16)), causal=True)
        >>> y.shape
        (2, 5, 16)
        >>> cached = mha.init_cache(params, (2,), max_length=5)
        >>> y0, cached = mha(cached, jnp.ones((2, 3, 16)), decode=True)  # prefill 3 tokens
        >>> y1, cached = mha(cached, jnp.ones((2, 1, 16)), decode=True)  # then one at a time
        >>> index = cached[('net', 'attn', 'cache_index')].value
        >>> bool(jnp.allclose(y1[:, 0], y[:, 3], atol=1e-5)), int(index)
        (True, 4)
    """

    def __init__(
        self,
        graph: Graph,
        num_heads: int,
        head_dim: int,
        *,
        rng: Rng | None = None,
        num_kv_heads: int | None = None,
        use_rope: bool = False,
        rope_base: float = 10000.0,
        rope_scaling: RopeScaling | None = None,
        output_size: int | None = None,
        use_bias: bool | Collection[str] = False,
        kernel_init: Initializer | None = None,
        out_init: Initializer | None = None,
        qk_norm: bool | str = False,
        qk_norm_eps: float = 1e-6,
        qk_norm_offset: float = 0.0,
        scale: float | None = None,
        logit_softcap: float = 0.0,
        metadata: Mapping[str, Mapping[str, Any] | None] | None = None,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        causal_block: int | None = None,
        implementation: str = "auto",
        dropout_rate: float = 0.0,
        lora: LoRA | None = None,
    ) -> None:
        super().__init__(graph)
        self.implementation = check_implementation(self.name, implementation)
        self.dropout_rate = check_dropout(self.name, dropout_rate, implementation, rng)
        num_heads = positive_int(num_heads, "num_heads", self)
        self.causal_block = (
            None if causal_block is None else positive_int(causal_block, "causal_block", self)
        )
        head_dim = positive_int(head_dim, "head_dim", self)
        kv_heads = (
            num_heads if num_kv_heads is None else positive_int(num_kv_heads, "num_kv_heads", self)
        )
        if output_size is not None:
            output_size = positive_int(output_size, "output_size", self)
        if num_heads % kv_heads:
            raise ValueError(
                f"{self.name}: num_heads={num_heads} must be a positive multiple of "
                f"num_kv_heads={kv_heads} (each KV head serves num_heads // num_kv_heads query "
                "heads)."
            )
        if use_rope and head_dim % 2:
            raise ValueError(f"{self.name}: RoPE needs an even head_dim, got {head_dim}.")
        self.num_heads, self.head_dim, self.num_kv_heads = num_heads, head_dim, kv_heads
        self.rng = rng
        self.use_rope, self.rope_base = use_rope, rope_base
        if rope_scaling is not None and not isinstance(rope_scaling, RopeScaling):
            raise TypeError(
                f"{self.name}: rope_scaling must be a bx.RopeScaling (or None), got "
                f"{type(rope_scaling).__name__}: e.g. bx.RopeScaling('linear', 2.0)."
            )
        self.rope_scaling = rope_scaling
        self.output_size = output_size
        self.biased = check_biases(self.name, use_bias)
        self.use_bias = bool(self.biased)
        self.scale = scale
        self.logit_softcap = check_softcap(self.name, logit_softcap, implementation)
        self.kernel_init = kernel_init or jax.nn.initializers.lecun_normal(
            in_axis=0, out_axis=(1, 2)
        )
        self.out_init = out_init or jax.nn.initializers.lecun_normal(in_axis=(0, 1), out_axis=2)
        self.dtype, self.param_dtype = dtype, param_dtype
        self.metadata = check_metadata(self.name, metadata)
        self.lora = check_lora(lora, self)
        self.qk_norm = check_qk_norm(self.name, qk_norm)
        self.query_norm = self.key_norm = None
        if self.qk_norm:
            self.query_norm, self.key_norm = (
                RMSNorm(
                    graph / name,
                    axis=(-2, -1) if self.qk_norm == "all" else -1,
                    eps=qk_norm_eps,
                    scale_offset=qk_norm_offset,
                    scale_init=(
                        jax.nn.initializers.zeros if qk_norm_offset else jax.nn.initializers.ones
                    ),
                    scale_metadata=self.metadata.get(name),
                    dtype=dtype,
                    param_dtype=param_dtype,
                )
                for name in ("query_norm", "key_norm")
            )

    def __call__(
        self,
        params: Params,
        x: jax.Array,
        kv: jax.Array | None = None,
        mask: jax.Array | None = None,
        causal: bool = False,
        decode: bool = False,
        *,
        segment_ids: jax.Array | None = None,
        positions: jax.Array | None = None,
        is_training: bool | None = None,
        window: int | jax.Array | None = None,
        rope_base: float | jax.Array | None = None,
    ) -> tuple[jax.Array, Params]:
        """Attend; see the class. ``is_training`` switches dropout (required with a rate > 0);
        ``window`` limits each query to its newest keys; ``rope_base`` overrides the RoPE base."""
        cross = kv is not None
        x, kv = self._inputs(x, kv)
        if segment_ids is not None:
            segment_ids = check_segment_ids(self.name, segment_ids, x.shape[:-1], cross, decode)
        rotate = call_positions(
            self.name, self.use_rope, positions, segment_ids, x.shape[:-1], cross, decode
        )
        # q (..., T, H, hd); k, v (..., S, KVH, hd)
        q, params = project(self, params, "query", x, self.num_heads, is_training)
        k, params = project(self, params, "key", kv, self.num_kv_heads, is_training)
        v, params = project(self, params, "value", kv, self.num_kv_heads, is_training)
        if self.qk_norm:
            assert self.query_norm is not None and self.key_norm is not None
            q, params = self.query_norm(params, q)
            k, params = self.key_norm(params, k)
        T, S = q.shape[-3], k.shape[-3]
        drop_key = None
        if self._dropping(is_training):
            assert self.rng is not None  # checked in __init__
            drop_key, params = self.rng(params)
        full: jax.Array | None
        base = self.rope_base if rope_base is None else rope_base
        if decode:  # the cache's own positions and causal alignment
            (q, k, v, full), params = _cache.append(self, params, q, k, v, mask, window, base)
            causal = False
        else:
            if self.use_rope:
                assert rotate is not None  # call_positions gives some whenever RoPE is on
                q = rope(q, rotate, base, self.rope_scaling)
                k = rope(k, jnp.arange(S) if cross else rotate, base, self.rope_scaling)
            if window is not None:
                near = window_mask(jnp.arange(T) + (S - T), jnp.arange(S), window)
                mask = near if mask is None else jnp.asarray(mask).astype(bool) & near
            heads = (self.num_heads, self.num_kv_heads)
            full = layer_mask(self.name, mask, q.shape[:-3], heads, T, S, segment_ids)
        out = self._attend(q, k, v, full, causal, drop_key)
        return output(self, params, out, self.output_size or x.shape[-1], is_training)

    def _inputs(self, x: Any, kv: Any) -> tuple[jax.Array, jax.Array]:
        """``x`` and ``kv`` (default ``x``) as arrays ``(..., T or S, features)``, checked."""
        x = jnp.asarray(x)
        kv = x if kv is None else jnp.asarray(kv)
        if x.ndim < 2 or kv.ndim < 2:
            raise ValueError(
                f"{self.name} expects inputs (..., T, features), got x {x.shape} and kv "
                f"{kv.shape}. For a single token use x[None]."
            )
        try:
            jnp.broadcast_shapes(x.shape[:-2], kv.shape[:-2])
        except ValueError as err:  # else a bare einsum error about label sizes
            raise ValueError(
                f"{self.name}: the batch axes of x {x.shape} and kv {kv.shape} (all but the last "
                f"two) do not match: {x.shape[:-2]} vs {kv.shape[:-2]}. Queries and keys must "
                "come from the same examples."
            ) from err
        return x, kv

    def _dropping(self, is_training: bool | None) -> bool:
        """Whether this call drops attention weights (``is_training`` checked to be static)."""
        if self.dropout_rate == 0.0:
            return False
        if is_training is None:
            raise TypeError(
                f"{self.name} has dropout_rate={self.dropout_rate}, so its call needs "
                "is_training=True (training: drops) or False (evaluation, decoding: does not)."
            )
        return static_flag(is_training, "is_training", self)

    def _attend(
        self,
        q: jax.Array,
        k: jax.Array,
        v: jax.Array,
        mask: jax.Array | None,
        causal: bool,
        drop_key: jax.Array | None = None,
    ) -> jax.Array:
        """Softmax attention of ``q (..., T, H, hd)`` over ``k``, ``v`` ``(..., S, KVH, hd)``.

        ``mask`` is shaped for the logits (``_masks.layer_mask``); the core is this layer's
        ``implementation`` (``_cores.choose``), with its ``causal_block`` and, with
        ``drop_key``, its ``dropout_rate``.
        """
        blocked_only = drop_key is not None or self.logit_softcap > 0
        core = choose(self.implementation, self.name, q, k, dropping=blocked_only)
        dropout = None if drop_key is None else (drop_key, self.dropout_rate)
        logits = Logits(self.scale, self.logit_softcap)
        return attend(q, k, v, mask, causal, core, self.causal_block, dropout, logits)

    def init_cache(
        self, params: Params, batch_shape: tuple[int, ...], max_length: int, dtype: Any = None
    ) -> Params:
        """``params`` plus an empty key/value cache for ``max_length`` positions (see the class).

        Args:
            params: the attention's params (the cache is added next to them).
            batch_shape: the leading axes of the inputs decoded with it, e.g. ``(batch,)``.
            max_length: positions the cache holds (prompt plus generated tokens).
            dtype: the cache dtype (default: ``dtype`` of the layer, else ``param_dtype``).

        Returns:
            New params with non-trainable ``cache_key``, ``cache_value``
            ``(*batch_shape, max_length, num_kv_heads, head_dim)`` and ``cache_index`` (int32 0).
        """
        return _cache.init_cache(self, params, batch_shape, max_length, dtype)
