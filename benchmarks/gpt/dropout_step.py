"""Train-step time with ``model.dropout`` 0 and 0.1 (and other rates), interleaved in one process.

    python benchmarks/gpt/dropout_step.py            # the tiny preset; --rounds, --steps, --rates

Each round runs ``--steps`` steps of every rate in turn; a row is the median over rounds of the
mean step time and its ratio to rate 0 (the step without dropout). The load average at the start
and the end is printed with the table: other jobs share the machine, so read the ratio. Results go
into ``RESULTS.md`` (CPU) or ``RESULTS-gpu.md`` by hand.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from gpt_models import (
    PRESETS,
    abstract_state,
    compile_train_step,
    init_state,
    make_mesh,
    make_optimizer,
)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="tiny", choices=list(PRESETS))
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--rates", default="0,0.1")
    args = p.parse_args()
    rates = [float(r) for r in args.rates.split(",")]
    base = PRESETS[args.preset]
    mesh = make_mesh(dataclasses.replace(base.mesh, data=1), jax.devices()[:1])
    t = base.train
    shape = (t.grad_accum, t.batch_size // t.grad_accum, base.model.seq_len + 1)
    batch = jnp.asarray(np.random.default_rng(0).integers(0, 256, shape), jnp.int32)
    load_start = os.getloadavg()
    runs = {}
    for rate in rates:
        cfg = dataclasses.replace(
            base,
            model=dataclasses.replace(base.model, dropout=rate),
            mesh=dataclasses.replace(base.mesh, data=1),
        )
        opt = make_optimizer(cfg.train)
        step = compile_train_step(cfg, opt, mesh, abstract_state(cfg, opt, mesh))
        state, _ = step(init_state(cfg, opt, mesh), batch)  # compile and warm up
        jax.block_until_ready(state)
        runs[rate] = [step, state]
    times: dict[float, list[float]] = {rate: [] for rate in rates}
    for _ in range(args.rounds):
        for rate in rates:
            step, state = runs[rate]
            start = time.perf_counter()
            for _ in range(args.steps):
                state, _ = step(state, batch)
            jax.block_until_ready(state)
            times[rate].append((time.perf_counter() - start) / args.steps)
            runs[rate][1] = state
    ref = statistics.median(times[rates[0]])
    load_end = os.getloadavg()
    print(
        f"{args.preset} on {jax.devices()[0].device_kind}, batch {shape}, {args.rounds} rounds x "
        f"{args.steps} steps; load average {load_start[0]:.1f} at the start, "
        f"{load_end[0]:.1f} / {load_end[1]:.1f} / {load_end[2]:.1f} at the end"
    )
    print("| model.dropout | ms/step (median) | min-max over rounds | ratio to the first |")
    print("|---|---|---|---|")
    for rate in rates:
        med = statistics.median(times[rate])
        lo, hi = min(times[rate]), max(times[rate])
        print(f"| {rate:g} | {1e3 * med:.1f} | {1e3 * lo:.1f}-{1e3 * hi:.1f} | {med / ref:.3f} |")


if __name__ == "__main__":
    main()
