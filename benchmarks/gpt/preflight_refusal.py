"""Time to the pre-flight's refusal of ``gpt2-small`` on a CPU host, and where it goes.

Run: ``JAX_PLATFORMS=cpu .venv/bin/python benchmarks/gpt/preflight_refusal.py [--preset gpt2-small]``
(prints a few lines; the figures go into ``benchmarks/gpt/RESULTS.md`` by hand). In one process:

- ``plan``: ``plan_training`` (the config resolved, the train step compiled once);
- ``line``: the advice as ``preflight.advice`` computes it now (the smallest micro-batch compiled, a
  line through it and the plan predicts the candidate, which is compiled to check it);
- ``bisect``: the advice as commit b7ba245 computed it (bisection over the ``train.grad_accum``
  candidates, one compile per probe), the baseline; run second, so that any cache favours it.

Each advice reports its wall and CPU seconds and its number of compiles; both must name a setting
whose compiled step fits the same budget.
"""

from __future__ import annotations

import argparse
import io
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt2-small")
    args = parser.parse_args()
    from gpt_models import load_config, plan_training
    from gpt_models.internal import training_preflight as pf

    compiles: list[str] = []
    real = pf._needs

    def counted(cfg, optimizer, mesh):  # type: ignore[no-untyped-def]
        compiles.append(f"grad_accum={cfg.train.grad_accum} remat={cfg.model.remat}")
        return real(cfg, optimizer, mesh)

    pf._needs = counted
    wall, cpu = time.perf_counter(), time.process_time()
    plan = plan_training(load_config(args.preset), stream=io.StringIO())
    print(f"load {os.getloadavg()[0]:.2f}; plan: {time.perf_counter() - wall:.1f} s wall, "
          f"{time.process_time() - cpu:.1f} s CPU (compile {plan.compile_s:.1f} s); fits={plan.fits}")  # fmt: skip
    for name, search in (("line", pf._fewest_accum), ("bisect", _bisect)):
        pf._fewest_accum = search
        compiles.clear()
        wall, cpu = time.perf_counter(), time.process_time()
        said = pf.advice(plan, plan.budget.per_device)
        print(f"{name}: {time.perf_counter() - wall:.1f} s wall, {time.process_time() - cpu:.1f} s "
              f"CPU, {len(compiles)} compiles ({', '.join(compiles)}); load "
              f"{os.getloadavg()[0]:.2f}\n  {said}")  # fmt: skip


def _bisect(plan, budget, accums, remat, known):  # type: ignore[no-untyped-def]
    from gpt_models.internal import training_preflight as pf

    best = None
    lo, hi = 0, len(accums) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        need = known.get((accums[mid], remat))
        if need is None:
            need = pf._needs(pf._with(plan.cfg, accums[mid], remat), plan.optimizer, plan.mesh)
        if need is None:
            return None
        if need <= budget:
            best, hi = (accums[mid], need), mid - 1
        else:
            lo = mid + 1
    return best


if __name__ == "__main__":
    main()
