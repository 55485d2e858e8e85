"""The matmuls of a GPT train step one at a time: XLA:CPU (this JAX) against PyTorch, same host.

    python benchmarks/gpt/kernel_rates.py --torch-python /path/to/python-with-torch

The target is PyTorch's tokens/s for ``gpt train`` on CPU. The loop around the step is 0-1% of its
time (``RESULTS.md``), so what is left is the kernels. This measures each product a train step of
the peer shapes runs, in the three forms autodiff makes of a dense layer and the batched forms of
the attention core, alternating JAX and PyTorch (``--rounds`` times, median of ``--repeats`` calls
each), both on 2 threads, and says which XLA:CPU kernel ran each product (``ynn``: the YNNPACK
library; ``eigen``: XLA's Eigen fallback), read from the compiled HLO.

Forms (``x``: activations ``(M, K)``, ``w``: weight ``(K, N)``, ``dy``: output gradient ``(M, N)``):
``NN`` ``x @ w`` (forward), ``NT`` ``dy @ w.T`` (input gradient), ``TN`` ``x.T @ dy`` (weight
gradient; contracts the rows of both). Attention (``(batch * heads)`` batched, ``q, k, v, do``:
``(T, hd)``, ``p``: ``(T, S)``): ``qk`` ``q @ k.T``, ``pv`` ``p @ v``, ``pTdo`` ``p.T @ do`` (the
gradients of ``k`` and ``v``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (name, M, K, N): the dense products of the two peer shapes (tokens per step = batch * context).
DENSE = [
    ("tiny qkv", 4096, 128, 384),
    ("tiny mlp in", 4096, 128, 512),
    ("tiny mlp out", 4096, 512, 128),
    ("~10M qkv", 4096, 384, 1152),
    ("~10M mlp in", 4096, 384, 1536),
    ("~10M mlp out", 4096, 1536, 384),
]
# (name, batch * heads, T, S, hd): one 64-row causal block over all its keys (RESULTS.md's core).
ATTENTION = [("tiny", 128, 64, 128, 32), ("~10M", 96, 64, 256, 64)]


def _median_seconds(call, repeats: int) -> float:
    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _NN(a, b, swap):
    return a @ b


def _NT(a, b, swap):
    return a @ swap(b)


def _TN(a, b, swap):
    return swap(a) @ b


def _cases():
    """Yield (label, flops, operand shapes, product ``(a, b, swap_last_two_axes)``) for each."""
    for name, m, k, n in DENSE:
        flops = 2 * m * k * n
        yield f"{name} NN", flops, [(m, k), (k, n)], _NN
        yield f"{name} NT", flops, [(m, n), (k, n)], _NT
        yield f"{name} TN", flops, [(m, k), (m, n)], _TN
    for name, b, t, s, d in ATTENTION:
        flops = 2 * b * t * s * d
        yield f"{name} attn qk", flops, [(b, t, d), (b, s, d)], _NT
        yield f"{name} attn pv", flops, [(b, t, s), (b, s, d)], _NN
        yield f"{name} attn pTdo", flops, [(b, t, s), (b, t, d)], _TN


def measure_torch(repeats: int) -> dict[str, float]:
    import torch

    torch.set_num_threads(2)
    out = {}

    def swap(x):
        return x.transpose(-1, -2)

    for label, _, shapes, product in _cases():
        a, b = (torch.randn(*shape) for shape in shapes)
        out[label] = _median_seconds(lambda f=product, a=a, b=b: f(a, b, swap), repeats)
    return out


def measure_jax(repeats: int) -> tuple[dict[str, float], dict[str, str]]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    rng = np.random.default_rng(0)
    times, kernels = {}, {}

    def swap(x):
        return jnp.swapaxes(x, -1, -2)

    for label, _, shapes, product in _cases():
        a, b = (jnp.asarray(rng.standard_normal(shape, dtype=np.float32)) for shape in shapes)
        compiled = jax.jit(lambda a, b, f=product: f(a, b, swap)).lower(a, b).compile()
        hlo = compiled.as_text()
        kernels[label] = "ynn" if "ynn_fusion" in hlo else "eigen"
        times[label] = _median_seconds(
            lambda c=compiled, a=a, b=b: c(a, b).block_until_ready(), repeats
        )
    return times, kernels


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--torch-python", default=os.environ.get("TORCH_PYTHON", ""))
    p.add_argument("--rounds", type=int, default=3, help="JAX, PyTorch alternations")
    p.add_argument("--repeats", type=int, default=30, help="calls per product per round")
    p.add_argument("--out", help="write the raw medians as JSON here")
    p.add_argument("--backend", choices=["torch"], help=argparse.SUPPRESS)  # the child run
    args = p.parse_args()
    if args.backend == "torch":
        print(json.dumps(measure_torch(args.repeats)))
        return
    if not args.torch_python:
        sys.exit(
            "kernel_rates: give --torch-python (a Python with torch installed) or TORCH_PYTHON"
        )
    jax_runs, torch_runs, kernels = [], [], {}
    for _ in range(args.rounds):
        times, kernels = measure_jax(args.repeats)
        jax_runs.append(times)
        child = [args.torch_python, __file__, "--backend", "torch", "--repeats", str(args.repeats)]
        torch_runs.append(
            json.loads(
                subprocess.run(child, capture_output=True, check=True, text=True)
                .stdout.strip()
                .splitlines()[-1]
            )
        )
    import jax

    print(
        f"JAX {jax.__version__} (XLA:CPU) against PyTorch, 2 threads, medians of {args.rounds} "
        f"rounds x {args.repeats} calls"
    )
    print(
        "| product | XLA kernel | JAX ms | PyTorch ms | JAX GFLOP/s | PyTorch GFLOP/s | PyTorch/JAX time |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    rows = {}
    for label, flops, _, _ in _cases():
        j = statistics.median(run[label] for run in jax_runs)
        t = statistics.median(run[label] for run in torch_runs)
        rows[label] = {"jax_s": j, "torch_s": t, "kernel": kernels[label], "flops": flops}
        print(
            f"| {label} | {kernels[label]} | {j * 1e3:.2f} | {t * 1e3:.2f} | {flops / j / 1e9:.0f} "
            f"| {flops / t / 1e9:.0f} | {t / j:.2f} |"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"jax": jax.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
