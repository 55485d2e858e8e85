"""``bx.MoE`` train-step throughput with and without expert parallelism, on 4 CPU devices.

One jitted step (forward, backward, SGD update) of a Mixtral-shaped MoE layer (8 experts, top 2)
on a batch whose tokens are split over the 4 devices. ``replicated``: every device holds all
experts (``expert`` -> None). ``expert-sharded``: the logical ``expert`` axis is mapped to the
mesh axis, each device holding 2 of the 8 experts (paramspec rules; XLA moves the tokens).
Tokens/s are the median of 5 timed steps after 2 warm-up steps, each variant in this process.
``python benchmarks/moe/run.py`` (sets ``--xla_force_host_platform_device_count=4`` itself).
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import statistics
import time

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec

import blox as bx
import paramspec as ps

D, F, E, K, TOKENS = 256, 512, 8, 2, 4096
AXES = {"router": ("embed", None), "gate": ("expert", "embed", "mlp"),
        "up": ("expert", "embed", "mlp"), "down": ("expert", "mlp", "embed")}  # fmt: skip


def step_time(rules: dict) -> float:
    mesh = ps.make_mesh((4,), ("devices",))
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    moe = bx.MoE(graph / "moe", E, K, F, rng=rng,
                 metadata={k: {"logical_axes": v} for k, v in AXES.items()})  # fmt: skip
    x = jax.random.normal(jax.random.key(1), (TOKENS, D))
    _, params = moe(rng.seed(bx.Params(), seed=0), x[:8])
    weights, rest = params.split()
    rules = ps.Rules({"embed": None, "mlp": None, **rules})
    weights = weights.map(lambda p: jax.device_put(
        p.value, ps.logical_to_sharding(p.logical_axes, mesh, rules)))  # fmt: skip
    x = jax.device_put(x, NamedSharding(mesh, PartitionSpec("devices")))

    @jax.jit
    def step(w, x):
        def loss(w):
            (y, stats), _ = moe(w.merge(rest), x)
            return jnp.mean(y**2) + 0.01 * stats["aux_loss"]

        grads = jax.grad(loss)(w)
        return jax.tree.map(lambda a, g: a - 1e-3 * g, w, grads)

    for _ in range(2):
        weights = jax.block_until_ready(step(weights, x))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        weights = jax.block_until_ready(step(weights, x))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    print(f"devices: {jax.devices()}")
    print("| experts | tokens/s (fwd+bwd+update) |\n|---|---|")
    for name, rules in (
        ("replicated", {"expert": None}),
        ("expert-sharded", {"expert": "devices"}),
    ):
        print(f"| {name} | {TOKENS / step_time(rules):,.0f} |", flush=True)


if __name__ == "__main__":
    main()
