"""Console progress (loss, tokens/s, MFU, step-time split, ETA) and the loss plot.

MFU (model FLOPs utilisation) = ``flops_per_token * tokens_per_second / peak``, where
``flops_per_token`` counts what the train step computes (``6 * N_matmul + 12 * n_layers *
d_model * seq_len`` when every weight trains, less with LoRA: see ``gpt_models.flops_per_token``)
and ``peak`` comes from ``mfu.peak_flops``; when the peak is unknown (``None``: CPUs, device kinds
not in the table) no MFU is shown.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .._console import FILE_LINES, StatusLine
from .profiling import StepTimes


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


class Progress:
    """A one-line progress bar (rewritten in place on a terminal, a line every 5% otherwise).

    The train loss and the validation loss are shown in one unit: nats per byte (the train loss,
    per token in the step, divided by the data's ``bytes_per_token``, as ``loss.png`` shows it), or
    nats per token when the data's bytes are unknown (``bytes_per_token=None``).
    """

    def __init__(
        self,
        total: int,
        start: int,
        tokens_per_step: int,
        flops_per_token: float,
        peak: float | None,
        *,
        every: int,
        stream: TextIO | None = None,
        bytes_per_token: float | None = 1.0,
    ) -> None:
        self.total, self.start, self.every = total, start, every
        self.tokens_per_step, self.flops_per_token, self.peak = (
            tokens_per_step,
            flops_per_token,
            peak,
        )
        self.stream = stream or sys.stderr
        self.status = StatusLine(self.stream)
        self.tty = self.status.tty
        self.timer_start: float | None = None
        self.timer_steps = 0
        self.val: float | None = None
        self.last_print = -1
        self.times = StepTimes()  # filled by the loop; shown as the step-time split
        self.per_token = 1.0 / (bytes_per_token or 1.0)
        self.unit = "nats/byte" if bytes_per_token else "nats/token"

    def tick(self, step: int) -> None:
        """Call after step ``step`` finished; the first step (compilation) is not timed."""
        if self.timer_start is None:
            self.timer_start = time.perf_counter()
            self.timer_steps = step
            return

    def rates(self, step: int) -> tuple[float, float]:
        """(tokens/s, MFU) averaged since the first timed step; MFU is NaN when the peak is
        unknown."""
        if self.timer_start is None or step <= self.timer_steps:
            return 0.0, (0.0 if self.peak else math.nan)
        elapsed = max(time.perf_counter() - self.timer_start, 1e-9)
        tps = (step - self.timer_steps) * self.tokens_per_step / elapsed
        mfu = tps * self.flops_per_token / self.peak if self.peak else math.nan
        return tps, mfu

    def line(self, step: int, loss: float) -> str:
        tps, mfu = self.rates(step)
        width = 20
        filled = int(width * step / self.total)
        bar = "#" * filled + "." * (width - filled)
        eta = (self.total - step) * self.tokens_per_step / tps if tps else 0.0
        val = f" (val {self.val:.3f})" if self.val is not None else ""
        shown_mfu = f" | MFU {100 * mfu:.1f}%" if self.peak else ""
        split = self.times.text()
        return (
            f"step {step:>{len(str(self.total))}}/{self.total} [{bar}] loss "
            f"{loss * self.per_token:.3f}{val} {self.unit} | "
            f"{tps / 1e3:.1f}k tok/s{shown_mfu}{f' | {split}' if split else ''} | "
            f"ETA {_duration(eta)}"
        )

    def update(self, step: int, loss: float, *, force: bool = False) -> None:
        self.tick(step)
        every = self.every if self.tty else max(self.every, self.total // FILE_LINES)
        if not force and step % every and step != self.total:
            return
        self.status.write(self.line(step, loss))
        self.last_print = step

    def close(self) -> None:
        self.status.close()


def plot_losses(metrics: Any, path: str | Path, bytes_per_token: float | None = 1.0) -> None:
    """Save a PNG of the train loss per step and the val loss at each evaluation (nats per byte).

    ``val_loss`` is logged per byte already; the train loss (per token) is divided by the validation
    split's ``bytes_per_token`` so both curves share a unit. With unknown bytes (a ``.bin`` without
    a
    sidecar, ``None``) both stay per token.

    ``metrics`` is a lox logdict, e.g. ``lox.load("runs/<name>/metrics/run_0")``; a step logged
    twice (a resumed run repeats the steps after its last checkpoint) keeps its later value. The
    figure is drawn on its own Agg canvas: matplotlib's backend and pyplot's figures are untouched.

    Example:
        >>> import tempfile, numpy as np, lox
        >>> from gpt_models import plot_losses
        >>> logs = lox.logdict({"loss": np.array([3.0, 2.5])},
        ...                    steps={"loss": {"step": np.array([0, 1])}})
        >>> path = tempfile.mkdtemp() + "/loss.png"
        >>> plot_losses(logs, path)
        >>> open(path, "rb").read(4)
        b'\\x89PNG'
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4), dpi=100)
    FigureCanvasAgg(fig)  # attaches itself to fig: savefig renders with Agg, whatever the backend
    ax = fig.add_subplot()
    for key, label in (("loss", "train"), ("val_loss", "val")):
        if key in metrics:
            steps, values = _last_per_step(metrics, key)
            if key == "loss":
                values = values / (bytes_per_token or 1.0)
            ax.plot(steps, values, label=label, marker="o" if key == "val_loss" else None)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats / byte)" if bytes_per_token else "loss (nats / token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def _last_per_step(metrics: Any, key: str) -> tuple[np.ndarray, np.ndarray]:
    # A resumed run re-logs the steps after its last checkpoint; the later value wins.
    steps = np.asarray(metrics.steps[key]["step"]).reshape(-1)
    values = np.asarray(metrics[key]).reshape(-1)
    last = dict(zip(steps.tolist(), values.tolist()))
    order = sorted(last)
    return np.array(order), np.array([last[s] for s in order])
