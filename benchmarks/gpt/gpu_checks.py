"""gpt2-small on one GPU: pre-flight estimate vs measured peak, and MFU of each attention core.

    python benchmarks/gpt/gpu_checks.py [--steps 30] --impls cudnn

Run one core per process (the device's peak counter is per process). For each core: ``plan_training`` (the ``gpt train --dry-run`` plan: step memory per device against
``memory_stats()``), then ``train`` in the same process; prints the plan's per-device estimate, the
device's ``peak_bytes_in_use`` after the run, their ratio, tokens/s and MFU. One line per core, for
``RESULTS-gpu.md``. Needs a GPU (it exits with a message elsewhere).
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile

import jax

from gpt_models import PRESETS, apply_overrides, plan_training, train


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--impls", default="blocked,xla,cudnn")
    p.add_argument("--set", action="append", default=[], help="KEY=VALUE config overrides")
    args = p.parse_args()
    if jax.default_backend() != "gpu":
        sys.exit(f"gpu_checks: JAX's default backend is {jax.default_backend()!r}, not a GPU")
    dev = jax.devices()[0]
    print(f"JAX {jax.__version__}, {jax.device_count()} x {dev.device_kind}", flush=True)
    for impl in args.impls.split(","):
        cfg = apply_overrides(  # --set values are text, parsed as on the command line
            PRESETS["gpt2-small"],
            {"model.attention": impl, "train.steps": str(args.steps), "train.eval_every": "1000",
             "train.checkpoint_every": "0", "train.warmup_steps": "5",
             **dict(kv.split("=", 1) for kv in args.set)},
            from_text=True,
        )  # fmt: skip
        plan = plan_training(cfg, stream=io.StringIO())
        est = plan.memory.per_device if plan.memory else float("nan")
        with tempfile.TemporaryDirectory() as tmp:
            res = train(cfg, f"{tmp}/run", stream=io.StringIO(), write_sample=False)
        peak = dev.memory_stats().get("peak_bytes_in_use", float("nan"))
        print(
            f"{impl}: estimate {est / 2**30:.2f} GiB, measured peak {peak / 2**30:.2f} GiB "
            f"(est/peak {est / peak:.2f}), "
            f"{res.tokens_per_s:,.0f} tok/s, MFU {100 * res.mfu:.1f}%, loss {res.loss:.3f}",
            flush=True,
        )
        del plan, res


if __name__ == "__main__":
    main()
