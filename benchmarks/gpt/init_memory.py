"""Peak host memory of sharded ``init_params`` for ``gpt2-small`` on 8 fake CPU devices.

Run: ``.venv/bin/python benchmarks/gpt/init_memory.py`` (prints one line; the figure goes into
``benchmarks/gpt/RESULTS.md`` by hand). It measures the growth of this process's peak resident
memory (Linux ``VmHWM``) over its RSS just before init, as a multiple of the parameter bytes; the
target is <= 1.2x, i.e. no full host or single-device copy of the parameters ever exists. The
model's params are built by its blox modules and placed by ``paramspec.init_sharded``; the mesh is
``fsdp=8`` (every matrix's ``embed`` axis split over the 8 devices).

On CPU the devices' memory is host memory, so the parameters themselves count (1.0x); what is
above that is the init program's temporaries. ``--lean-scheduler`` adds the XLA flag that
docs/paramspec.md recommends for memory-lean init on CPU.
"""

from __future__ import annotations

import argparse
import os
import sys


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not found in /proc/self/status (Linux only)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="gpt2-small")
    parser.add_argument("--lean-scheduler", action="store_true")
    args = parser.parse_args()
    flags = ["--xla_force_host_platform_device_count=8"]
    if args.lean_scheduler:
        flags.append("--xla_cpu_enable_concurrency_optimized_scheduler=false")
    os.environ["XLA_FLAGS"] = " ".join(flags)
    os.environ["JAX_PLATFORMS"] = "cpu"

    import math
    import time

    import jax

    from gpt_models import PRESETS, RULES, MeshConfig, init_params, make_mesh, param_specs

    cfg = PRESETS[args.preset].model
    mesh = make_mesh(MeshConfig(data=1, fsdp=8, tensor=1))
    specs = param_specs(cfg)  # abstract only: nothing allocated
    n_bytes = sum(math.prod(p.shape) * p.dtype.itemsize for p in jax.tree.leaves(specs))
    # One tiny sharded jit first, so the compiler's one-time start-up is not counted as init's.
    from jax.sharding import NamedSharding, PartitionSpec

    out = NamedSharding(mesh, PartitionSpec("fsdp"))
    warm = jax.jit(lambda k: jax.random.normal(k, (64,)), out_shardings=out)
    jax.block_until_ready(warm(jax.random.key(0)))
    before = _status("VmRSS")
    start = time.perf_counter()
    params = jax.block_until_ready(init_params(cfg, jax.random.key(0), mesh, RULES))
    seconds = time.perf_counter() - start
    peak = _status("VmHWM") - before
    shard = params[("gpt", "model", "embed", "embedding")].value.addressable_shards[0].data.shape
    print(
        f"{args.preset}: {n_bytes / 1e6:.0f} MB of params, peak RSS growth {peak / 1e6:.0f} MB = "
        f"{peak / n_bytes:.2f}x param bytes, {seconds:.1f} s (lean scheduler: "
        f"{args.lean_scheduler}; embedding shard per device {shard})"
    )


if __name__ == "__main__":
    sys.exit(main())
