"""``MoE``: the top-k router's picks and weights, the grouped-matmul dispatch against every
expert computed densely, the load-balancing loss, logical axes, gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx


def _moe(**kwargs):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    options = {"num_experts": 4, "top_k": 2, "hidden_size": 8, **kwargs}
    return bx.MoE(graph / "moe", rng=rng, **options), rng.seed(bx.Params(), seed=0)


def _dense(params, x, top_k, normalize):
    """Every expert on every token, then the router's top-k weights (zero elsewhere)."""
    w = {k[-1]: np.asarray(v.value, np.float64) for k, v in params.items() if k[1] == "moe"}
    flat = np.asarray(x, np.float64).reshape(-1, x.shape[-1])
    logits = flat @ w["router"]
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    top = np.argsort(-probs, axis=-1)[:, :top_k]
    gates = np.zeros_like(probs)
    np.put_along_axis(gates, top, np.take_along_axis(probs, top, -1), -1)
    if normalize:
        gates /= gates.sum(-1, keepdims=True)
    silu = lambda a: a / (1 + np.exp(-a))
    hidden = silu(np.einsum("nd,edf->nef", flat, w["gate"])) * np.einsum(
        "nd,edf->nef", flat, w["up"]
    )
    out = np.einsum("nef,efd->ned", hidden, w["down"])
    return np.einsum("ned,ne->nd", out, gates).reshape(x.shape), probs, top


@pytest.mark.parametrize("normalize", [True, False])
def test_the_dispatch_equals_every_expert_computed_densely(normalize):
    moe, params = _moe(normalize_top_k=normalize)
    x = jax.random.normal(jax.random.key(1), (3, 5, 6))
    (y, stats), params = moe(params, x)
    want, probs, top = _dense(params, x, 2, normalize)
    np.testing.assert_allclose(y, want, atol=1e-5)
    counts = np.bincount(top.reshape(-1), minlength=4) / top.size
    np.testing.assert_allclose(stats["expert_fraction"], counts, atol=1e-6)
    aux = 4 * np.sum(counts * 2 * probs.mean(0))
    np.testing.assert_allclose(stats["aux_loss"], aux, rtol=1e-5)
    np.testing.assert_allclose(stats["router_prob"], probs.mean(0), rtol=1e-5)


def test_experts_carry_their_logical_axis_and_gradients_reach_every_param():
    axes = {"router": ("embed", None), "gate": ("expert", "embed", "mlp"),
            "up": ("expert", "embed", "mlp"), "down": ("expert", "mlp", "embed")}  # fmt: skip
    moe, params = _moe(metadata={k: {"logical_axes": v} for k, v in axes.items()})
    x = jax.random.normal(jax.random.key(2), (4, 6))
    _, params = moe(params, x)
    assert {k[-1]: p.logical_axes for k, p in params.items() if k[1] == "moe"} == axes

    weights, rest = params.split()

    def loss(w):
        (y, stats), _ = moe(w.merge(rest), x)
        return jnp.sum(y**2) + stats["aux_loss"]

    grads = jax.jit(jax.grad(loss))(weights)
    for k in ("router", "gate", "up", "down"):
        g = grads[("net", "moe", k)].value
        assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).max()) > 0


def test_more_picks_than_experts_and_unknown_metadata_are_refused():
    with pytest.raises(ValueError, match=r"net/moe: top_k=5 picks more experts than there are "):
        _moe(top_k=5)
    with pytest.raises(ValueError, match=r"metadata names unknown parameters \['gates'\]"):
        _moe(metadata={"gates": {}})
