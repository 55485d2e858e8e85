"""Side by side with the PyTorch peer: ours and ``torch_gpt.py`` alternately (A B A B), one shape at a time.

Each run is its own process of ``--seconds`` training (the peers' harness: same data, same timing,
tokens/s over the steps after the first five). Skipped, with a message, when the torch interpreter
cannot import torch. Used by ``run.py`` (``--peer`` adds the rows, ``--peer-only`` runs only them).
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).parent
DEFAULT_PEER_DIR = HERE.parents[1] / ".." / "shared" / "peer_bench"
DEFAULT_TORCH_PYTHON = os.environ.get(
    "TORCH_PYTHON", str(Path.home() / "torch-venv" / "bin" / "python")
)

# name -> (d_model, n_layer, n_head, ctx, batch): a tiny and a ~10M-parameter shape.
SHAPES = {"tiny": (128, 4, 4, 128, 32), "~10M": (384, 6, 6, 256, 16)}


def torch_missing(torch_python: str) -> str | None:
    """Why the torch row cannot run, or ``None`` when it can."""
    try:
        proc = subprocess.run(
            [torch_python, "-c", "import torch; print(torch.__version__)"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"cannot run {torch_python!r} ({err}); set --torch-python or TORCH_PYTHON"
    if proc.returncode != 0:
        return (
            f"{torch_python!r} cannot import torch; see ../shared/peer_bench/README.md to set it up"
        )
    return None


def _tokens_per_s(cmd: list[str], env: dict[str, str]) -> float:
    """The run's tokens/s after its first 5 steps; on a machine so loaded that it made no more than
    5 steps, all its steps (``tokens / train_s``) instead of NaN."""
    info = _run(cmd, env)
    tps = float(info["tokens_per_s"])
    return tps if math.isfinite(tps) else info["tokens"] / info["train_s"]


def _run(cmd: list[str], env: dict[str, str]) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    raise RuntimeError(f"{cmd[1]} failed (exit {proc.returncode}): {tail}")


def side_by_side(
    shape: str, reps: int, seconds: float, peer_dir: Path, torch_python: str, threads: int = 2
) -> dict:
    """``reps`` alternations of torch then ours; per-run tokens/s and the per-pair ratios."""
    d, L, H, T, B = SHAPES[shape]
    flags = ["--d-model", str(d), "--n-layer", str(L), "--n-head", str(H), "--ctx", str(T),
             "--batch", str(B), "--threads", str(threads), "--seconds", str(seconds),
             "--eval-batches", "2"]  # fmt: skip
    env = dict(os.environ, PEER_BENCH_DIR=str(peer_dir))
    torch_cmd = [torch_python, str(peer_dir / "torch_gpt.py"), *flags]
    ours_cmd = [sys.executable, str(HERE / "ours_peer.py"), *flags]
    out: dict = {"shape": shape, "torch": [], "ours": [], "load": []}
    for _ in range(reps):
        out["torch"].append(_tokens_per_s(torch_cmd, env))
        out["ours"].append(_tokens_per_s(ours_cmd, env))
        out["load"].append(os.getloadavg()[0])
        print(
            f"[peer] {shape}: torch {out['torch'][-1]:,.0f} ours {out['ours'][-1]:,.0f} tok/s",
            flush=True,
        )
    out["ratios"] = [o / t for o, t in zip(out["ours"], out["torch"], strict=True)]
    return out


def report(rows: list[dict], skipped: str | None, seconds: float) -> list[str]:
    lines = [
        "",
        "## Side by side with PyTorch (`torch_gpt.py`, a PyTorch trainer of the same architecture, "
        "CPU wheel)",
        "",
    ]
    if skipped:
        return [*lines, f"Not run: {skipped}."]
    lines += [
        f"Each run is a separate process training for {seconds:g} s (compile excluded, first 5 steps "
        "excluded), torch then ours, repeated; the ratio is taken per pair (same machine load). "
        "Same architecture: pre-LayerNorm, GELU 4x MLP, learned positions, tied embeddings, AdamW, "
        "clipping 1.0, float32.",
        "",
        "| shape | pairs | torch tok/s (median, min-max) | ours tok/s (median, min-max) "
        "| ours / torch (median, min-max) | 1-min load during |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        t, o, q = r["torch"], r["ours"], r["ratios"]
        lines.append(
            f"| {r['shape']} | {len(q)} | {statistics.median(t):,.0f} ({min(t):,.0f}-{max(t):,.0f}) "
            f"| {statistics.median(o):,.0f} ({min(o):,.0f}-{max(o):,.0f}) "
            f"| {statistics.median(q):.2f} ({min(q):.2f}-{max(q):.2f}) "
            f"| {min(r['load']):.1f}-{max(r['load']):.1f} |"
        )
    return lines
