"""Per-kernel time of one CPU train step, from a JAX profiler trace (what PROFILE.md's tables read).

    python benchmarks/gpt/trace_step.py tiny      # or ~10M; --steps, --top, --keep DIR

Compiles our train step on the peer architecture (pre-LayerNorm, GELU MLP, learned positions,
tied embeddings, AdamW; ``peer.py``'s shapes), runs a few warm-up steps, then traces ``--steps``
steps with ``jax.profiler.trace`` and sums the XLA:CPU thunk events by kernel name. It prints the
slowest kernels, each with its output shape and the JAX operation it came from (read from the
optimised HLO), and the totals per kernel kind (``ynn_fusion``: matmuls run by the XNNPACK/YNNPACK
library; ``*copy*``/``transpose*``: layout copies; ``dot``: Eigen matmuls; the rest are XLA's
elementwise and reduction loops).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import re
import tempfile

import jax
import numpy as np
from profile_step import SHAPES, peer_config

from gpt_models import (
    abstract_state,
    compile_train_step,
    init_state,
    keep_host_memory,
    make_mesh,
    make_optimizer,
    tune_host_allocator,
)

_HOST = ("ThunkExecutor", "$", "SlinkyThreadPool", "PjitFunction", "CommonPjRt")


def _kernel_info(hlo_text: str) -> dict[str, tuple[str, str]]:
    """Kernel name -> (output shape, the JAX op it came from), from the optimised HLO."""
    info = {}
    pattern = r"^\s*(?:ROOT )?%(\S+) = (\S+) \w+\(.*?op_name=\"([^\"]*)\""
    for m in re.finditer(pattern, hlo_text, re.M):
        info[m.group(1)] = (m.group(2), m.group(3).removeprefix("jit(step)/"))
    return info


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("shape", choices=list(SHAPES))
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--keep", default=None, help="folder for the trace (default: a temp folder)")
    args = p.parse_args()
    tune_host_allocator()  # as `gpt train` on CPU: before JAX starts, then keep after warm-up
    cfg = peer_config(args.shape)
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    step = compile_train_step(cfg, opt, mesh, abstract_state(cfg, opt, mesh))
    state = init_state(cfg, opt, mesh)
    B, T = cfg.train.batch_size, cfg.model.seq_len
    batch = np.random.default_rng(0).integers(0, 256, (1, B, T + 1)).astype(np.int32)
    for _ in range(3):
        state, logs = step(state, batch)
    jax.block_until_ready(logs)
    keep_host_memory()
    for _ in range(3):  # the kept heap settles
        state, logs = step(state, batch)
    jax.block_until_ready(logs)
    folder = args.keep or tempfile.mkdtemp(prefix="gpt-trace-")
    with jax.profiler.trace(folder, create_perfetto_trace=True):
        for _ in range(args.steps):
            state, logs = step(state, batch)
        jax.block_until_ready(logs)
    (path,) = glob.glob(f"{folder}/**/*.trace.json.gz", recursive=True)
    with gzip.open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    per_kernel: collections.Counter[str] = collections.Counter()
    for e in events:
        if not e["name"].startswith(_HOST):
            per_kernel[e["name"]] += e["dur"] / 1e3 / args.steps  # ms per step
    # The same program, compiled again only to read its kernel names (jit caches the executable
    # it runs, not the HLO text).
    info = _kernel_info(step.lower(state, batch).compile().as_text())
    total = sum(per_kernel.values())
    print(f"{args.shape}: {total:.1f} ms of kernels per step ({B * T} tokens)")
    print(f"{'ms/step':>8} {'share':>6}  kernel, output, from")
    for name, ms in per_kernel.most_common(args.top):
        shape, op = info.get(name, ("", ""))
        print(f"{ms:8.2f} {ms / total:6.1%}  {name}  {shape}  {op[:70]}")
    kinds: collections.Counter[str] = collections.Counter()
    for name, ms in per_kernel.items():
        kinds[re.sub(r"\.\d+$", "", name)] += ms
    print("\nper kind:")
    for kind, ms in kinds.most_common(12):
        print(f"{ms:8.2f} {ms / total:6.1%}  {kind}")


if __name__ == "__main__":
    main()
