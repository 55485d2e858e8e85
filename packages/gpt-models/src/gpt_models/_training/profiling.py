"""What a step's time goes to: the split the progress line shows, and ``--profile``'s XLA trace.

``StepTimes`` adds up ``time.perf_counter`` differences the loop takes anyway (a few per step,
well under a microsecond each): time blocked on the device (``compute``: dispatching the step
and waiting for its result), building the next batch on the host (``data``; it overlaps with
the device, so a fast input pipeline shows as a small share), and logging metrics and moving
the progress bar (``log``). Evaluation and checkpoints are outside all three.

``StepProfiler`` runs ``jax.profiler.start_trace``/``stop_trace`` around a range of steps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

import jax

PARTS = ("compute", "data", "log")


class StepTimes:
    """Seconds per part, summed over the timed steps (the first step, which compiles, is not).

    Example:
        >>> times = StepTimes()
        >>> times.add("compute", 0.09); times.add("data", 0.01)
        >>> times.text()
        'compute 90% data 10% log 0%'
    """

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PARTS, 0.0)

    def add(self, part: str, seconds: float) -> None:
        self.seconds[part] += seconds

    def text(self) -> str:
        total = sum(self.seconds.values())
        if not total:
            return ""
        return " ".join(f"{p} {100 * s / total:.0f}%" for p, s in self.seconds.items())


class StepProfiler:
    """Trace steps ``start`` .. ``stop - 1`` (0-based; the progress line counts them 1-based).

    Call :meth:`before` ahead of each step and :meth:`after` once its results are on the host.
    """

    def __init__(self, profile: tuple[int, int] | None, folder: Path, stream: TextIO) -> None:
        self.range, self.folder, self.stream = profile, folder, stream
        self.tracing = False
        self.first = self.done = 0

    def before(self, step: int) -> None:
        if self.range and not self.tracing and self.range[0] <= step < self.range[1]:
            self.folder.mkdir(parents=True, exist_ok=True)
            # The Perfetto file is what reads without TensorBoard (ui.perfetto.dev opens it).
            jax.profiler.start_trace(str(self.folder), create_perfetto_trace=True)
            self.tracing = True
            self.first = self.done = step

    def after(self, step: int) -> None:
        """Step ``step`` finished (its results are on the host): stop after the last one."""
        self.done = step + 1
        if self.tracing and self.range and step + 1 >= self.range[1]:
            self.stop()

    def stop(self) -> None:
        """End the trace (also when the loop stops early) and say where it is."""
        if not self.tracing:
            return
        jax.profiler.stop_trace()
        self.tracing = False
        print(
            f"Profile of steps {self.first + 1}..{self.done} written to {self.folder} "
            f"(tensorboard --logdir {self.folder}, Profile tab; or open "
            f"{_perfetto_file(self.folder)} in ui.perfetto.dev)",
            file=self.stream,
        )


def _perfetto_file(folder: Path) -> Any:
    found = sorted(folder.glob("plugins/profile/*/*perfetto_trace.json.gz"))
    return found[-1] if found else folder / "plugins/profile/<time>/perfetto_trace.json.gz"
