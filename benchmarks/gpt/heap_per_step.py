"""RSS, malloc heap and CPU time of each train step under three host-allocator settings.

One process per setting, the peer architecture at a ``cli_peer.SHAPES`` shape, a fixed batch:

    JAX_PLATFORMS=cpu python benchmarks/gpt/heap_per_step.py tuned tiny 12
    JAX_PLATFORMS=cpu MALLOC_ARENA_MAX=8 python benchmarks/gpt/heap_per_step.py untuned tiny 12
    JAX_PLATFORMS=cpu GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python benchmarks/gpt/heap_per_step.py thp tiny 12

Per step: wall and CPU seconds (user, system: load-independent enough on a shared machine), minor
page faults, RSS, and glibc's ``mallinfo2`` (heap size, free bytes in it, bytes in mmapped
blocks). ``tuned`` is what ``gpt train`` does (``tune_host_allocator`` first, ``keep_host_memory``
after the first step); the MALLOC_/GLIBC_ variables turn that off, as documented.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import time
from typing import ClassVar

import gpt_models

gpt_models.tune_host_allocator()  # before JAX starts; a no-op under MALLOC_*/GLIBC_TUNABLES

import dataclasses  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_peer import SHAPES  # noqa: E402


class MallInfo2(ctypes.Structure):
    _fields_: ClassVar[list[tuple[str, type]]] = [
        (name, ctypes.c_size_t)
        for name in [
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        ]
    ]


def rss_mb() -> int:
    with open("/proc/self/status") as f:
        return int(next(x for x in f if x.startswith("VmRSS")).split()[1]) // 1024


def main(label: str, shape: str, steps: int) -> None:
    d, n_layers, heads, ctx, batch, _, _ = SHAPES[shape]
    base = gpt_models.PRESETS["tiny"]
    model = dataclasses.replace(
        base.model, d_model=d, n_layers=n_layers, n_heads=heads, seq_len=ctx, mlp="gelu",
        norm="layernorm", pos="learned", qk_norm=False, bias=True,
    )  # fmt: skip
    cfg = dataclasses.replace(
        base, model=model, train=dataclasses.replace(base.train, batch_size=batch),
        mesh=gpt_models.MeshConfig(1, 1, 1),
    )  # fmt: skip
    mesh = gpt_models.make_mesh(cfg.mesh, jax.devices()[:1])
    opt = gpt_models.make_optimizer(cfg.train)
    step_fn = gpt_models.compile_train_step(
        cfg, opt, mesh, gpt_models.abstract_state(cfg, opt, mesh)
    )
    state = gpt_models.init_state(cfg, opt, mesh)
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    data = np.random.default_rng(0).integers(0, 256, size=(1, batch, ctx + 1), dtype=np.int32)
    for i in range(steps):
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        state, logs = step_fn(state, data)
        float(logs["loss"][-1])
        wall = time.perf_counter() - t0
        if i == 0:
            gpt_models.keep_host_memory()  # as gpt train: once the step is compiled
        r1, mi = resource.getrusage(resource.RUSAGE_SELF), libc.mallinfo2()
        print(
            f"{label} {shape} step {i}: wall {wall:.2f}s user {r1.ru_utime - r0.ru_utime:.2f}s "
            f"sys {r1.ru_stime - r0.ru_stime:.2f}s faults {r1.ru_minflt - r0.ru_minflt} "
            f"rss {rss_mb()} MB heap {mi.arena >> 20} MB (free {mi.fordblks >> 20}) "
            f"mmapped {mi.hblkhd >> 20} MB",
            flush=True,
        )
    print(
        f"{label} {shape} peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024} MB"
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
