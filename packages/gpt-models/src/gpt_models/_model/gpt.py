"""The GPT model as blox modules, its parameters (with logical axes) and its forward pass.

Every parameter is created by a blox layer with ``{'logical_axes': ...}`` metadata, so paramspec
shards the model's ``blox.Params`` by the trainer's rules, and Muon picks its matrices by those
axes. Transformer blocks are a ``blox.Repeat``: their params are stored stacked (a leading
``layers`` axis) whether the forward pass scans over them or loops in Python, so a checkpoint does
not depend on ``model.scan_layers``.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

import blox as bx
import paramspec as ps

from .._config.model import ModelConfig
from .._distributed.mesh import RULES, single_device_mesh
from .block import RESIDUAL, Block, Common, axes, compute_dtype, no_constraint, per_layer
from .lora import lora_config, make_lora

Array = jax.Array

_REMAT_POLICIES = {
    "full": None,  # save nothing: recompute the whole block in the backward pass
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


class GPT(bx.Module):
    """The whole model: token (and position) embeddings, repeated blocks, final norm, unembedding.

    ``logits, params = model(params, tokens, positions=None, segment_ids=None, decode=False,
    is_training=False, constrain=...)``: logits ``(B, T, vocab)`` in float32. ``segment_ids``
    ``(B, T)`` (1, 2, ... per example, 0 for padding) make a packed row score each of its examples
    as it would be scored alone: attention stays within an example and positions (RoPE or
    learned) restart at each one. ``decode=True`` reads and advances the
    KV cache that :meth:`init_cache` adds to ``params``. ``is_training=True`` applies
    ``model.dropout`` (to the embedding output, the attention probabilities and each residual
    branch), drawing its keys from ``model.rng``, which ``params`` must then hold
    (:func:`loss_fn` seeds it from its ``dropout_key``). Build one with :func:`gpt` (cached per
    config). A model section carrying ``[lora]`` (``gpt(config)`` of a ``Config`` with
    ``lora.rank > 0``) builds its blocks with LoRA adapters: ``model.lora`` is their ``bx.LoRA``.
    ``stats=True`` returns ``((logits, stats), params)``: for a mixture of experts
    (``model.n_experts``) ``stats`` holds ``aux_loss`` and ``expert_fraction`` over all layers
    (:func:`moe_stats`); a dense model's is ``{}``.

    Example:
        >>> import jax, jax.numpy as jnp, dataclasses
        >>> from gpt_models import PRESETS, gpt, init_params
        >>> cfg = dataclasses.replace(PRESETS["tiny"].model, n_layers=1)
        >>> model = gpt(cfg)
        >>> logits, _ = model(init_params(cfg, jax.random.key(0)), jnp.zeros((1, 4), jnp.int32))
        >>> logits.shape
        (1, 4, 256)
    """

    def __init__(self, graph: bx.Graph, cfg: ModelConfig) -> None:
        super().__init__(graph)
        c = Common(cfg)
        self.cfg = cfg
        self.rng = bx.Rng(graph / "rng")
        self.lora = make_lora(cfg, self.rng)
        self.embed = bx.Embed(
            graph / "embed",
            cfg.vocab_size,
            cfg.d_model,
            rng=self.rng,
            embedding_init=c.init,
            metadata=axes("vocab", "embed"),
            dtype=c.dtype,
            param_dtype=c.param_dtype,
        )
        self.pos_embed = None
        if cfg.pos == "learned":
            self.pos_embed = bx.Embed(
                graph / "pos_embed",
                cfg.seq_len,
                cfg.d_model,
                rng=self.rng,
                embedding_init=c.init,
                metadata=axes(None, "embed"),
                dtype=c.dtype,
                param_dtype=c.param_dtype,
            )
        self.embed_drop = bx.Dropout(graph / "embed_drop", cfg.dropout, rng=self.rng)
        blocks = graph / "blocks"
        self.block = Block(blocks / "block", cfg, self.rng, self.lora)
        self.blocks = bx.Repeat(
            blocks,
            self.block,
            cfg.n_layers,
            rng=self.rng,
            remat=cfg.remat != "none",
            remat_policy=_REMAT_POLICIES.get(cfg.remat),
            logical_axis="layers",
            is_static=not cfg.scan_layers,
            per_layer=per_layer(cfg),
            collect=cfg.n_experts > 0,  # each layer's router statistics
        )
        self.final_norm = c.norm(graph / "final_norm")
        self.unembed = None
        if not cfg.tie_embeddings:
            self.unembed = bx.Linear(
                graph / "unembed",
                cfg.vocab_size,
                rng=self.rng,
                use_bias=False,
                kernel_init=c.init,
                kernel_metadata=axes("embed", "vocab"),
                dtype=c.dtype,
                param_dtype=c.param_dtype,
            )

    def __call__(
        self,
        params: bx.Params,
        tokens: Array,
        *,
        positions: Array | None = None,
        segment_ids: Array | None = None,
        decode: bool = False,
        is_training: bool = False,
        constrain: Any = no_constraint,
        stats: bool = False,
    ) -> tuple[Any, bx.Params]:
        cfg = self.cfg
        x, params = self._embed(params, tokens, constrain)
        if cfg.embed_scale:  # Gemma: sqrt(d_model), rounded to the activations' dtype first
            x = x * jnp.asarray(math.sqrt(cfg.d_model), x.dtype)
        if self.pos_embed is not None:
            if positions is None:  # RoPE's positions are the attention's own, from segment_ids
                positions = (
                    jnp.arange(tokens.shape[-1])
                    if segment_ids is None
                    else bx.segment_positions(segment_ids)
                )
            pos, params = self.pos_embed(params, positions)
            x = x + pos
        # Dropped after the placement: the mask is drawn where the stream's shards live.
        x, params = self.embed_drop(params, constrain(x, RESIDUAL), is_training=is_training)
        x, params = self.blocks(
            params,
            x,
            segment_ids=segment_ids,
            decode=decode,
            is_training=is_training,
            constrain=constrain,
        )
        x, layers = x if cfg.n_experts else (x, None)
        x, params = self.final_norm(params, x)
        if self.unembed is None:
            logits, params = self.embed.attend(params, x)
        else:
            logits, params = self.unembed(params, x)
        logits = logits.astype(jnp.float32)
        if cfg.logit_softcap > 0:
            logits = cfg.logit_softcap * jnp.tanh(logits / cfg.logit_softcap)
        if cfg.real_vocab < cfg.vocab_size:  # padded ids: never sampled, never scored
            logits = jnp.where(jnp.arange(cfg.vocab_size) < cfg.real_vocab, logits, -jnp.inf)
        if stats:
            return (logits, moe_stats(cfg, layers)), params
        return logits, params

    def _embed(self, params: bx.Params, tokens: Array, constrain: Any) -> tuple[Array, bx.Params]:
        # The lookup reads a whole copy of the table: a gather from a table sharded on both axes
        # makes XLA replicate it anyway, with a warning. (The tied unembedding keeps the sharded
        # table, so its matmul stays split over the vocabulary.)
        path = (*self.embed.path, "embedding")
        entry = params.get(path)
        if entry is None:  # first call: the Embed creates the table
            return self.embed(params, tokens)
        gathered = entry.replace(value=constrain(entry.value, (None, None)))
        x, _ = self.embed(params.merge(bx.Params({path: gathered})), tokens)
        return x, params

    def init_cache(self, params: bx.Params, batch: int, max_length: int) -> bx.Params:
        """``params`` plus an empty KV cache for ``batch`` rows of ``max_length`` positions.

        The blocks' cache is stacked like their params (one slice per layer).
        """
        one = self.block.attn.init_cache(bx.Params(), (batch,), max_length, compute_dtype(self.cfg))
        stacked = jax.tree.map(lambda a: jnp.zeros((self.cfg.n_layers, *a.shape), a.dtype), one)
        return params.merge(stacked)


def moe_stats(cfg: ModelConfig, layers: Any) -> dict[str, Array]:
    """The load-balancing loss and per-expert token shares of a whole mixture-of-experts model.

    ``layers`` holds each MoE layer's ``expert_fraction`` and ``router_prob`` ``(n_layers, E)``
    (``bx.MoE``'s stats, stacked). As Mixtral's loss in transformers does, both are averaged
    over every layer's tokens first, then multiplied: ``aux_loss = E * sum_e (k * f_e) * P_e``
    with ``f_e`` the share of the picks expert ``e`` got and ``P_e`` its mean router
    probability, over all layers (``k`` when balanced). ``expert_fraction`` ``(E,)`` is the
    ``f_e``. A dense model (``layers`` None) has none: ``{}``.

    Example:
        >>> import jax.numpy as jnp
        >>> from gpt_models import ModelConfig
        >>> cfg = ModelConfig(n_experts=4, experts_per_token=2)
        >>> even = jnp.full((3, 4), 0.25)  # 3 layers, 4 experts, each picked as often
        >>> float(moe_stats(cfg, {"expert_fraction": even, "router_prob": even})["aux_loss"])
        2.0
    """
    if layers is None:
        return {}
    fraction = layers["expert_fraction"].mean(0)
    prob = layers["router_prob"].mean(0)
    aux = cfg.n_experts * jnp.sum(fraction * cfg.experts_per_token * prob)
    return {"aux_loss": aux, "expert_fraction": fraction}


@functools.cache
def gpt(config: Any) -> GPT:
    """The :class:`GPT` module for a :class:`ModelConfig` (or a :class:`Config`), built once.

    A ``Config`` with ``lora.rank > 0`` gives the model with its LoRA adapters.

    Example:
        >>> from gpt_models import PRESETS, gpt
        >>> gpt(PRESETS["tiny"]) is gpt(PRESETS["tiny"].model)
        True
    """
    cfg = getattr(config, "model", config)
    if cfg is not config:
        return gpt(cfg)
    return GPT(bx.Graph("gpt") / "model", cfg)


def init_fn(cfg: ModelConfig) -> Any:
    model = gpt(cfg)

    def init(key: Any) -> bx.Params:
        params = model.rng.seed(bx.Params(), seed=key)
        _, params = model(params, jnp.zeros((1, 1), jnp.int32))
        # The weights alone (the init Rng state is not trained, saved or sharded), locked so that
        # a later call with a changed config fails by name instead of adding fresh weights.
        weights = params.split()[0]
        if model.lora is not None:  # only the adapters train: the rest is marked frozen
            weights = model.lora.freeze_base(weights)
        return weights.locked()

    return init


@functools.cache
def param_specs(config: Any) -> bx.Params:
    """The model's params as ``ShapeDtypeStruct`` s, each with its logical axes: built once per
    config.

    What :func:`paramspec.shardings` and :func:`paramspec.abstract` read (nothing is allocated).

    Example:
        >>> from gpt_models import PRESETS, param_specs
        >>> p = param_specs(PRESETS["tiny"])[("gpt", "model", "blocks", "block", "attn", "query")]
        >>> p.shape, p.logical_axes
        ((4, 128, 4, 32), ('layers', 'embed', 'heads', 'head_dim'))
    """
    cfg = getattr(config, "model", config)
    return jax.eval_shape(init_fn(cfg), jax.random.key(0))  # type: ignore[no-any-return]


def forward(params: bx.Params, tokens: Array, config: Any) -> Array:
    """Next-token logits ``(batch, seq, vocab)`` (float32) for integer ``tokens: (batch, seq)``.

    Args:
        params: the model parameters (``init_params`` or a checkpoint).
        tokens: token ids, at most ``model.seq_len`` long.
        config: a :class:`Config` or its ``ModelConfig``.

    Example:
        >>> import jax, jax.numpy as jnp, dataclasses
        >>> from gpt_models import PRESETS, forward, init_params
        >>> cfg = dataclasses.replace(PRESETS["tiny"].model, d_model=32, n_layers=1, n_heads=2)
        >>> params = init_params(cfg, jax.random.key(0))
        >>> forward(params, jnp.zeros((2, 5), jnp.int32), cfg).shape
        (2, 5, 256)
    """
    return gpt(config)(params, tokens)[0]


def drops(model: ModelConfig) -> bool:
    """Whether training ``model`` draws dropout masks (``model.dropout`` or ``lora.dropout``)."""
    lora = lora_config(model)
    return model.dropout > 0 or (lora is not None and lora.dropout > 0)


def param_count(config: Any) -> int:
    """Number of parameters of the model ``config`` describes.

    Example:
        >>> from gpt_models import PRESETS, param_count
        >>> round(param_count(PRESETS["gpt2-small"].model) / 1e6)
        124
    """
    return sum(math.prod(p.shape) for p in jax.tree.leaves(param_specs(config)))


def init_params(config: Any, key: Any, mesh: Mesh | None = None, rules: Any = None) -> bx.Params:
    """Fresh parameters, created in one jitted computation directly in their sharded layout.

    The blox model's first call runs under ``paramspec.init_sharded``: each device computes only
    its own shards, placed by the params' logical axes and ``rules``.

    Args:
        config: a :class:`Config` or its ``ModelConfig``.
        key: a ``jax.random.key``.
        mesh: the mesh (default: the first device alone).
        rules: logical-axis rules (default: the trainer's data/fsdp/tensor rules).

    Example:
        >>> import jax, dataclasses
        >>> from gpt_models import PRESETS, init_params
        >>> cfg = dataclasses.replace(PRESETS["tiny"].model, n_layers=1)
        >>> init_params(cfg, jax.random.key(0))[("gpt", "model", "embed", "embedding")].shape
        (256, 128)
    """
    cfg = getattr(config, "model", config)
    mesh = mesh if mesh is not None else single_device_mesh()
    rules = rules if rules is not None else RULES
    return ps.init_sharded(init_fn(cfg), key, mesh, rules)  # type: ignore[no-any-return]


def abstract_params(cfg: Any, mesh: jax.sharding.Mesh) -> Any:
    """``ShapeDtypeStruct`` s with shardings for the params alone (what sampling restores).

    ``cfg`` is a :class:`Config` or its ``ModelConfig``.

    Example:
        >>> import jax
        >>> from gpt_models import PRESETS, MeshConfig, make_mesh
        >>> mesh = make_mesh(MeshConfig(data=-1), jax.devices()[:1])
        >>> abstract = abstract_params(PRESETS["tiny"], mesh)
        >>> abstract["gpt", "model", "embed", "embedding"].value.shape
        (256, 128)
    """
    return ps.abstract(param_specs(getattr(cfg, "model", cfg)), mesh, RULES)
