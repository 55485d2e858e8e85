"""Time to the pre-flight's refusal of ``gpt2-small`` on a CPU host, and how close its estimate is.

Run: ``JAX_PLATFORMS=cpu .venv/bin/python benchmarks/gpt/preflight_refusal.py [--preset gpt2-small]``
(prints a few lines; the figures go into ``benchmarks/gpt/RESULTS.md`` by hand). In one process:

- ``plan``: ``plan_training`` (the config resolved, the train step compiled once);
- ``advice``: the ``train.grad_accum`` that fits the host, derived from that one compile as the
  refusal derives it (no compile);
- ``check``: what the refusal no longer does: the suggested setting and the next one with fewer
  micro-batches compiled and measured, against their estimates, and the part of the step's
  temporaries that does not grow with the micro-batch (the line through the measured points at
  zero rows) in units of the parameters' bytes, the ratio ``plans.FIXED_TEMPORARIES`` bounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt2-small")
    args = parser.parse_args()
    from gpt_models import load_config, plan_training

    cfg = load_config(args.preset)
    wall, cpu = time.perf_counter(), time.process_time()
    plan = plan_training(cfg, stream=io.StringIO())
    print(f"load {os.getloadavg()[0]:.2f}; plan: {time.perf_counter() - wall:.1f} s wall, "
          f"{time.process_time() - cpu:.1f} s CPU (compile {plan.compile_s:.1f} s); fits={plan.fits}")  # fmt: skip
    budget, knob = plan.budget.per_device, plan.knob
    wall = time.perf_counter()
    found = next((g for g in knob.values if (knob.need(g) or budget + 1) <= budget), None)
    print(
        f"advice: {time.perf_counter() - wall:.3f} s wall, 0 compiles: "
        f"{knob.setting(found) if found else 'nothing fits'} within {budget / 2**30:.1f} GiB"
    )
    if found is None:
        return
    values = list(knob.values)
    i = values.index(found)
    picked = [values[i - 1], found] if i > 0 else values[1:2]  # next to the plan's own point
    points = [(plan.cfg.train.batch_size // values[0], plan.memory.temporaries)]
    for g in picked:
        other = dataclasses.replace(
            plan.cfg, train=dataclasses.replace(plan.cfg.train, grad_accum=g)
        )
        measured = plan_training(other, stream=io.StringIO()).memory
        points.append((plan.cfg.train.batch_size // g, measured.temporaries))
        print(f"check: grad_accum={g} (micro-batch {points[-1][0]}): estimated "
              f"{knob.need(g) / 2**30:.2f} GiB, compiled and measured "
              f"{measured.per_device / 2**30:.2f} GiB")  # fmt: skip
    (r0, t0), (r1, t1) = sorted(points)[:2]  # the two smallest micro-batches: the line at 0 rows
    fixed = t0 - (t1 - t0) / (r1 - r0) * r0
    print(f"fixed temporaries: {fixed / 2**20:.1f} MiB = {fixed / plan.param_bytes:.2f} x the "
          f"parameters' {plan.param_bytes / 2**20:.1f} MiB")  # fmt: skip


if __name__ == "__main__":
    main()
