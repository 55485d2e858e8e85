"""The two programs of continuous batching, on a KV cache of ``slots`` rows of ``max_len``
positions that sequences join and leave between steps.

Each slot is decoded as a batch of one with its own cache position: the model's cache keeps one
write index for its whole batch, so the step maps the model over the slots (``jax.vmap``), each
with its own index. ``prefill`` writes one prompt (padded to its bucket's length) into one slot and
samples its first token; ``step`` feeds each of the first ``k`` slots its last token and samples
the next, ``k`` the busy slots' count rounded up to a power of two (the busy slots are kept first:
``move``). A slot past the busy ones within ``k`` is decoded too (its result is dropped), so the
step compiles once per ``k``, and ``prefill`` once per prompt bucket.

A prompt padded past its length leaves the pad's keys in the cache, past the slot's position:
attention never sees them (a query sees the positions up to its own), and the tokens decoded
next overwrite them in order.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

import blox as bx

from .._model.gpt import gpt

Array = jax.Array
_CACHE = ("cache_key", "cache_value", "cache_index")


class Knobs(NamedTuple):
    """Per-row sampling settings as arrays (they change per request without a new compile):
    ``temperature`` (0: greedy), ``top_p`` (1: all), ``top_k`` (0: all) and the random ``key``
    data of each row, whose token ``i`` draws with ``fold_in(key, i)`` as ``generate`` does."""

    temperature: Array
    top_p: Array
    top_k: Array
    key: Array


def _is_cache(path: tuple[str, ...], _: Any) -> bool:
    return path[-1] in _CACHE


def split_cache(params: bx.Params) -> tuple[bx.Params, bx.Params]:
    """``(weights, cache)``: the model's params without and with only its KV cache entries."""
    cache, weights = params.split(_is_cache)
    return weights, cache


def empty_cache(weights: bx.Params, cfg: Any, slots: int, max_len: int) -> bx.Params:
    """A zero KV cache for ``slots`` sequences of up to ``max_len`` tokens each (leading slot
    axis; per slot the cache of a batch of one, stacked over layers like the model's)."""
    model = gpt(cfg)
    shapes = jax.eval_shape(lambda w: split_cache(model.init_cache(w, 1, max_len))[1], weights)
    return jax.tree.map(lambda a: jnp.zeros((slots, *a.shape), a.dtype), shapes)


def cache_bytes(cfg: Any, slots: int, max_len: int) -> int:
    """Bytes of :func:`empty_cache` for ``cfg`` (nothing is allocated)."""
    from .._model.gpt import param_specs

    weights = split_cache(bx.Params(param_specs(cfg)))[0]
    abstract = jax.eval_shape(lambda w: empty_cache(w, cfg, slots, max_len), weights)
    return sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(abstract))


def _at(row: bx.Params, position: Array) -> bx.Params:
    """A slot's cache with its write index (every layer's) set to ``position``."""
    index, kv = row.split(lambda path, _: path[-1] == "cache_index")
    return kv.merge(jax.tree.map(lambda a: jnp.full_like(a, position), index))


def pick(logits: Array, knobs: Knobs, i: Array) -> tuple[Array, Array]:
    """Token ``i`` of one row (``logits: (vocab,)``), and its log-probability under the model.

    Greedy at temperature 0 (the same argmax as ``generate``); otherwise drawn from the logits
    divided by the temperature, cut to the top-k and to the top-p mass (the most likely token
    always stays).
    """
    greedy = jnp.argmax(logits).astype(jnp.int32)
    scaled = logits / jnp.maximum(knobs.temperature, 1e-6)
    ordered = jnp.sort(scaled)[::-1]
    neg = jnp.finfo(scaled.dtype).min
    kth = ordered[jnp.clip(knobs.top_k - 1, 0, ordered.shape[0] - 1)]
    scaled = jnp.where((knobs.top_k > 0) & (scaled < kth), neg, scaled)
    probs = jax.nn.softmax(jnp.where((knobs.top_k > 0) & (ordered < kth), neg, ordered))
    keep = (jnp.cumsum(probs) - probs) < knobs.top_p
    threshold = jnp.min(jnp.where(keep, ordered, jnp.inf))
    scaled = jnp.where((knobs.top_p < 1) & (scaled < threshold), neg, scaled)
    key = jax.random.fold_in(jax.random.wrap_key_data(knobs.key), i)
    drawn = jax.random.categorical(key, scaled).astype(jnp.int32)
    token = jnp.where(knobs.temperature == 0, greedy, drawn)
    return token, jax.nn.log_softmax(logits)[token]


@functools.partial(jax.jit, static_argnums=0, donate_argnums=2)
def prefill(
    cfg: Any,
    weights: bx.Params,
    cache: bx.Params,
    slot: Array,
    prompt: Array,
    length: Array,
    knobs: Knobs,
) -> tuple[Array, Array, bx.Params]:
    """Write ``prompt`` (``(1, bucket)``, its first ``length`` tokens real) into ``slot``'s
    cache; the first new token, its log-probability and the cache."""
    model = gpt(cfg)
    row = _at(jax.tree.map(lambda a: a[slot], cache), jnp.int32(0))
    bucket = prompt.shape[1]
    logits, row = model(weights.merge(row), prompt, positions=jnp.arange(bucket), decode=True)
    row = split_cache(row)[1]
    cache = jax.tree.map(lambda c, r: c.at[slot].set(r), cache, row)
    token, logprob = pick(logits[0, length - 1], knobs, jnp.int32(0))
    return token, logprob, cache


@functools.partial(jax.jit, static_argnums=0, donate_argnums=2)
def step(
    cfg: Any,
    weights: bx.Params,
    cache: bx.Params,
    tokens: Array,
    positions: Array,
    knobs: Knobs,
    made: Array,
) -> tuple[Array, Array, bx.Params]:
    """One decoding step of the first ``k`` slots (``k``: the length of ``tokens``, each slot's
    last token, at ``positions``): the next tokens (slot ``s`` draws with ``made[s]``, its count
    of tokens so far), their log-probabilities and the cache. The slots past ``k`` are left as
    they are: a step costs what its busy slots need, one compile per ``k``."""
    model = gpt(cfg)
    k = tokens.shape[0]

    def one(row: bx.Params, token: Array, position: Array) -> tuple[Array, bx.Params]:
        p = weights.merge(_at(row, position))
        logits, p = model(p, token[None, None], positions=position[None], decode=True)
        return logits[0, 0], split_cache(p)[1]

    first = jax.tree.map(lambda c: c[:k], cache)
    logits, first = jax.vmap(one)(first, tokens, positions)
    cache = jax.tree.map(lambda c, f: c.at[:k].set(f), cache, first)
    new, logprobs = jax.vmap(pick)(logits, knobs, made)
    return new, logprobs, cache


@functools.partial(jax.jit, donate_argnums=0)
def move(cache: bx.Params, source: Array, target: Array) -> bx.Params:
    """The cache with slot ``source``'s rows copied to slot ``target`` (the busy slots are kept
    first, so that a step decodes only them)."""
    return jax.tree.map(lambda c: c.at[target].set(c[source]), cache)
