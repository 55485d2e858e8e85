"""When in a ``gpt train`` run its resident memory peaks, and what the run was doing then.

Run: ``JAX_PLATFORMS=cpu python benchmarks/gpt/peak_timeline.py RUNS [GPT_TRAIN_ARGS ...]``
(prints one line per run; the figures go into ``benchmarks/gpt/RESULTS.md`` by hand). Each run is
``gpt train ARGS --out TMP`` in a subprocess whose ``VmRSS`` is read every 10 ms; its stderr
lines (the pre-flight, the progress bar, notes) are timestamped as they arrive. Per run: the peak
RSS, the time it was reached, the last stderr line before it (the phase), and the RSS at the end
of compiling and at the last step, so a peak in the steps can be told from one at the checkpoint,
the evaluation, the sample or the loss plot.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def _rss(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return None


def one_run(args: list[str]) -> str:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "gpt_models", "train", *args, "--out", out]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        lines: list[tuple[float, str]] = []

        def read() -> None:
            for raw in proc.stderr:  # type: ignore[union-attr]
                for part in raw.replace("\r", "\n").splitlines():
                    if part.strip():
                        lines.append((time.perf_counter() - start, part.strip()))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        samples: list[tuple[float, int]] = []
        while proc.poll() is None:
            rss = _rss(proc.pid)
            if rss is not None:
                samples.append((time.perf_counter() - start, rss))
            time.sleep(0.01)
        reader.join(timeout=5)
    t_peak, peak = max(samples, key=lambda s: s[1])
    phase = next((text for t, text in reversed(lines) if t <= t_peak), "start")
    training = next((t for t, text in lines if text.startswith("Training ")), None)
    last_step = max((t for t, text in lines if text.startswith("step ")), default=None)

    def at(t: float | None) -> str:
        if t is None:
            return "?"
        rss = max((r for s, r in samples if s <= t), default=0)
        return f"{rss / 2**30:.2f}"

    return (
        f"rc={proc.returncode} wall={samples[-1][0]:.1f}s peak={peak / 2**30:.2f} GiB at "
        f"{t_peak:.1f}s; max RSS up to 'Training' {at(training)} GiB, up to the last step line "
        f"{at(last_step)} GiB; phase at the peak: {phase[:90]!r}"
    )


def main() -> None:
    runs, args = int(sys.argv[1]), sys.argv[2:]
    for i in range(runs):
        print(f"run {i + 1}: {one_run(args)}", flush=True)


if __name__ == "__main__":
    main()
