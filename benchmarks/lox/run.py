"""lox benchmarks: the cost of log sites, of spool/tap/strip at run time, and of the rewrite.

Run from the repository root: ``python benchmarks/lox/run.py [--quick]``. Writes
``benchmarks/lox/RESULTS.md``. Every ratio compares a lox measurement with a baseline taken in
the same process. Timed pairs are interleaved (baseline, candidate, baseline, ...), one ratio per
repetition, and the table shows the median ratio with its 25th-75th percentile spread, so load
from other jobs on a shared machine shows up as spread rather than as a biased ratio. Benchmarks
report; they never fail (the exit status is 0 whatever the numbers).
"""

from __future__ import annotations

import argparse
import difflib
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import jaxprs_in_params

import lox

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from provenance import provenance

RESULTS = Path(__file__).with_name("RESULTS.md")


@dataclass
class Row:
    name: str
    ratio: float | None  # None: not a timing (an equality check)
    spread: str
    target: str
    met: bool
    detail: str


# --- timing ------------------------------------------------------------------------------------


def interleaved_many(fns: list[Callable[[], Any]], reps: int, inner: int) -> list[list[float]]:
    """Seconds per call of each function, one sample each per repetition, in rotating order."""
    out: list[list[float]] = [[] for _ in fns]
    for r in range(reps):
        # Rotate which goes first so a load change mid-round does not always hit one side.
        for k in range(len(fns)):
            i = (k + r) % len(fns)
            start = time.perf_counter()
            for _ in range(inner):
                res = fns[i]()
            jax.block_until_ready(res)
            out[i].append((time.perf_counter() - start) / inner)
    return out


def interleaved(
    base: Callable[[], Any], cand: Callable[[], Any], reps: int, inner: int
) -> tuple[list[float], list[float]]:
    tb, tc = interleaved_many([base, cand], reps, inner)
    return tb, tc


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    q = np.percentile(xs, [25, 50, 75])
    return float(q[0]), float(q[1]), float(q[2])


def ratio_stats(tb: list[float], tc: list[float]) -> tuple[float, str]:
    """Median of per-repetition ratios cand/base, and its interquartile range as text."""
    lo, med, hi = quartiles([c / b for b, c in zip(tb, tc)])
    return med, f"{lo:.3f}-{hi:.3f}"


def us(t: float) -> str:
    return f"{t * 1e6:.1f} us" if t < 1e-3 else f"{t * 1e3:.2f} ms"


# --- 1, 2: spool on a long scan ----------------------------------------------------------------

N_STEPS = 10_000


def scan_logged(xs: jax.Array) -> jax.Array:
    # A training-loop shape: a carry updated each step and a few scalars logged with the step.
    def body(carry, x):
        i, c = carry
        c = 0.999 * c + x
        lox.log({"loss": c, "grad_norm": jnp.abs(x - c), "lr": 0.1 * x}, step=i)
        return (i + 1, c), None

    (_, c), _ = lax.scan(body, (jnp.int32(0), jnp.float32(0.0)), xs)
    return c


def scan_by_hand(xs: jax.Array) -> tuple[jax.Array, dict[str, Any]]:
    # The same values returned as scan outputs, each key with its step, as a user would without lox.
    def body(carry, x):
        i, c = carry
        c = 0.999 * c + x
        ys = {"loss": c, "grad_norm": jnp.abs(x - c), "lr": 0.1 * x}
        return (i + 1, c), (ys, i)

    (_, c), (ys, steps) = lax.scan(body, (jnp.int32(0), jnp.float32(0.0)), xs)
    return c, {k: (v, {"step": steps}) for k, v in ys.items()}


def bench_spool_vs_hand(reps: int) -> list[Row]:
    xs = jnp.linspace(0.0, 1.0, N_STEPS, dtype=jnp.float32)
    spooled = lox.spool(scan_logged)
    base, cand = jax.jit(scan_by_hand), jax.jit(spooled)
    # Diagnosis: the same spooled program returning flat leaves, so no logdict is rebuilt on the
    # host per call. If this matches the baseline, the gap is output unflattening, not XLA work.
    leaves = jax.jit(lambda xs: jax.tree.leaves(spooled(xs)))
    fns = [lambda: base(xs), lambda: cand(xs), lambda: leaves(xs)]
    jax.block_until_ready([fn() for fn in fns])  # compile all outside the timing
    tb, tc, tl = interleaved_many(fns, reps, inner=2)
    med, spread = ratio_stats(tb, tc)
    med_l, spread_l = ratio_stats(tb, tl)
    return [
        Row(
            f"1. `jit(spool(f))` vs values returned by hand ({N_STEPS // 1000}k-step scan, 3 keys)",
            med,
            spread,
            "<= 1.05",
            med <= 1.05,
            f"{us(statistics.median(tb))} by hand, {us(statistics.median(tc))} spool",
        ),
        Row(
            "1b. (diagnosis) the same, logdict flattened to leaves inside the jit",
            med_l,
            spread_l,
            "-",
            True,
            f"{us(statistics.median(tl))}: the XLA program alone; the gap to row 1 is rebuilding "
            f"the output logdict in Python ({us(unflatten_time(cand(xs)))} per call, below)",
        ),
    ]


def unflatten_time(tree: Any, n: int = 2000) -> float:
    """Seconds to rebuild ``tree`` from its leaves, as jit does for every call's outputs."""
    leaves, treedef = jax.tree.flatten(tree)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            jax.tree.unflatten(treedef, leaves)
        best = min(best, (time.perf_counter() - start) / n)
    return best


def bench_spool_no_outer_jit(reps: int) -> list[Row]:
    """``spool(f)`` as returned (itself jitted) against ``jit(spool(f))``, after warm-up."""
    rows = []
    small = jnp.linspace(0.0, 1.0, 10, dtype=jnp.float32)
    big = jnp.linspace(0.0, 1.0, N_STEPS, dtype=jnp.float32)
    # The long scan is the workload of benchmark 1; the 10-step scan makes dispatch dominate.
    for label, xs, inner in (
        (f"{N_STEPS // 1000}k-step scan", big, 2),
        ("10-step scan, dispatch-bound", small, 10),
    ):
        spooled = lox.spool(scan_logged)
        outer = jax.jit(lox.spool(scan_logged))
        jax.block_until_ready((spooled(xs), outer(xs)))
        tb, tc = interleaved(lambda o=outer, x=xs: o(x), lambda s=spooled, x=xs: s(x), reps, inner)
        med, spread = ratio_stats(tb, tc)
        rows.append(
            Row(
                f"2. `spool(f)` called directly vs `jit(spool(f))` ({label})",
                med,
                spread,
                "<= 1.5",
                med <= 1.5,
                f"{us(statistics.median(tb))} jit(spool), {us(statistics.median(tc))} spool",
            )
        )
    # Re-creating the transformation every call (``lox.spool(f)(x)`` in a loop) must hit the
    # cache rather than re-trace; reported against the same outer-jit baseline for information.
    outer = jax.jit(lox.spool(scan_logged))
    jax.block_until_ready((outer(small), lox.spool(scan_logged)(small)))
    tb, tc = interleaved(lambda: outer(small), lambda: lox.spool(scan_logged)(small), reps, 10)
    med, spread = ratio_stats(tb, tc)
    rows.append(
        Row(
            "2b. `lox.spool(f)(x)` re-created each call vs `jit(spool(f))` (10-step scan)",
            med,
            spread,
            "<= 1.5",
            med <= 1.5,
            f"{us(statistics.median(tb))} jit(spool), {us(statistics.median(tc))} re-created",
        )
    )
    return rows


# --- 3: dispatch of a jitted function that holds log sites ------------------------------------


def small_plain(x: jax.Array, y: jax.Array) -> jax.Array:
    h = jnp.tanh(x * y + 1.0)
    return h.sum() + x.mean()


def small_logged(x: jax.Array, y: jax.Array) -> jax.Array:
    # The same computation with sites on intermediates (a value used and one only logged).
    h = lox.log({"h": jnp.tanh(x * y + 1.0)}, step=3)["h"]
    lox.log({"mean": x.mean(), "norm": jnp.linalg.norm(h)}, tags="debug")
    return h.sum() + x.mean()


def bench_dispatch(reps: int) -> Row:
    x, y = jnp.ones(4), jnp.full(4, 0.5)
    base, cand = jax.jit(small_plain), jax.jit(small_logged)
    jax.block_until_ready((base(x, y), cand(x, y)))
    tb, tc = interleaved(lambda: base(x, y), lambda: cand(x, y), reps, inner=20)
    med, spread = ratio_stats(tb, tc)
    return Row(
        "3. jitted f with 3 log sites, untransformed, vs log-free f (per call, 4 floats)",
        med,
        spread,
        "<= 1.05",
        med <= 1.05,
        f"{us(statistics.median(tb))} log-free, {us(statistics.median(tc))} with sites",
    )


# --- 4: tap throughput -------------------------------------------------------------------------

N_TAP = 500


def bench_tap(reps: int) -> list[Row]:
    seen = [0]

    def count(*_: Any) -> None:
        seen[0] += 1

    def body_logged(c, x):
        c = c + x
        lox.log({"loss": c}, step=jnp.int32(0) + 1)
        return c, None

    def body_raw(c, x):
        # The same payload as the tapped site: one float value and one int step.
        c = c + x
        jax.debug.callback(count, {"loss": c}, jnp.int32(0) + 1)
        return c, None

    def body_build(c, x):
        # Diagnosis: the raw callback whose host also builds the one-event lox.logdict that tap
        # hands to its callback (value and step with their event axis, as tap sends them).
        def host(v, i):
            count(lox.logdict({"loss": v}, {"loss": {"step": i}}))

        c = c + x
        jax.debug.callback(host, c[None], (jnp.int32(0) + 1)[None])
        return c, None

    xs = jnp.ones(N_TAP, jnp.float32)
    scan = lambda body: jax.jit(lambda xs: lax.scan(body, 0.0, xs)[0])
    raw, build = scan(body_raw), scan(body_build)
    tapped = jax.jit(lox.tap(lambda xs: lax.scan(body_logged, 0.0, xs)[0], count))
    fns = [lambda: raw(xs), lambda: tapped(xs), lambda: build(xs)]
    jax.block_until_ready([fn() for fn in fns])
    seen[0] = 0
    tb, tc, td = interleaved_many(fns, reps, inner=1)
    calls_ok = seen[0] == 3 * reps * N_TAP
    # Rate ratio = time ratio inverted (same number of callbacks on every side).
    rate = lambda t: N_TAP / statistics.median(t)
    lo, med, hi = quartiles([b / c for b, c in zip(tb, tc)])
    lo_d, med_d, hi_d = quartiles([b / d for b, d in zip(tb, td)])
    return [
        Row(
            f"4. `lox.tap` callbacks/s vs raw `jax.debug.callback` ({N_TAP} per call)",
            med,
            f"{lo:.3f}-{hi:.3f}",
            ">= 0.9",
            med >= 0.9,
            f"{rate(tb):,.0f}/s raw, {rate(tc):,.0f}/s tap; every callback ran: {calls_ok}",
        ),
        Row(
            "4b. (diagnosis) raw callback that also builds one `lox.logdict` per event",
            med_d,
            f"{lo_d:.3f}-{hi_d:.3f}",
            "-",
            True,
            f"{rate(td):,.0f}/s; a checked one-event logdict costs "
            f"{us(logdict_build_time(xs[:1], jnp.ones(1, jnp.int32)))} outside a callback",
        ),
    ]


def logdict_build_time(value: jax.Array, step: jax.Array, n: int = 2000) -> float:
    """Seconds to build a one-event logdict, as tap does on the host for every executed site."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            lox.logdict({"loss": value}, {"loss": {"step": step}})
        best = min(best, (time.perf_counter() - start) / n)
    return best


# --- 5: strip leaves exactly the log-free program ---------------------------------------------


def primitive_sequence(jaxpr: Any) -> list[str]:
    """Primitive names in order, recursing into sub-jaxprs (scan/cond/jit bodies) in place."""
    names = []
    for eqn in jaxpr.eqns:
        names.append(eqn.primitive.name)
        for sub in jaxprs_in_params(eqn.params):
            names += ["{", *primitive_sequence(sub), "}"]
    return names


def no_site(data: dict[str, Any], **_: Any) -> dict[str, Any]:
    return data


def program(site: Callable[..., Any], with_cond: bool) -> Callable[[jax.Array], jax.Array]:
    """One program written once; ``site`` is ``lox.log`` or ``no_site`` (the log-free twin)."""

    def branch(v):
        return site({"v": v})["v"] + 1

    def body(c, _):
        c = site({"c": jnp.sin(c)}, step=1)["c"] * 2.0
        if with_cond:
            c = lax.cond(c.sum() > 0, branch, lambda v: v - 1, c)
        return c, None

    def f(x):
        site({"x": x})
        y = jax.jit(lambda v: site({"in_jit": v * 3})["in_jit"])(x)
        return lax.scan(body, y, None, length=4)[0]

    return f


def bench_strip(with_cond: bool) -> Row:
    x = jnp.ones(3)
    logged = program(lox.log, with_cond)
    stripped = jax.make_jaxpr(lox.strip(logged))(x).jaxpr
    plain = jax.make_jaxpr(program(no_site, with_cond))(x).jaxpr
    a, b = primitive_sequence(stripped), primitive_sequence(plain)
    n_eq = lambda seq: sum(t not in "{}" for t in seq)
    same_text = str(stripped) == str(plain)
    # Name what differs, so a miss says which equations strip adds or loses.
    diff = [d for d in difflib.ndiff(b, a) if d[:1] in "+-"]
    return Row(
        "5. `jaxpr(strip(f))` vs log-free f, recursively "
        + ("(scan + cond + inner jit)" if with_cond else "(scan + inner jit)"),
        None,
        "",
        "equal",
        a == b and same_text,
        f"primitive sequences equal: {'yes' if a == b else 'no'}; printed jaxprs equal: "
        f"{'yes' if same_text else 'no'}; equations {n_eq(a)} stripped, {n_eq(b)} log-free, "
        f"{n_eq(primitive_sequence(jax.make_jaxpr(logged)(x).jaxpr))} with sites"
        + (f"; strip adds/loses: {' '.join(diff)}" if diff else ""),
    )


# --- 6: rewrite time against make_jaxpr --------------------------------------------------------


def make_program(n_eqns: int) -> Callable[[jax.Array], jax.Array]:
    """A fresh function (new identity, so no cache hit) of about ``n_eqns`` equations.

    Every 10th equation is a log site and every 200th a small scan whose body logs, so the
    rewrite meets sites both at top level and inside a loop body.
    """

    def f(x):
        for i in range(n_eqns // 2):
            if i % 100 == 99:
                x = lax.scan(lambda c, _: (lox.log({"s": c})["s"] * 2.0, None), x, None, length=2)[
                    0
                ]
            elif i % 5 == 4:
                x = lox.log({f"k{i % 20}": x}, step=i)[f"k{i % 20}"]
            else:
                x = jnp.sin(x) * 1.0001
        return x

    return f


def time_once(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def rewrites(x: jax.Array) -> dict[str, Callable[[Callable], Any]]:
    # Each transformation traced to a jaxpr: tracing f, rewriting its jaxpr, tracing the result.
    # The spool/tap outputs are jitted with inline=True, so make_jaxpr inlines them.
    return {
        "make_jaxpr": lambda f: jax.make_jaxpr(f)(x),
        "spool": lambda f: jax.make_jaxpr(lox.spool(f))(x),
        "tap": lambda f: jax.make_jaxpr(lox.tap(f, lambda _: None))(x),
        "strip": lambda f: jax.make_jaxpr(lox.strip(f))(x),
    }


def bench_rewrite(sizes: tuple[int, ...], reps: int) -> tuple[list[Row], list[str]]:
    x = jnp.ones(8)
    kinds = rewrites(x)
    table = []
    # Per kind and size: best seconds per equation (the least-disturbed run: absolute times on
    # a shared machine drift with load between sizes) and the median ratio to make_jaxpr.
    per_eqn: dict[str, list[float]] = {k: [] for k in kinds}
    vs_trace: dict[str, list[tuple[float, str]]] = {k: [] for k in kinds}
    for n in sizes:
        n_eqns = len(jax.make_jaxpr(make_program(n))(x).eqns)
        times: dict[str, list[float]] = {k: [] for k in kinds}
        for _ in range(reps if n < 100_000 else 1):
            for kind, run in kinds.items():  # interleaved; a fresh f each time defeats caches
                times[kind].append(time_once(lambda run=run, n=n: run(make_program(n))))
        cells = [f"{n_eqns}"]
        for kind, ts in times.items():
            per_eqn[kind].append(min(ts) / n_eqns)
            vs_trace[kind].append(ratio_stats(times["make_jaxpr"], ts))
            med, spread = vs_trace[kind][-1]
            ratio = "" if kind == "make_jaxpr" else f" ({med:.2f}x, {spread})"
            cells.append(f"{statistics.median(ts):.3f}{ratio}")
        table.append("| " + " | ".join(cells) + " |")
        print(f"  rewrite {n_eqns} eqns: " + " | ".join(cells[1:]), flush=True)
    return [rewrite_row(kind, sizes, per_eqn[kind], vs_trace[kind]) for kind in kinds], table


def rewrite_row(
    kind: str, sizes: tuple[int, ...], per_eqn: list[float], vs_trace: list[tuple[float, str]]
) -> Row:
    growth = max(per_eqn) / min(per_eqn)
    label = f"{sizes[0] // 1000}k-{sizes[-1] // 1000}k eqns"
    detail = (
        " / ".join(f"{t * 1e6:.0f}" for t in per_eqn)
        + f" us/eqn (best), largest/smallest {growth:.2f}"
    )
    if kind == "make_jaxpr":  # the reference: tracing itself, for the growth to compare with
        return Row(
            f"6. (reference) `make_jaxpr` time per equation, {label}", None, "", "-", True, detail
        )
    med, spread = vs_trace[-1]
    ratios = " / ".join(f"{m:.2f}" for m, _ in vs_trace)
    # Linear means: the rewrite grows like tracing itself. make_jaxpr's own time per equation
    # drifts with size on this machine (see the reference row), so compare the ratio to it
    # between the two largest sizes; the smallest is dominated by fixed per-call costs.
    growth_vs_trace = vs_trace[-1][0] / vs_trace[-2][0]
    return Row(
        f"6. `{kind}` trace+rewrite vs `make_jaxpr` at {sizes[-1] // 1000}k eqns ({label})",
        med,
        spread,
        "linear: ratio to make_jaxpr grows <= 1.25x from the 2nd-largest to the largest size",
        growth_vs_trace <= 1.25,
        f"x make_jaxpr {ratios} (growth {growth_vs_trace:.2f}); {detail}",
    )


# --- report ------------------------------------------------------------------------------------


def load_average() -> str:
    try:
        return " / ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:
        return "unknown"


def header(quick: bool) -> list[str]:
    return [
        "# lox benchmarks",
        "",
        provenance("python benchmarks/lox/run.py" + (" --quick" if quick else ""))
        + " Written by that script; do not edit by hand (the analysis at the end is NOTES.md).",
        "",
        # Other jobs may share the cores: the load says how much to trust the spreads.
        f"Load average (1/5/15 min) when the report was written: {load_average()}.",
        "",
        "Each ratio is lox / baseline, both measured in this run, interleaved; the value is the "
        "median of per-repetition ratios and the spread its 25th-75th percentiles.",
        "",
        "| benchmark | ratio | spread (IQR) | target | met | detail |",
        "|---|---:|---:|---|---|---|",
    ]


def row_line(r: Row) -> str:
    ratio = "" if r.ratio is None else f"{r.ratio:.3f}"
    met = "yes" if r.met else "no"
    return f"| {r.name} | {ratio} | {r.spread} | {r.target} | {met} | {r.detail} |"


def run_all(quick: bool) -> tuple[list[Row], list[str]]:
    # Many short samples rather than few long ones: a pair taken microseconds apart sees the
    # same load, and the median of many per-pair ratios shrugs off pairs that a spike split.
    reps = 200 if quick else 1500
    sizes = (1_000, 10_000) if quick else (1_000, 10_000, 100_000)
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("spool vs by hand", lambda: bench_spool_vs_hand(reps)),
        ("spool without outer jit", lambda: bench_spool_no_outer_jit(reps)),
        ("dispatch with sites", lambda: [bench_dispatch(reps)]),
        ("tap throughput", lambda: bench_tap(reps // 20)),  # 50 ms a call
        ("strip", lambda: [bench_strip(False), bench_strip(True)]),
    ]
    rows: list[Row] = []
    for label, step in steps:
        print(f"{label} ...", flush=True)
        try:
            new = step()
        except Exception:  # a benchmark reports a failure; it never stops the others
            traceback.print_exc()
            new = [Row(label, None, "", "", False, "raised; see the run's output")]
        rows += new
        for r in new:
            print("  " + row_line(r), flush=True)
    print("rewrite time ...", flush=True)
    try:
        more, table = bench_rewrite(sizes, 2 if quick else 5)
        rows += more
    except Exception:
        traceback.print_exc()
        rows.append(Row("6. rewrite", None, "", "", False, "raised; see the run's output"))
        table = []
    return rows, table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats, sizes up to 10k")
    args = parser.parse_args()
    rows, table = run_all(args.quick)
    lines = header(args.quick) + [row_line(r) for r in rows]
    lines += [
        "",
        "## Rewrite time (benchmark 6)",
        "",
        "Seconds to trace to a jaxpr: `make_jaxpr(f)` against `make_jaxpr(t(f))` for each "
        "transformation `t` (which traces `f`, rewrites its jaxpr and traces the result); "
        "median of repeats (1 at 100k), ratio to make_jaxpr in brackets with its IQR.",
        "",
        "| equations | make_jaxpr (s) | spool (s) | tap (s) | strip (s) |",
        "|---:|---:|---:|---:|---:|",
        *table,
    ]
    notes = Path(__file__).with_name("NOTES.md")
    if notes.exists():  # hand-written analysis kept next to the generated numbers
        lines += ["", notes.read_text().rstrip()]
    RESULTS.write_text("\n".join(lines) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    try:
        main()
    except Exception:  # report, never fail: the bench session runs every benchmark in turn
        traceback.print_exc()
    sys.exit(0)
