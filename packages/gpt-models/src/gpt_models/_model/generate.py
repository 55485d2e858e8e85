"""Autoregressive generation: a KV cache (prefill, then one token per step) under one ``jax.jit``.

The uncached path runs the full forward pass on the whole buffer at every step; it exists as the
reference the cached path is tested against (same tokens, same random keys).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from .._config.schema import sampling_problems
from .gpt import gpt

Array = jax.Array


def _filter_logits(logits: Array, top_k: int | None, top_p: float | None) -> Array:
    """Set logits outside the top-k and outside the top-p probability mass to -inf."""
    neg = jnp.finfo(logits.dtype).min
    if top_k:
        kth = jax.lax.top_k(logits, min(top_k, logits.shape[-1]))[0][..., -1:]
        logits = jnp.where(logits < kth, neg, logits)
    if top_p is not None and top_p < 1.0:
        ordered = jnp.sort(logits, axis=-1)[..., ::-1]
        probs = jax.nn.softmax(ordered, axis=-1)
        # Keep a token while the mass *before* it is below top_p: the most likely token always
        # stays.
        keep = (jnp.cumsum(probs, axis=-1) - probs) < top_p
        threshold = jnp.min(jnp.where(keep, ordered, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits < threshold, neg, logits)
    return logits


def sample_token(
    logits: Array, key: Array, temperature: float, top_k: int | None, top_p: float | None
) -> Array:
    """One token per row of ``logits: (B, vocab)``; ``temperature == 0`` is greedy (argmax).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> logits = jnp.array([[0.0, 5.0, 1.0]])
        >>> sample_token(logits, jax.random.key(0), 0.0, None, None).tolist()
        [1]
        >>> sample_token(logits, jax.random.key(0), 1.0, 1, None).tolist()  # top-1 is greedy
        [1]
    """
    if temperature == 0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = _filter_logits(logits.astype(jnp.float32) / temperature, top_k, top_p)
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


def _check_length(cfg: Any, prompt_len: int, max_new_tokens: int) -> None:
    if prompt_len < 1:
        raise ValueError("generate: the prompt is empty; give at least one token (e.g. a newline).")
    total = prompt_len + max_new_tokens
    if total > cfg.seq_len:
        raise ValueError(
            f"generate: prompt ({prompt_len} tokens) + max_new_tokens ({max_new_tokens}) = {total} "
            f"exceeds the model's context, model.seq_len = {cfg.seq_len}. Use a shorter prompt or "
            f"max_new_tokens <= {max(cfg.seq_len - prompt_len, 0)}."
        )


def generate(
    params: Any,
    prompt: Any,
    config: Any,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    key: Any,
    use_cache: bool = True,
    stop_token: int | None = None,
) -> Array:
    """Continue ``prompt`` by ``max_new_tokens`` tokens; returns prompt and continuation together.

    Args:
        params: model parameters.
        prompt: token ids, ``(seq,)`` or ``(batch, seq)``.
        config: a :class:`Config` or its ``ModelConfig``.
        max_new_tokens: tokens to add; prompt plus these must fit ``model.seq_len``.
        temperature: softmax temperature; ``0`` is greedy decoding.
        top_k: sample among the ``k`` most likely tokens only (``None``/``0``: all).
        top_p: nucleus sampling: the smallest set of tokens whose mass reaches ``p`` (``None``:
            all).
        key: a ``jax.random.key``; token ``i`` of the continuation uses ``fold_in(key, i)``.
        use_cache: decode with a KV cache (the default); ``False`` recomputes the whole prefix at
            every step (slow, gives the same tokens).
        stop_token: a row that emits this token stops; its remaining positions repeat it.

    Returns:
        ``int32`` ids of shape ``prompt.shape[:-1] + (prompt_len + max_new_tokens,)``.

    Raises:
        ValueError: an empty prompt, prompt plus ``max_new_tokens`` longer than ``model.seq_len``,
            or a negative ``max_new_tokens``/``temperature``/``top_k``, or ``top_p`` outside (0, 1].

    Example:
        >>> import jax, jax.numpy as jnp, dataclasses
        >>> from gpt_models import PRESETS, generate, init_params
        >>> cfg = dataclasses.replace(PRESETS["tiny"].model, d_model=32, n_layers=1, n_heads=2)
        >>> params = init_params(cfg, jax.random.key(0))
        >>> out = generate(params, jnp.array([72, 105]), cfg, max_new_tokens=5, temperature=0.0,
        ...                key=jax.random.key(1))
        >>> out.shape
        (7,)
    """
    cfg = getattr(config, "model", config)
    prompt = jnp.asarray(prompt, jnp.int32)
    squeeze = prompt.ndim == 1
    prompt = prompt[None] if squeeze else prompt
    options = _options(cfg, prompt.shape[1], max_new_tokens, temperature, top_k, top_p)
    if max_new_tokens == 0:
        return prompt[0] if squeeze else prompt
    run = _generate_cached if use_cache else _generate_uncached
    out = run(params, prompt, key, cfg, max_new_tokens, options, stop_token)
    return out[0] if squeeze else out


def _options(
    cfg: Any,
    prompt_len: int,
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
) -> tuple:
    """The static sampling options, once the arguments are checked (``generate`` and its AOT
    twin)."""
    problems = sampling_problems("", max_new_tokens, temperature, top_k, top_p)
    if problems:
        raise ValueError(f"generate: {'; '.join(problems)}.")
    _check_length(cfg, prompt_len, max_new_tokens)
    return float(temperature), int(top_k or 0) or None, None if top_p is None else float(top_p)


def compile_generate(
    params: Any,
    prompt_len: int,
    config: Any,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    stop_token: int | None = None,
) -> Any:
    """The program ``generate`` runs for one prompt of ``prompt_len`` tokens, compiled ahead of
    time.

    ``params`` may be abstract (``abstract_params``); the memory pre-flight of ``gpt sample`` reads
    the result's ``memory_analysis()``. A later ``generate`` call of the same sizes reuses it.
    """
    cfg = getattr(config, "model", config)
    prompt = jax.ShapeDtypeStruct((1, prompt_len), jnp.int32)
    key = jax.eval_shape(lambda: jax.random.key(0))
    options = _options(cfg, prompt_len, max_new_tokens, temperature, top_k, top_p)
    return _generate_cached.lower(
        params, prompt, key, cfg, max_new_tokens, options, stop_token
    ).compile()


def _loop(
    first: Any, step: Any, max_new_tokens: int, prompt: Array, stop_token: int | None
) -> Array:
    """Shared decode loop: ``step(carry, i) -> (carry, token)`` writes tokens ``1..max_new - 1``."""
    batch, plen = prompt.shape
    tokens = jnp.zeros((batch, plen + max_new_tokens), jnp.int32).at[:, :plen].set(prompt)
    carry, tok = first
    stop = -1 if stop_token is None else stop_token
    tokens = tokens.at[:, plen].set(tok)
    done = tok == stop

    def cond(state: tuple) -> Array:
        i, _, _, done, _ = state
        return (i < max_new_tokens) & ~jnp.all(done)

    def body(state: tuple) -> tuple:
        i, carry, tok, done, tokens = state
        carry, new = step(carry, i, tok)
        new = jnp.where(done, stop, new)
        tokens = jax.lax.dynamic_update_slice_in_dim(tokens, new[:, None], plen + i, axis=1)
        return i + 1, carry, new, done | (new == stop), tokens

    _, _, _, done, tokens = jax.lax.while_loop(cond, body, (jnp.int32(1), carry, tok, done, tokens))
    if stop_token is not None:  # rows that stopped early: fill the rest with the stop token
        after = jnp.cumsum(tokens[:, plen:] == stop, axis=1) > 0
        tokens = tokens.at[:, plen:].set(jnp.where(after, stop, tokens[:, plen:]))
    return tokens


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6))
def _generate_cached(
    params: Any, prompt: Array, key: Any, cfg: Any, max_new: int, options: tuple, stop: Any
) -> Array:
    batch, plen = prompt.shape
    model = gpt(cfg)
    # The KV cache lives in the params (non-trainable entries of each attention layer).
    cached = model.init_cache(params, batch, plen + max_new)
    logits, cached = model(cached, prompt, positions=jnp.arange(plen), decode=True)
    first = sample_token(logits[:, -1], jax.random.fold_in(key, 0), *options)

    def step(cached: Any, i: Array, tok: Array) -> tuple[Any, Array]:
        # Feed the previous token (at position plen + i - 1), predict position plen + i.
        pos = (plen + i - 1)[None]
        logits, cached = model(cached, tok[:, None], positions=pos, decode=True)
        return cached, sample_token(logits[:, 0], jax.random.fold_in(key, i), *options)

    return _loop((cached, first), step, max_new, prompt, stop)


@functools.partial(jax.jit, static_argnums=(3, 4, 5, 6))
def _generate_uncached(
    params: Any, prompt: Array, key: Any, cfg: Any, max_new: int, options: tuple, stop: Any
) -> Array:
    batch, plen = prompt.shape
    buf = jnp.zeros((batch, plen + max_new), jnp.int32).at[:, :plen].set(prompt)
    model = gpt(cfg)
    logits = model(params, buf)[0]
    first = sample_token(logits[:, plen - 1], jax.random.fold_in(key, 0), *options)
    buf = buf.at[:, plen].set(first)

    def step(buf: Array, i: Array, tok: Array) -> tuple[Array, Array]:
        # Causal attention: positions after plen + i - 1 (still zeros) do not affect its logits.
        logits = model(params, buf)[0]
        row = jax.lax.dynamic_index_in_dim(logits, plen + i - 1, axis=1, keepdims=False)
        new = sample_token(row, jax.random.fold_in(key, i), *options)
        return jax.lax.dynamic_update_slice_in_dim(buf, new[:, None], plen + i, axis=1), new

    return _loop((buf, first), step, max_new, prompt, stop)
