"""Identity-rewrite time of the core interpreter against `jax.make_jaxpr` time.

Generated functions of N equations (a chain of elementwise ops, with a scan every 100 ops so the
recursion is exercised); both timings in the same process, best of 3. Run from the repository
root: ``python benchmarks/core/run.py``; writes ``benchmarks/core/RESULTS.md``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from jax import lax

from core_primitives import Interpreter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from provenance import provenance


def make_fn(n_eqns: int):
    def f(x):
        for i in range(n_eqns // 2):
            x = (
                jnp.sin(x) * 1.0001
                if i % 50
                else lax.scan(lambda c, _: (c * 2.0, None), x, None, length=2)[0]
            )
        return x

    return f


def best(fn, reps: int = 3) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    x = jnp.ones(8)
    rows = []
    for n in (1_000, 10_000, 100_000):
        f = make_fn(n)
        closed = jax.make_jaxpr(f)(x)
        n_eqns = len(closed.eqns)
        t_trace = best(lambda n=n: jax.make_jaxpr(make_fn(n))(x), reps=3 if n < 100_000 else 1)
        interp = Interpreter()
        t_rewrite = best(
            lambda i=interp, c=closed: jax.make_jaxpr(lambda v: i.eval_jaxpr(c, [v])[0])(x),
            reps=3 if n < 100_000 else 1,
        )
        rows.append((n_eqns, t_trace, t_rewrite))
        print(
            f"{n_eqns:>7} eqns: make_jaxpr {t_trace:.3f}s rewrite {t_rewrite:.3f}s ratio {t_rewrite / t_trace:.2f}"
        )
    lines = [
        "# core-primitives: identity rewrite vs make_jaxpr",
        "",
        provenance("python benchmarks/core/run.py"),
        "",
        "Best of 3 (1 at 100k). Rewrite = tracing the interpreter's evaluation of the jaxpr into a "
        "new jaxpr (what spool/tap/strip do).",
        "",
        "| equations | make_jaxpr (s) | rewrite (s) | rewrite / make_jaxpr | rewrite us/eqn |",
        "|---:|---:|---:|---:|---:|",
    ]
    for n, a, b in rows:
        lines.append(f"| {n} | {a:.3f} | {b:.3f} | {b / a:.2f} | {1e6 * b / n:.1f} |")
    Path(__file__).with_name("RESULTS.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
