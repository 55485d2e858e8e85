"""The ``gpt`` command's stderr without the late reports of orbax's abandoned reads and writes.

When a checkpoint save or restore fails (a full disk, a damaged file), orbax closes its event loop
while tensorstore's threads still finish the other files. Each of those completions calls
``loop.call_soon_threadsafe`` on the closed loop, and the interpreter prints the resulting
``RuntimeError: Event loop is closed`` with its traceback straight to ``sys.stderr`` from the C
level (no hook sees it): up to 470 lines after the one message that says what happened, and what
to do. They carry nothing about the run (every frame is asyncio's); the real error and its chain
are in the run's ``errors.log``. ``gpt`` writes through this filter, which drops exactly those
blocks and passes everything else through as it comes. Likewise asyncio's "Task exception was
never retrieved" for orbax's abandoned writer tasks, logged when they are collected at exit.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from typing import Any, TextIO

_START = "Traceback (most recent call last):"
_LAST = "RuntimeError: Event loop is closed"


class QuietStderr:
    """A text stream that forwards to ``stream``, holding back a traceback until its last line.

    A held traceback is dropped when it is the closed-event-loop report (its last line
    ``RuntimeError: Event loop is closed``, every frame in asyncio); any other is written out whole.
    Each thread's traceback is held apart (several of orbax's threads report at once), and lines
    that are not part of a traceback pass at once.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()
        self._held: dict[int, list[str]] = {}
        self.dropped = 0

    def write(self, text: str) -> int:
        with self._lock:
            me = threading.get_ident()
            if me not in self._held and not text.startswith(_START):
                return self._stream.write(text)
            held = self._held.setdefault(me, [])
            held.append(text)
            block = "".join(held)
            if not block.endswith("\n"):
                return len(text)
            last = block.rstrip("\n").rsplit("\n", 1)[-1]
            if last.startswith((" ", _START)):
                return len(text)  # a frame line: the traceback goes on
            del self._held[me]
            if last == _LAST and _only_asyncio_frames(block):
                self.dropped += 1
            else:
                self._stream.write(block)
            return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _NeverRetrieved(logging.Filter):
    # asyncio's "Task exception was never retrieved" for orbax's writers of a failed save, logged
    # when the tasks are collected (at exit, after gpt's message); the run's error log has the
    # error.
    # The same for a bare Future that tensorstore failed (no orbax frame in its traceback: told
    # apart by the checkpoint's temporary folder in the error).
    def filter(self, record: logging.LogRecord) -> bool:
        if "exception was never retrieved" not in str(record.msg) or not record.exc_info:
            return True
        text = "".join(traceback.format_exception(*record.exc_info))
        return "/orbax/" not in text and _ORBAX_TMP not in text


_ORBAX_TMP = ".orbax-checkpoint-tmp"


class _LateWriterReports(logging.Filter):
    # Orbax's writer threads of a failed save log their own failure (ERROR, with a traceback) as
    # they wind down, at times after gpt's message; the save's error is in the run's error log.
    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.ERROR or "raised an exception" not in str(record.msg):
            return True
        from .._runs.checkpoint import CapturedLogs  # while a run captures them: its error log's

        if any(isinstance(f, CapturedLogs) for f in logging.getLogger("absl").filters):
            return True
        return _ORBAX_TMP not in record.getMessage()


def _only_asyncio_frames(block: str) -> bool:
    frames = [line for line in block.splitlines() if line.startswith('  File "')]
    return bool(frames) and all("/asyncio/" in line for line in frames)


def quiet_stderr() -> None:
    """Put :class:`QuietStderr` in front of ``sys.stderr``, and leave out asyncio's late reports of
    orbax's failed writes (once; for the rest of the process)."""
    if not isinstance(sys.stderr, QuietStderr):
        sys.stderr = QuietStderr(sys.stderr)
    asyncio_log = logging.getLogger("asyncio")
    if not any(isinstance(f, _NeverRetrieved) for f in asyncio_log.filters):
        asyncio_log.addFilter(_NeverRetrieved())
    absl_log = logging.getLogger("absl")
    if not any(isinstance(f, _LateWriterReports) for f in absl_log.filters):
        absl_log.addFilter(_LateWriterReports())
