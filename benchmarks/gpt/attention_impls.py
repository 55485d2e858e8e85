"""Train-step time of each ``model.attention`` core, interleaved in one process (one device).

    python benchmarks/gpt/attention_impls.py tiny   # or ~10M; --rounds, --steps

Shapes as in ``profile_step.py`` (the peer architecture). ``cudnn`` runs only on a GPU (it is
skipped elsewhere). Each row: the median over rounds of the mean step time, and its ratio to
``blocked`` (the ``auto`` choice on CPU). Results go into ``RESULTS.md`` (CPU) or
``RESULTS-gpu.md`` by hand, with the device and the load at the time.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from profile_step import SHAPES, peer_config

from gpt_models import abstract_state, compile_train_step, init_state, make_mesh, make_optimizer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("shape", choices=list(SHAPES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    impls = ["blocked", "xla"] + (["cudnn"] if jax.default_backend() == "gpu" else [])
    base = peer_config(args.shape)
    if jax.default_backend() == "gpu":
        base = dataclasses.replace(base, model=dataclasses.replace(base.model, dtype="bfloat16"))
    mesh = make_mesh(base.mesh, jax.devices()[:1])
    _, _, _, T, B = SHAPES[args.shape]
    batch = jnp.asarray(np.random.default_rng(0).integers(0, 256, (1, B, T + 1)), jnp.int32)
    runs = {}
    for impl in impls:
        cfg = dataclasses.replace(base, model=dataclasses.replace(base.model, attention=impl))
        opt = make_optimizer(cfg.train)
        step = compile_train_step(cfg, opt, mesh, abstract_state(cfg, opt, mesh))
        state = init_state(cfg, opt, mesh)
        state, _ = step(state, batch)  # warm up
        jax.block_until_ready(state)
        runs[impl] = [step, state]
    times: dict[str, list[float]] = {impl: [] for impl in impls}
    for _ in range(args.rounds):
        for impl in impls:
            step, state = runs[impl]
            start = time.perf_counter()
            for _ in range(args.steps):
                state, logs = step(state, batch)
            jax.block_until_ready(state)
            times[impl].append((time.perf_counter() - start) / args.steps)
            runs[impl][1] = state
    ref = statistics.median(times["blocked"])
    print(f"{args.shape} on {jax.devices()[0].device_kind}, batch {B} x {T}:")
    for impl in impls:
        t = statistics.median(times[impl])
        print(f"  {impl:8s} {1e3 * t:8.1f} ms/step  {t / ref:5.2f}x blocked")


if __name__ == "__main__":
    main()
