"""SIGTERM/SIGINT during training: finish the step, save a checkpoint, then stop.

A second signal while stopping says that the save is being waited for; it does not interrupt it.

The handler only sets a flag; the loop reads it after each step, so a checkpoint never holds a
half-applied update.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any


class TrainingInterrupted(Exception):
    """SIGTERM or SIGINT stopped ``train``; a checkpoint of the last finished step was saved first.

    ``signum`` is the signal, ``step`` the step of that checkpoint; ``gpt train --resume RUN``
    continues from it. The CLI exits with status ``128 + signum`` as a shell does.

    Example:
        >>> from gpt_models import TrainingInterrupted
        >>> stop = TrainingInterrupted(15, 40)
        >>> stop.signum, stop.step, str(stop)
        (15, 40, 'signal 15 at step 40')
    """

    def __init__(self, signum: int, step: int, skipped: tuple[str, ...] = ()):
        super().__init__(f"signal {signum} at step {step}")
        self.signum, self.step = signum, step
        self.skipped = skipped  # what the end of a finished run left out (loss.png, sample.txt)


_STILL_STOPPING = (
    b"\ngpt: already stopping: the current step finishes and its checkpoint is saved first, so "
    b"that the run can be resumed; waiting for that (kill -9 stops at once, the newest complete "
    b"checkpoint stays intact).\n"
)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[dict[str, int]]:
    """Turn SIGTERM/SIGINT into a flag (``"signum" in flag``) the loop checks after each step."""
    flag: dict[str, int] = {}
    if threading.current_thread() is not threading.main_thread():
        yield flag  # signal handlers can only be installed from the main thread
        return

    def handler(signum: int, frame: Any) -> None:
        if "signum" in flag:
            # A second Ctrl-C used to raise KeyboardInterrupt wherever the main thread was, often
            # inside the checkpoint save: a traceback and no checkpoint. The save takes seconds;
            # waiting for it keeps the run resumable. os.write: print() is not reentrant.
            os.write(2, _STILL_STOPPING)
            return
        flag["signum"] = signum

    # A signal the process was started ignoring stays ignored: a shell runs background jobs with
    # SIGINT ignored so that Ctrl-C in the terminal leaves them alone, and nohup-like launchers do
    # the same; catching it anyway would stop a run its owner meant to keep going.
    watched = [s for s in (signal.SIGTERM, signal.SIGINT) if signal.getsignal(s) != signal.SIG_IGN]
    previous = {s: signal.signal(s, handler) for s in watched}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
