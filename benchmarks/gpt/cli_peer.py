"""`gpt train` itself side by side with the PyTorch peer: tokens/s, peak RSS, RSS over time, loop split.

``peer.py`` times our bare train step in the peers' harness; this times what a user runs: the
``gpt train`` command (its data pipeline, metrics, progress, checkpoints, final eval and sample),
alternating with ``../shared/peer_bench/torch_gpt.py`` on the same shapes (torch, gpt, torch, gpt..).

* tokens/s: torch's own (steps after the first five, evaluation excluded); ``gpt train``'s own, the
  ``tokens_per_s`` of its metrics at the last log before the final step (the wall clock since the
  first step finished compiling: every step's data fetch, logging, progress and metric writes
  included; the final evaluation and checkpoint excluded, as torch excludes its evaluation).
* peak RSS: the kernel's high-water mark of the process (``wait4``'s ``ru_maxrss``); RSS over time
  sampled from ``/proc/PID/status`` every 0.1 s.
* loop split: the ``compute / data / log`` shares printed by ``gpt train``'s progress line (the
  loop's own timers, ``_training/loop.py``): "data" and "log" are the time between steps.

The architecture matches the peer: ``model.mlp=gelu model.norm=layernorm model.pos=learned`` plus
``model.bias=true model.qk_norm=false`` and AdamW's ``beta2=0.99``, ``lr=1e-3``, ``warmup=20``.
Data differ (the peer trains on pydoc topics, ``gpt train`` on its embedded corpus; both
byte-level, 256 ids), which does not change the time of a step.

    python benchmarks/gpt/cli_peer.py --pairs 2 --out benchmarks/gpt/cli_peer.json \\
        --plot benchmarks/gpt/cli_peer_rss.png

Several ``gpt train`` environments alternate in each pair with ``--gpt LABEL=PYTHON`` (repeated),
e.g. JAX 0.10.2 (Python 3.11, ``.venv``) beside JAX 0.12 (Python 3.13, made with
``UV_PROJECT_ENVIRONMENT=.venv313 uv sync --locked --all-packages -p 3.13``):

    python benchmarks/gpt/cli_peer.py --pairs 5 --shapes tiny \\
        --gpt "jax 0.10.2=.venv/bin/python" --gpt "jax 0.12=.venv313/bin/python"

The machine is shared: read the per-pair ratios and the load average printed with each row.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
PEER_DIR = ROOT / ".." / "shared" / "peer_bench"
# name -> (d_model, n_layer, n_head, ctx, batch, torch seconds, gpt train steps): the peer's
# shapes (peer.SHAPES); the step counts give gpt train about as many timed steps as torch gets in
# its seconds.
SHAPES = {
    "tiny": (128, 4, 4, 128, 32, 30.0, 120),
    "~10M": (384, 6, 6, 256, 16, 60.0, 40),
}
SPLIT = re.compile(r"compute (\d+)% data (\d+)% log (\d+)%")


def measure(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> dict:
    """Run ``cmd``; its output, peak RSS (bytes) and RSS over time ``[(seconds, bytes), ...]``."""
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=cwd)
        series: list[tuple[float, int]] = []
        done = threading.Event()

        def sample() -> None:
            status = Path(f"/proc/{proc.pid}/status")
            while not done.is_set():
                try:
                    line = next(x for x in status.read_text().splitlines() if x.startswith("VmRSS"))
                    series.append((time.perf_counter() - started, int(line.split()[1]) * 1024))
                except (OSError, StopIteration, ValueError):
                    pass
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        done.set()
        sampler.join()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed (exit {proc.returncode}): {stderr[-2000:]}")
    return {
        "stdout": stdout,
        "stderr": stderr,
        "peak_rss": usage.ru_maxrss * 1024,
        "minor_faults": usage.ru_minflt,
        "cpu_s": {"user": usage.ru_utime, "system": usage.ru_stime},
        "rss": series,
        "wall_s": time.perf_counter() - started,
    }


def run_torch(shape: str, torch_python: str) -> dict:
    d, L, H, T, B, seconds, _ = SHAPES[shape]
    cmd = [torch_python, str(PEER_DIR / "torch_gpt.py"), "--d-model", str(d), "--n-layer", str(L),
           "--n-head", str(H), "--ctx", str(T), "--batch", str(B), "--threads", "2",
           "--seconds", str(seconds), "--eval-batches", "2"]  # fmt: skip
    got = measure(cmd, dict(os.environ))
    info = json.loads(next(x for x in got["stdout"].splitlines() if x.startswith("RESULT "))[7:])
    tps = info["tokens_per_s"]  # NaN when a loaded machine let it make no more than 5 steps:
    tps = tps if tps == tps else info["tokens"] / info["train_s"]  # then over all its steps
    return {"tokens_per_s": tps, "peak_rss": got["peak_rss"], "rss": got["rss"],
            "steps": info["steps"]}  # fmt: skip


def gpt_command(shape: str, out: Path, python: str) -> list[str]:
    d, L, H, T, B, _, steps = SHAPES[shape]
    sets = {
        "model.d_model": d, "model.n_layers": L, "model.n_heads": H, "model.seq_len": T,
        "model.mlp": "gelu", "model.norm": "layernorm", "model.pos": "learned",
        "model.bias": "true", "model.qk_norm": "false",
        "train.batch_size": B, "train.steps": steps, "train.lr": 1e-3, "train.warmup_steps": 20,
        "train.beta2": 0.99, "train.eval_every": steps, "train.eval_batches": 2,
        "train.checkpoint_every": 0, "log.every": 10 if steps >= 100 else 5,
        "sample.max_new_tokens": 32,
    }  # fmt: skip
    flags = [x for k, v in sets.items() for x in ("--set", f"{k}={v}")]
    return [python, "-m", "gpt_models", "train", *flags, "--out", str(out), "--name", "r"]


def run_gpt(shape: str, python: str, extra_env: dict[str, str] | None = None) -> dict:
    env = dict(os.environ, JAX_PLATFORMS="cpu", WANDB_MODE="disabled", **(extra_env or {}))
    with tempfile.TemporaryDirectory() as tmp:
        got = measure(gpt_command(shape, Path(tmp), python), env)
        with open(Path(tmp) / "r" / "metrics.csv") as f:
            rows = [r for r in csv.DictReader(f) if r.get("tokens_per_s")]
    # The last row's rate includes the final evaluation: the one before it is the loop's own.
    tps = float(rows[-2]["tokens_per_s"])
    splits = SPLIT.findall(got["stderr"])
    split = dict(zip(("compute", "data", "log"), map(int, splits[-1]))) if splits else {}
    return {"tokens_per_s": tps, "peak_rss": got["peak_rss"], "rss": got["rss"], "split": split}


def plot(runs: dict[str, dict], path: Path, title: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, run in runs.items():
        if run.get("rss"):
            t, rss = zip(*run["rss"])
            ax.plot(
                t, [r / 1e9 for r in rss], label=f"{label} (peak {run['peak_rss'] / 1e9:.2f} GB)"
            )
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("RSS (GB)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument(
        "--torch-python", default=os.environ.get("TORCH_PYTHON", "/tmp/hfenv/bin/python")
    )
    p.add_argument("--out", type=Path, help="write every run (with RSS series) as JSON here")
    p.add_argument("--plot", type=Path, help="PNG of RSS over time for the ~10M pair")
    p.add_argument("--only-gpt", action="store_true", help="skip torch (quick gpt train checks)")
    p.add_argument(
        "--gpt", action="append", metavar="LABEL=PYTHON",
        help="a gpt train to time: the Python (a venv's) that runs `-m gpt_models`; repeat to "
        "alternate several (e.g. one per JAX version); default: this checkout's .venv",
    )  # fmt: skip
    args = p.parse_args()
    gpts = dict(x.split("=", 1) for x in args.gpt or [f"gpt train={ROOT / '.venv/bin/python'}"])
    results: dict[str, list[dict]] = {}
    for shape in args.shapes.split(","):
        results[shape] = []
        for _ in range(args.pairs):
            pair = {"load_before": os.getloadavg()}
            if not args.only_gpt:
                pair["torch"] = run_torch(shape, args.torch_python)
            for label, python in gpts.items():
                pair[label] = run_gpt(shape, python)
            pair["load_after"] = os.getloadavg()
            results[shape].append(pair)
            if args.out:  # after every pair: a run cut short keeps what it measured
                args.out.write_text(json.dumps(results, indent=1))
            t = pair.get("torch")
            print(
                f"{shape}: "
                + (
                    f"torch {t['tokens_per_s']:,.0f} tok/s {t['peak_rss'] / 1e9:.2f} GB | "
                    if t
                    else ""
                )
                + " | ".join(
                    f"{label} {g['tokens_per_s']:,.0f} tok/s {g['peak_rss'] / 1e9:.2f} GB"
                    + (f" ({g['tokens_per_s'] / t['tokens_per_s']:.2f}x)" if t else "")
                    for label in gpts
                    for g in [pair[label]]
                )
                + f" | load {pair['load_before'][0]:.2f}->{pair['load_after'][0]:.2f}",
                flush=True,
            )
    if args.plot and "~10M" in results:
        last = results["~10M"][-1]
        runs = {label: last[label] for label in gpts}
        runs |= {"PyTorch": last["torch"]} if "torch" in last else {}
        plot(runs, args.plot, "RSS over time, ~10M shape (d384 L6 ctx256 b16), 2 CPU cores")


if __name__ == "__main__":
    sys.exit(main())
