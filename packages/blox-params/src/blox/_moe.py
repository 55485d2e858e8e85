"""``MoE``: a mixture of gated-MLP experts with a top-k router, dispatched by sort and grouped
matmul (no loop over the experts)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from ._checks import positive_int
from ._dtypes import promote
from ._graph import Graph
from ._module import Initializer, Module
from ._params import Params
from ._rng import Rng

_NAMES = ("router", "gate", "up", "down")


class MoE(Module):
    """Each token goes through ``top_k`` of ``num_experts`` gated MLPs, weighted by a router.

    ``(y, stats), params = moe(params, x)`` for ``x (..., D)``: the router's softmax over the
    experts (in float32) picks each token's ``top_k`` experts; ``normalize_top_k=True``
    renormalises the picked probabilities to sum to one (Mixtral's softmax over the top-k
    logits, Qwen3-MoE's ``norm_topk_prob``), ``False`` keeps them as they are. Expert ``e``
    computes ``down_e(activation(gate_e(x)) * up_e(x))``.

    Dispatch: the ``N * top_k`` (token, expert) pairs are sorted by expert, their tokens
    gathered, and each projection is one ``jax.lax.ragged_dot`` over the expert groups (a grouped
    matmul); the weighted outputs are scattered back onto their tokens. No Python loop over the
    experts, and no capacity: no token is dropped.

    ``stats`` holds ``aux_loss``, the load-balancing loss of Switch and Mixtral,
    ``num_experts * sum_e f_e * P_e`` (``f_e``: the share of the ``N * top_k`` picks that went to
    expert ``e`` times ``top_k``; ``P_e``: the mean router probability of ``e``; ``top_k`` when
    perfectly balanced, up to ``num_experts`` when one expert takes every pick; differentiable
    through ``P``), ``expert_fraction`` ``(num_experts,)``, the share of picks each expert got
    (sums to 1), and ``router_prob`` ``(num_experts,)``, the ``P_e``. A model of several MoE
    layers combines the last two over its layers (Mixtral's loss averages each over all the
    layers' tokens, then takes the same product).

    Args:
        graph: the node to bind to.
        num_experts: experts.
        top_k: experts per token, at most ``num_experts``.
        hidden_size: each expert's hidden width.
        rng: draws init keys.
        activation: of the gate (default SiLU: SwiGLU experts).
        normalize_top_k: renormalise the picked probabilities (see above).
        kernel_init: initializer of ``router``, ``gate`` and ``up`` (default LeCun normal).
        out_init: initializer of ``down``.
        metadata: per-parameter metadata keyed by ``router``, ``gate``, ``up``, ``down``, e.g.
            ``{'gate': {'logical_axes': ('expert', 'embed', 'mlp')}}``: a logical ``expert`` axis
            lets paramspec rules shard the experts over devices (expert parallelism).
        dtype: computation dtype (the router runs in float32).
        param_dtype: storage dtype of the parameters.

    Params: ``router (D, E)``, ``gate`` and ``up`` ``(E, D, hidden_size)``, ``down
    (E, hidden_size, D)``.

    Example:
        >>> import jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> moe = bx.MoE(graph / 'moe', num_experts=4, top_k=2, hidden_size=8, rng=rng)
        >>> (y, stats), params = moe(rng.seed(bx.Params(), seed=0), jnp.ones((2, 3, 6)))
        >>> y.shape, params[('net', 'moe', 'gate')].shape, stats['expert_fraction'].shape
        ((2, 3, 6), (4, 6, 8), (4,))
    """

    def __init__(
        self,
        graph: Graph,
        num_experts: int,
        top_k: int,
        hidden_size: int,
        *,
        rng: Rng | None = None,
        activation: Callable[[jax.Array], jax.Array] = jax.nn.silu,
        normalize_top_k: bool = True,
        kernel_init: Initializer | None = None,
        out_init: Initializer | None = None,
        metadata: Mapping[str, Mapping[str, Any] | None] | None = None,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
    ) -> None:
        super().__init__(graph)
        self.num_experts = positive_int(num_experts, "num_experts", self)
        self.top_k = positive_int(top_k, "top_k", self)
        self.hidden_size = positive_int(hidden_size, "hidden_size", self)
        if self.top_k > self.num_experts:
            raise ValueError(
                f"{self.name}: top_k={top_k} picks more experts than there are "
                f"(num_experts={num_experts}); pass top_k <= num_experts."
            )
        self.metadata = dict(metadata or {})
        unknown = sorted(set(self.metadata) - set(_NAMES))
        if unknown:
            raise ValueError(
                f"{self.name}: metadata names unknown parameters {unknown}; the known ones are "
                f"{list(_NAMES)}."
            )
        self.rng, self.activation, self.normalize_top_k = rng, activation, bool(normalize_top_k)
        self.kernel_init = kernel_init or jax.nn.initializers.lecun_normal(in_axis=-2, out_axis=-1)
        self.out_init = out_init or self.kernel_init
        self.dtype, self.param_dtype = dtype, param_dtype

    def _param(self, params: Params, name: str, shape: tuple[int, ...], init: Any) -> Any:
        meta = self.metadata.get(name)
        return self.get_param(params, name, shape, init, self.param_dtype, metadata=meta)

    def __call__(self, params: Params, x: jax.Array) -> tuple[tuple[jax.Array, dict], Params]:
        x = jnp.asarray(x)
        D, E, F, k = x.shape[-1], self.num_experts, self.hidden_size, self.top_k
        router, params = self._param(params, "router", (D, E), self.kernel_init)
        gate, params = self._param(params, "gate", (E, D, F), self.kernel_init)
        up, params = self._param(params, "up", (E, D, F), self.kernel_init)
        down, params = self._param(params, "down", (E, F, D), self.out_init)
        flat = x.reshape(-1, D)
        logits = flat.astype(jnp.float32) @ router.astype(jnp.float32)  # (N, E)
        probs = jax.nn.softmax(logits, axis=-1)
        weights, experts = jax.lax.top_k(probs, k)  # (N, k)
        if self.normalize_top_k:
            weights = weights / weights.sum(-1, keepdims=True)
        picks = experts.reshape(-1)  # (N * k,): token t's picks at t * k ... t * k + k - 1
        order = jnp.argsort(picks, stable=True)
        tokens = order // k
        sizes = jnp.bincount(picks, length=E).astype(jnp.int32)
        xs, gate, up, down = promote(self.dtype, flat[tokens], gate, up, down)
        hidden = self.activation(jax.lax.ragged_dot(xs, gate, sizes))
        hidden = hidden * jax.lax.ragged_dot(xs, up, sizes)
        out = jax.lax.ragged_dot(hidden, down, sizes)  # (N * k, D), sorted by expert
        out = out * weights.reshape(-1)[order][:, None].astype(out.dtype)
        y = jnp.zeros((flat.shape[0], D), out.dtype).at[tokens].add(out)
        fraction = sizes.astype(jnp.float32) / picks.shape[0]
        aux = E * jnp.sum(fraction * k * probs.mean(0))
        stats = {"aux_loss": aux, "expert_fraction": fraction, "router_prob": probs.mean(0)}
        return (y.reshape(x.shape), stats), params
