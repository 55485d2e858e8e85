"""The gpt train step of a small mixture of experts with and without its load-balancing loss.

4 forced CPU devices, data-parallel (``mesh.data = 4``): a 4-layer model, d_model 128, 8 SwiGLU
experts of width 256, top 2, sequences of 128 tokens, batch 16. Tokens/s are the median of 8
timed steps after 2 warm-up steps. ``model.router_aux_loss_coef = 0`` differentiates the
cross-entropy alone (the router statistics are still computed and logged);
``0.001`` adds the load-balancing term. Run it from an older checkout (without the key) for the
step from before the loss existed: the script then times the one step that checkout has.
``python benchmarks/moe/aux_loss.py``.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import dataclasses
import statistics
import time

import jax

import gpt_models as gm


def tokens_per_s(**changes: float) -> float:
    base = gm.PRESETS["llama-tiny"]
    shape = {"seq_len": 128, "d_model": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2}
    model = dataclasses.replace(base.model, d_ff=256, n_experts=8, experts_per_token=2,
                                **shape, **changes)  # fmt: skip
    train = dataclasses.replace(base.train, batch_size=16, warmup_steps=1)
    cfg = dataclasses.replace(base, model=model, train=train,
                              mesh=dataclasses.replace(base.mesh, data=4))  # fmt: skip
    mesh = gm.make_mesh(cfg.mesh, jax.devices())
    opt = gm.make_optimizer(cfg.train)
    step = gm.compile_train_step(cfg, opt, mesh, gm.abstract_state(cfg, opt, mesh))
    state = gm.init_state(cfg, opt, mesh)
    batch = jax.random.randint(jax.random.key(1), (1, 16, 129), 0, 256)
    times = []
    for _ in range(10):
        start = time.perf_counter()
        state, _ = step(state, batch)
        jax.block_until_ready(state)
        times.append(time.perf_counter() - start)
    return 16 * 128 / statistics.median(times[2:])


def main() -> None:
    print(f"devices: {jax.devices()}")
    print("| step | tokens/s |\n|---|---|")
    if "router_aux_loss_coef" not in {f.name for f in dataclasses.fields(gm.ModelConfig)}:
        print(f"| without the loss (before it existed) | {tokens_per_s():,.0f} |", flush=True)
        return
    for coef in (0.0, 0.001):
        rate = tokens_per_s(router_aux_loss_coef=coef)
        print(f"| router_aux_loss_coef = {coef:g} | {rate:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
