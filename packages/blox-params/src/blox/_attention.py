"""``MultiHeadAttention``: grouped KV heads, RoPE, QK-norm, causal/padding masks, a KV cache,
attention-probability dropout."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Literal, cast

import jax
import jax.numpy as jnp

from core_primitives import did_you_mean

from ._checks import positive_int, static_flag
from ._dropout import _is_rate
from ._dtypes import promote
from ._errors import MissingParamError, RngError
from ._graph import Graph
from ._linear import dense
from ._module import Initializer, Module
from ._norm import RMSNorm
from ._params import Params
from ._rng import Rng

# Parameter names of MultiHeadAttention whose metadata can be given, for the `metadata` option.
_PARAM_NAMES = ("query", "key", "value", "out", "query_bias", "key_bias", "value_bias", "out_bias")
_CACHE_NAMES = ("cache_key", "cache_value", "cache_index")
# Causal attention on CPU: query rows per block, and at most this many blocks (benchmarks/gpt/PROFILE.md).
_CPU_BLOCK_ROWS, _CPU_MAX_BLOCKS = 64, 8
# The attention cores `implementation=` picks from; `auto` resolves per backend (_implementation).
IMPLEMENTATIONS = ("auto", "blocked", "xla", "cudnn")
_Fused = Literal["xla", "cudnn"]  # those that go through jax.nn.dot_product_attention


def _is_path(wanted: tuple[str, ...], path: tuple[str, ...], _: Any) -> bool:
    return path == wanted


def rope(x: jax.Array, positions: jax.Array, base: float = 10000.0) -> jax.Array:
    """Rotary position embedding of ``x`` ``(..., T, heads, head_dim)`` at ``positions`` ``(T,)``.

    Rotates pairs ``(x[..., :d/2], x[..., d/2:])`` by angles ``position / base**(2i/d)``.

    Example:
        >>> import jax.numpy as jnp
        >>> x = jnp.ones((3, 1, 4))
        >>> bool(jnp.allclose(rope(x, jnp.arange(3))[0], x[0]))  # position 0 is unrotated
        True
    """
    half = x.shape[-1] // 2
    freqs = base ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions.astype(jnp.float32)[:, None] * freqs  # (T, half)
    sin, cos = jnp.sin(angles)[:, None, :], jnp.cos(angles)[:, None, :]  # (T, 1, half)
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    rotated = jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated.astype(x.dtype)


class MultiHeadAttention(Module):
    """Dot-product attention over ``(..., T, features)``: self- or cross-attention.

    ``y, params = mha(params, x, kv=None, mask=None, causal=False)``. Queries come from ``x``;
    keys and values from ``kv`` (default ``x``). ``mask`` is boolean (``True`` = attend),
    broadcastable to ``(..., num_heads, T, S)``: a key padding mask of shape ``(batch, S)`` is
    passed as ``mask[:, None, None, :]``. A numeric mask is read as ``mask != 0`` (Flax's 0/1
    float masks work); an additive mask (0 / -inf) is not supported, convert it with
    ``mask == 0``. ``causal=True`` lets query ``t`` see keys up to
    ``t + S - T`` (queries aligned to the end of the keys, as when decoding with a cache).

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
        output_size: output features (default: ``x``'s features).
        use_bias: biases on the four projections.
        kernel_init: initializer of the query/key/value projections (default LeCun normal).
        out_init: initializer of the output projection (default LeCun normal); e.g. a smaller
            normal scaled by depth for residual networks.
        qk_norm: RMS-normalise queries and keys over ``head_dim`` (learnt scale each) before
            RoPE and the dot product; keeps the attention logits bounded.
        qk_norm_eps: the norms' epsilon.
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

    Params: ``query (D, H, hd)``, ``key (Dkv, KVH, hd)``, ``value (Dkv, KVH, hd)``,
    ``out (H, hd, output_size)``; with ``qk_norm`` also ``query_norm/scale`` and
    ``key_norm/scale`` ``(hd,)``.

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
        >>> bool(jnp.allclose(y1[:, 0], y[:, 3], atol=1e-5)), int(cached[('net', 'attn', 'cache_index')].value)
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
        output_size: int | None = None,
        use_bias: bool = False,
        kernel_init: Initializer | None = None,
        out_init: Initializer | None = None,
        qk_norm: bool = False,
        qk_norm_eps: float = 1e-6,
        metadata: Mapping[str, Mapping[str, Any] | None] | None = None,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        causal_block: int | None = None,
        implementation: str = "auto",
        dropout_rate: float = 0.0,
    ) -> None:
        super().__init__(graph)
        if implementation not in IMPLEMENTATIONS:
            raise ValueError(
                f"{self.name}: implementation={implementation!r} is not an attention core; "
                f"choose one of {list(IMPLEMENTATIONS)}."
                f"{did_you_mean(str(implementation), IMPLEMENTATIONS)}"
            )
        self.implementation = implementation
        self.dropout_rate = self._check_dropout(dropout_rate, implementation, rng)
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
        self.output_size = output_size
        self.use_bias = use_bias
        self.kernel_init = kernel_init or jax.nn.initializers.lecun_normal(
            in_axis=0, out_axis=(1, 2)
        )
        self.out_init = out_init or jax.nn.initializers.lecun_normal(in_axis=(0, 1), out_axis=2)
        self.dtype, self.param_dtype = dtype, param_dtype
        self.metadata = self._check_metadata(metadata)
        self.qk_norm = bool(qk_norm)
        self.query_norm = self.key_norm = None
        if self.qk_norm:
            self.query_norm, self.key_norm = (
                RMSNorm(
                    graph / name,
                    eps=qk_norm_eps,
                    scale_metadata=self.metadata.get(name),
                    dtype=dtype,
                    param_dtype=param_dtype,
                )
                for name in ("query_norm", "key_norm")
            )

    def _check_dropout(self, rate: Any, implementation: str, rng: Rng | None) -> float:
        if not _is_rate(rate):
            raise ValueError(
                f"{self.name}: dropout_rate must be in [0, 1), got {rate!r}. It is the "
                "probability of zeroing an attention weight; 0 turns dropout off."
            )
        rate = float(rate)
        if rate > 0 and implementation in ("xla", "cudnn"):
            raise ValueError(
                f"{self.name}: dropout_rate={rate} needs the blocked attention core, but "
                f"implementation={implementation!r} runs jax.nn.dot_product_attention, which has "
                "no dropout. Use implementation='auto' (blocked while dropping, the backend's "
                "best otherwise) or 'blocked', or dropout_rate=0."
            )
        if rate > 0 and rng is None:
            raise RngError(
                f"{self.name}: dropout_rate={rate} needs an Rng to draw its masks. Pass the "
                "model's: bx.MultiHeadAttention(graph / 'attn', ..., rng=rng, dropout_rate=rate)."
            )
        return rate

    def _check_metadata(self, metadata: Any) -> dict[str, Any]:
        metadata = dict(metadata or {})
        known = (*_PARAM_NAMES, "query_norm", "key_norm")
        unknown = sorted(set(metadata) - set(known))
        if unknown:
            raise ValueError(
                f"{self.name}: metadata names unknown parameters {unknown}; the known ones are "
                f"{list(known)}.{did_you_mean(unknown[0], known)}"
            )
        return metadata

    def _project(
        self, params: Params, name: str, x: jax.Array, heads: int
    ) -> tuple[jax.Array, Params]:
        shape = (x.shape[-1], heads, self.head_dim)
        w, params = self.get_param(
            params,
            name,
            shape,
            self.kernel_init,
            self.param_dtype,
            metadata=self.metadata.get(name),
        )
        b = None
        if self.use_bias:
            b, params = self.get_param(
                params,
                f"{name}_bias",
                shape[1:],
                jax.nn.initializers.zeros,
                self.param_dtype,
                metadata=self.metadata.get(f"{name}_bias"),
            )
        x, w, b = promote(self.dtype, x, w, b)
        y = dense(x, w)
        return (y + b if b is not None else y), params

    def __call__(
        self,
        params: Params,
        x: jax.Array,
        kv: jax.Array | None = None,
        mask: jax.Array | None = None,
        causal: bool = False,
        decode: bool = False,
        *,
        is_training: bool | None = None,
    ) -> tuple[jax.Array, Params]:
        """Attend; see the class. ``is_training`` switches dropout (required with a rate > 0)."""
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
        q, params = self._project(params, "query", x, self.num_heads)  # (..., T, H, hd)
        k, params = self._project(params, "key", kv, self.num_kv_heads)  # (..., S, K, hd)
        v, params = self._project(params, "value", kv, self.num_kv_heads)
        if self.qk_norm:
            assert self.query_norm is not None and self.key_norm is not None
            q, params = self.query_norm(params, q)
            k, params = self.key_norm(params, k)
        T, S = q.shape[-3], k.shape[-3]
        drop_key = None
        if self._dropping(is_training):
            assert self.rng is not None  # checked in __init__
            drop_key, params = self.rng(params)
        if decode:
            return self._decode(params, q, k, v, mask, x, drop_key)
        if self.use_rope:
            q = rope(q, jnp.arange(T), self.rope_base)
            k = rope(k, jnp.arange(S), self.rope_base)
        out = self._attend(q, k, v, self._mask(mask, q.shape[:-3], T, S), causal, drop_key)
        return self._output(params, out, self.output_size or x.shape[-1])

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
        max_length = positive_int(max_length, "max_length", self)
        dtype = dtype or self.dtype or self.param_dtype
        shape = (*tuple(batch_shape), max_length, self.num_kv_heads, self.head_dim)
        was_locked = params.is_locked
        params = params.unlocked()
        for name, value in (
            ("cache_key", jnp.zeros(shape, dtype)),
            ("cache_value", jnp.zeros(shape, dtype)),
            ("cache_index", jnp.zeros((), jnp.int32)),
        ):
            old = (*self.path, name)
            if old in params:  # a fresh cache of another size replaces the old one
                params = params.split(functools.partial(_is_path, old))[1]
            _, params = self.get_param(params, name, value.shape, value, value.dtype, False)
        return params.locked() if was_locked else params

    def _cache(self, params: Params) -> tuple[jax.Array, jax.Array, jax.Array]:
        entries = [params.get((*self.path, name)) for name in _CACHE_NAMES]
        if any(e is None for e in entries):
            raise MissingParamError(
                f"{self.name} was called with decode=True but its params hold no KV cache. "
                "Create one first: params = mha.init_cache(params, batch_shape, max_length)."
            )
        k, v, i = (e.value for e in entries)
        return k, v, i

    def _decode(
        self,
        params: Params,
        q: jax.Array,
        k: jax.Array,
        v: jax.Array,
        mask: Any,
        x: jax.Array,
        drop_key: jax.Array | None,
    ) -> tuple[jax.Array, Params]:
        """Append ``k``/``v`` at the cache index and attend causally over the filled cache."""
        cache_k, cache_v, index = self._cache(params)
        T, S = q.shape[-3], cache_k.shape[-3]
        if cache_k.shape[:-3] != k.shape[:-3]:
            raise ValueError(
                f"{self.name}: the KV cache was made for batch shape {cache_k.shape[:-3]}, but the "
                f"inputs have batch shape {k.shape[:-3]}. Call init_cache with the inputs' "
                "leading axes."
            )
        positions = index + jnp.arange(T)
        if self.use_rope:
            q = rope(q, positions, self.rope_base)
            k = rope(k, positions, self.rope_base)
        axis = k.ndim - 3
        cache_k = jax.lax.dynamic_update_slice_in_dim(cache_k, k.astype(cache_k.dtype), index, axis)
        cache_v = jax.lax.dynamic_update_slice_in_dim(cache_v, v.astype(cache_v.dtype), index, axis)
        # Query t (at positions[t]) sees the slots written so far, up to its own position; slots
        # beyond it are either the future or still empty.
        visible = jnp.arange(S)[None, :] <= positions[:, None]  # (T, S)
        user = None if mask is None else jnp.asarray(mask).astype(bool) & visible
        full = self._mask(visible if user is None else user, q.shape[:-3], T, S)
        out = self._attend(
            q, cache_k.astype(q.dtype), cache_v.astype(v.dtype), full, False, drop_key
        )
        params = self.set_param(params, "cache_key", cache_k)
        params = self.set_param(params, "cache_value", cache_v)
        params = self.set_param(params, "cache_index", index + T)
        return self._output(params, out, self.output_size or x.shape[-1])

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

        ``mask`` is the user's, broadcastable to the logits: ``(..., H, T, S)`` without grouped
        heads, ``(..., KVH, G, T, S)`` with them (see ``_mask``). The products run heads-major,
        ``(..., H, T, hd)``, as batched matmuls over contiguous heads. Causal attention runs in
        blocks of query rows (``causal_block``), each over the keys up to its last row only: the
        skipped keys are the ones the causal mask would zero, so the result is the same. With
        ``drop_key`` the softmax weights of each block are dropped with a mask drawn from
        ``fold_in(drop_key, first row of the block)``.
        """
        implementation = self._implementation(q, k, dropping=drop_key is not None)
        if q.shape[-3] == 0:  # no queries (an empty prefill): nothing to attend, an empty result
            return jnp.zeros((*q.shape[:-1], v.shape[-1]), v.dtype)
        if implementation != "blocked":
            return self._attend_fused(q, k, v, mask, causal, cast(_Fused, implementation))
        T, S = q.shape[-3], k.shape[-3]
        groups = self.num_heads // self.num_kv_heads
        q, k, v = (jnp.moveaxis(a, -3, -2) for a in (q, k, v))  # (..., heads, T or S, hd)
        if groups > 1:
            q = q.reshape(*q.shape[:-3], self.num_kv_heads, groups, T, self.head_dim)
            scores, combine = "...kgtd,...ksd->...kgts", "...kgts,...ksd->...kgtd"
        else:
            scores, combine = "...htd,...hsd->...hts", "...hts,...hsd->...htd"
        scale = jnp.sqrt(jnp.float32(self.head_dim))
        rows = self._block_rows(T, S) if causal else T
        outs = []
        for start in range(0, T, rows):
            stop = min(T, start + rows)
            keys = stop + S - T if causal else S  # the last key any query of the block sees
            logits = jnp.einsum(scores, q[..., start:stop, :], k[..., :keys, :])
            logits = logits.astype(jnp.float32) / scale
            block_mask = None
            if mask is not None:
                block_mask = (
                    mask[..., start:stop, :] if mask.ndim > 1 and mask.shape[-2] > 1 else mask
                )
                block_mask = block_mask[..., :keys] if block_mask.shape[-1] > 1 else block_mask
            if causal:
                seen = jnp.arange(start, stop)[:, None] + (S - T) >= jnp.arange(keys)[None, :]
                block_mask = seen if block_mask is None else block_mask & seen
            if block_mask is not None:
                logits = jnp.where(block_mask, logits, jnp.finfo(jnp.float32).min)
            weights = jax.nn.softmax(logits, axis=-1)
            if drop_key is not None:
                weights = self._drop(jax.random.fold_in(drop_key, start), weights)
            weights = weights.astype(v.dtype)
            outs.append(jnp.einsum(combine, weights, v[..., :keys, :]))
        out = outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=-2)
        if groups > 1:
            out = out.reshape(*out.shape[:-4], self.num_heads, T, self.head_dim)
        return jnp.moveaxis(out, -2, -3)

    def _drop(self, key: jax.Array, weights: jax.Array) -> jax.Array:
        """Zero each weight with probability ``dropout_rate``, scale the kept ones up."""
        keep = jax.random.bernoulli(key, 1.0 - self.dropout_rate, weights.shape)
        return jnp.where(keep, weights / (1.0 - self.dropout_rate), 0.0)

    def _implementation(self, q: jax.Array, k: jax.Array, dropping: bool = False) -> str:
        """``implementation`` with ``auto`` resolved; ``cudnn`` refused off GPU, by its name.

        While dropping, ``auto`` is ``blocked``: the only core that applies dropout (``xla`` and
        ``cudnn`` with a dropout rate are refused in ``__init__``).

        ``auto`` is the measured best per backend (benchmarks/gpt/RESULTS.md and RESULTS-gpu.md):
        ``cudnn`` on a GPU for 16-bit self-attention (queries as long as the keys) with a head
        size the kernel takes (a multiple of 8, at most 128): 0.88x blocked's step time on an H200
        and, unlike the other cores, no ``(T, S)`` logits in memory. ``blocked`` everywhere else.
        """
        backend = jax.default_backend()
        if self.implementation == "cudnn" and backend != "gpu":
            raise ValueError(
                f"{self.name}: implementation='cudnn' is NVIDIA's fused attention kernel, which "
                f"runs on GPUs only; this computation runs on {backend!r}. Use "
                "implementation='auto' (picks per backend), 'blocked' or 'xla'."
            )
        if self.implementation != "auto":
            return self.implementation
        if dropping:
            return "blocked"
        fused_ok = (
            backend == "gpu"
            and q.dtype in (jnp.bfloat16, jnp.float16)
            and q.shape[-3] == k.shape[-3]
            and self.head_dim % 8 == 0
            and self.head_dim <= 128
        )
        return "cudnn" if fused_ok else "blocked"

    def _attend_fused(
        self,
        q: jax.Array,
        k: jax.Array,
        v: jax.Array,
        mask: jax.Array | None,
        causal: bool,
        implementation: _Fused,
    ) -> jax.Array:
        """``_attend`` through ``jax.nn.dot_product_attention``, which wants one batch axis.

        Its ``is_causal`` aligns query ``t`` with key ``t``; ours aligns the queries to the end
        of the keys (decoding with a cache), so with ``T != S`` the causal part is a mask.
        """
        batch, (T, S) = q.shape[:-3], (q.shape[-3], k.shape[-3])
        q, k, v = (a.reshape(-1, *a.shape[-3:]) for a in (q, k, v))  # (B, T or S, heads, hd)
        full = None if mask is None else self._flat_mask(mask, batch)
        is_causal = causal and T == S
        if causal and T != S:
            seen = jnp.arange(T)[:, None] + (S - T) >= jnp.arange(S)[None, :]
            full = seen[None, None] if full is None else full & seen
        if full is not None and implementation == "cudnn":  # cudnn wants the query axis whole
            full = jnp.broadcast_to(full, (*full.shape[:2], T, S))
        out = jax.nn.dot_product_attention(
            q, k, v, mask=full, is_causal=is_causal, implementation=implementation
        )
        return out.reshape(*batch, T, self.num_heads, self.head_dim)

    def _flat_mask(self, mask: jax.Array, batch: tuple[int, ...]) -> jax.Array:
        """``_mask``'s mask as the 4-D ``(B or 1, H or 1, T or 1, S or 1)`` JAX's kernel takes."""
        if self.num_heads > self.num_kv_heads and mask.ndim >= 4:  # undo the grouped-heads split
            mask = mask.reshape(*mask.shape[:-4], -1, *mask.shape[-2:])
        mask = mask.reshape((1,) * (len(batch) + 3 - mask.ndim) + mask.shape)
        if all(n == 1 for n in mask.shape[: len(batch)]):
            return mask.reshape(1, *mask.shape[-3:])
        return jnp.broadcast_to(mask, (*batch, *mask.shape[-3:])).reshape(-1, *mask.shape[-3:])

    def _block_rows(self, T: int, S: int) -> int:
        """Query rows per block of causal attention (``T``: one block)."""
        if T > S:  # the first queries see no key: one block keeps their (uniform) weights
            return T
        if self.causal_block is not None:
            return self.causal_block
        if jax.default_backend() != "cpu":
            return T
        return max(_CPU_BLOCK_ROWS, -(-T // _CPU_MAX_BLOCKS))

    def _mask(self, mask: Any, batch: tuple[int, ...], T: int, S: int) -> jax.Array | None:
        """The user mask as a boolean array broadcastable to the logits (``_attend``).

        A mask is broadcast to every head only where grouped heads need its head axis split.
        """
        if mask is None:
            return None
        full = (*batch, self.num_heads, T, S)
        combined = jnp.asarray(mask).astype(bool)
        try:
            if jnp.broadcast_shapes(combined.shape, full) != full:
                raise ValueError("the mask would broaden the logits")
        except ValueError as err:
            raise ValueError(
                f"{self.name}: mask of shape {combined.shape} does not broadcast to "
                f"(*batch, num_heads, T, S) = {full}. A key padding mask (batch, S) goes in "
                "as mask[:, None, None, :]; a (T, S) mask as mask[None, None]."
            ) from err
        groups = self.num_heads // self.num_kv_heads
        if groups == 1:
            return combined
        if combined.ndim < 3 or combined.shape[-3] == 1:  # the same for every head
            return combined[..., None, :, :]
        combined = jnp.broadcast_to(combined, full)
        return combined.reshape(*combined.shape[:-3], self.num_kv_heads, groups, T, S)

    def _output(self, params: Params, out: jax.Array, size: int) -> tuple[jax.Array, Params]:
        shape = (self.num_heads, self.head_dim, size)
        w, params = self.get_param(
            params, "out", shape, self.out_init, self.param_dtype, metadata=self.metadata.get("out")
        )
        b = None
        if self.use_bias:
            b, params = self.get_param(
                params,
                "out_bias",
                (size,),
                jax.nn.initializers.zeros,
                self.param_dtype,
                metadata=self.metadata.get("out_bias"),
            )
        out, w, b = promote(self.dtype, out, w, b)
        y = dense(out, w, in_axes=2)
        return (y + b if b is not None else y), params
