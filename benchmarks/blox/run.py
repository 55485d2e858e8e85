"""blox benchmarks: dispatch and pytree overhead of ``Params`` against a dict, init costs.

Run from the repository root: ``python benchmarks/blox/run.py``. Writes
``benchmarks/blox/RESULTS.md``. Every ratio compares two measurements taken in this process,
interleaved (A, B, A, B, ...) and summarised by the minimum over repetitions, so background load
on a shared machine inflates neither side alone.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp

import blox as bx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from provenance import provenance

RESULTS = Path(__file__).with_name("RESULTS.md")


def best_of(fns: dict[str, Callable[[], Any]], reps: int = 40, inner: int = 10) -> dict[str, float]:
    """Minimum seconds per call of each function, measured interleaved."""
    best = {name: float("inf") for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(inner):
                out = fn()
            jax.block_until_ready(out)
            best[name] = min(best[name], (time.perf_counter() - start) / inner)
    return best


def make_trees(n: int) -> tuple[dict[str, jax.Array], bx.Params]:
    arrays = [jnp.full((4,), float(i)) for i in range(n)]
    as_dict = {f"net/layer_{i}/kernel": a for i, a in enumerate(arrays)}
    as_params = bx.Params({("net", f"layer_{i}", "kernel"): a for i, a in enumerate(arrays)})
    return as_dict, as_params


def step(params: Any, x: jax.Array) -> tuple[jax.Array, Any]:
    # The training-step signature: (out, params) = f(params, x). The body is trivial on purpose:
    # what is measured is the cost of passing the container in and out of a jitted function.
    return x + 1.0, params


def dispatch(n: int) -> tuple[float, float]:
    as_dict, as_params = make_trees(n)
    f = jax.jit(step)
    x = jnp.ones(8)
    jax.block_until_ready((f(as_dict, x), f(as_params, x)))
    t = best_of({"dict": lambda: f(as_dict, x), "params": lambda: f(as_params, x)})
    return t["dict"], t["params"]


def flatten_unflatten(n: int) -> tuple[float, float]:
    as_dict, as_params = make_trees(n)

    def round_trip(tree: Any) -> Callable[[], Any]:
        def run() -> Any:
            leaves, treedef = jax.tree.flatten(tree)
            return jax.tree.unflatten(treedef, leaves)

        return run

    t = best_of({"dict": round_trip(as_dict), "params": round_trip(as_params)}, inner=20)
    return t["dict"], t["params"]


def eval_shape_mlp(layers: int = 100) -> float:
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mlp = bx.MLP(graph / "mlp", [64] * layers, rng=rng)

    def init() -> bx.Params:
        return mlp(rng.seed(bx.Params(), seed=0), jnp.ones((1, 64)))[1]

    start = time.perf_counter()
    abstract = jax.eval_shape(init)
    elapsed = time.perf_counter() - start
    assert len(abstract) == 2 * layers + 2
    return elapsed


def lstm_init_jaxpr_sizes() -> tuple[int, int]:
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    lstm = bx.LSTM(graph / "lstm", 32, rng=rng)

    def size(t: int) -> int:
        def init(x: jax.Array) -> bx.Params:
            return lstm.apply(rng.seed(bx.Params(), seed=0), x)[1]

        return len(jax.make_jaxpr(init)(jnp.ones((t, 16))).eqns)

    return size(10), size(1000)


NOTES = """
Why `Params` is faster than a dict here: a `Params` is one pytree node whose children are the
arrays themselves. Its static part (paths, each parameter's `trainable` flag and metadata, the
lock flag) is one aux object whose hash is computed once, so flatten hands JAX a tuple it already
holds and unflatten stores the tuple it gets back: one Python call each way, whatever the number
of parameters. JAX flattens a dict in C++ but sorts its keys every time, and rebuilds it key by
key. `Param` objects are made only when a parameter is read (`params[path]`, `params.items()`):
were each `Param` a pytree node of its own, JAX could rebuild them only through one Python
callback per parameter. paramspec reads the logical axes of every child from the `Params`
(`core_primitives.HasChildLogicalAxes`), and `params.map(fn)` maps over the values.
"""


def main() -> None:
    rows = []
    for n in (200, 2000):
        base, ours = dispatch(n)
        rows.append(
            (
                f"jitted `(out, params) = f(params, x)` dispatch, {n} arrays",
                f"{base * 1e6:.0f} µs (dict)",
                f"{ours * 1e6:.0f} µs",
                f"{ours / base:.2f}",
                "<= 1.2",
            )
        )
    for n in (200, 2000):
        base, ours = flatten_unflatten(n)
        rows.append(
            (
                f"`jax.tree.flatten` + `unflatten`, {n} arrays",
                f"{base * 1e6:.0f} µs (dict)",
                f"{ours * 1e6:.0f} µs",
                f"{ours / base:.2f}",
                "<= 2",
            )
        )
    eval_shape_mlp()  # warm JAX's own one-time caches, then report the best of three
    seconds = min(eval_shape_mlp() for _ in range(3))
    rows.append(
        ("`jax.eval_shape(init)`, 100-layer MLP (best of 3)", "", f"{seconds:.3f} s", "", "< 0.2 s")
    )
    short, long = lstm_init_jaxpr_sizes()
    rows.append(
        (
            "LSTM init jaxpr equations, T=10 vs T=1000",
            f"{short} (T=10)",
            f"{long} (T=1000)",
            f"{long / short:.2f}",
            "equal",
        )
    )
    header = "| measurement | baseline | blox | ratio | target |\n|---|---|---|---|---|\n"
    table = header + "".join(f"| {' | '.join(r)} |\n" for r in rows)
    text = (
        "# blox benchmarks\n\n"
        f"{provenance('python benchmarks/blox/run.py')} Written by that script; do not edit by "
        "hand.\n\n"
        "Times are the minimum over interleaved repetitions; ratios are blox / baseline from the "
        "same run. The baseline is a flat `dict` of the same arrays passed through the same "
        f"function.\n\n{table}{NOTES}"
    )
    RESULTS.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
