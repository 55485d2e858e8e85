"""What a command prints while it works: one status line, rewritten in place on a terminal and
written as separate lines to a file or a pipe.

``gpt train``'s progress bar, ``gpt eval --text/--task``'s window count and ``gpt prepare``'s
throughput all write through :class:`StatusLine`. On a terminal the line is redrawn (``\\r``, the
text, erase to the end of the line); anywhere else (``isatty()`` false: a log file, a pipe, a
notebook cell capturing stderr) each update is a line of its own, and there are at most about
``FILE_LINES`` of them per run, so a log stays readable instead of holding one 3 KB line of
carriage returns.

Layer 0 of gpt_models, beside ``_errors``: imports nothing of gpt_models, so that every layer (the
data pipeline of ``gpt prepare`` as well as training and evaluation) can use it.
"""

from __future__ import annotations

import math
import time
from typing import TextIO

FILE_LINES = 20  # progress lines a file or pipe gets over a whole run: one every 5%...
FILE_SECONDS = 60.0  # ...and one a minute at least, however slow the work


def is_terminal(stream: TextIO | None) -> bool:
    """Whether ``stream`` is an interactive terminal (a redrawn line shows there)."""
    isatty = getattr(stream, "isatty", None)
    return bool(isatty is not None and isatty())


class StatusLine:
    """A progress line on ``stream``: redrawn on a terminal, separate lines elsewhere.

    Args:
        stream: where the line goes; ``None`` prints nothing.
        total: how much work there is (windows, bytes, ...), for :meth:`due`; 0 if unknown.
        seconds: on a terminal, the least time between two redraws :meth:`due` allows.

    Example:
        >>> import io
        >>> log = io.StringIO()  # not a terminal: separate lines, one per 5% of the work
        >>> line = StatusLine(log, total=200)
        >>> for done in range(1, 201):
        ...     if line.due(done):
        ...         line.write(f"{done}/200")
        >>> line.close()
        >>> lines = log.getvalue().splitlines()
        >>> len(lines), lines[:2], lines[-1], "\\r" in log.getvalue()
        (20, ['10/200', '20/200'], '200/200', False)
    """

    def __init__(self, stream: TextIO | None, *, total: float = 0, seconds: float = 0.5) -> None:
        self.stream, self.total, self.seconds = stream, total, seconds
        self.tty = is_terminal(stream)
        # A terminal shows the first update at once; a file gets its first line at 5%.
        self._last_time = -math.inf if self.tty else time.perf_counter()
        self._last_mark = 0
        self._drawn = False  # a terminal line is on screen and not ended yet

    def due(self, done: float, *, final: bool = False) -> bool:
        """Whether to show the line now that ``done`` of ``total`` is done.

        On a terminal: when ``seconds`` have passed since the last redraw. Elsewhere: when
        ``done`` crossed the next ``1 / FILE_LINES`` of ``total``, or ``FILE_SECONDS`` passed
        since the last line. ``final`` (the work is finished) is always due.
        """
        if self.stream is None:
            return False
        now = time.perf_counter()
        due = final or now - self._last_time >= (self.seconds if self.tty else FILE_SECONDS)
        if not self.tty and self.total > 0:
            mark = int(FILE_LINES * min(done, self.total) / self.total)
            due |= mark > self._last_mark
            self._last_mark = max(mark, self._last_mark)
        if due:
            self._last_time = now
        return due

    def write(self, text: str) -> None:
        """Show ``text``: redraw the terminal line, or write it as a line of its own."""
        if self.stream is None:
            return
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K")
            self._drawn = True
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End a terminal line that is still being redrawn (the next output starts below it)."""
        if self.stream is not None and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
