"""A third-party library's own output, off the terminal and into a log file of the run.

lm-evaluation-harness talks while it works: its warnings ("metric acc is defined, but aggregation
is not"), the progress bars of `datasets` and its own, and ``fatal: not a git repository``, which
``git describe`` (run by lm-eval to record a commit) prints straight to the process's stderr
when the command runs outside a git checkout. None of it is about the user's run, and it buried
the table of results. While :func:`output_to_log` holds, everything written to the process's
stderr goes to a temporary file instead: file descriptor 2 (child processes and C code write
there), ``sys.stderr``, the stderr handlers of the loggers that write there, and the records of
lm-eval's and its libraries' loggers whatever the root logger does with them. At the end the
text is appended to the log (as orbax's reports go to the run's error log, ``_runs/runlog.py``)
and one note names it; where the log cannot be written, the text is shown after all.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from .._errors import UsageError
from .._runs.runlog import append_inside

# Loggers whose handlers a library sets up on stderr (lm-eval's own, and the libraries it drives).
_LOGGERS = ("", "lm_eval", "datasets", "huggingface_hub", "evaluate")


@contextlib.contextmanager
def output_to_log(folder: Path, name: str, what: str) -> Iterator[TextIO]:
    """Send stderr to ``folder/name`` while the block runs; yield a stream to the terminal's
    stderr for the lines the user should see (our own progress).

    ``what`` names the talker in the note that names the log (``"lm-eval"``).
    """
    sys.stderr.flush()
    terminal_fd = os.dup(2)
    terminal = open(terminal_fd, "w", buffering=1, encoding="utf-8", closefd=True)  # noqa: SIM115
    with tempfile.TemporaryFile() as held:
        held_text = io.TextIOWrapper(
            os.fdopen(os.dup(held.fileno()), "wb"), "utf-8", errors="replace", line_buffering=True
        )
        old_stderr, handlers = sys.stderr, _stderr_handlers(sys.stderr)
        os.dup2(held.fileno(), 2)
        sys.stderr = held_text
        streams = [handler.setStream(held_text) for handler in handlers]
        own = logging.StreamHandler(held_text)
        own.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        propagate = {n: logging.getLogger(n).propagate for n in _LOGGERS if n}
        for logger_name in propagate:  # their records: here, whatever the root logger does
            logging.getLogger(logger_name).addHandler(own)
            logging.getLogger(logger_name).propagate = False
        failed: BaseException | None = None
        try:
            yield terminal
        except BaseException as err:
            failed = err
            raise
        finally:
            held_text.flush()
            for logger_name, was in propagate.items():
                logging.getLogger(logger_name).removeHandler(own)
                logging.getLogger(logger_name).propagate = was
            for handler, stream in zip(handlers, streams, strict=True):
                handler.setStream(stream)
            sys.stderr = old_stderr
            os.dup2(terminal_fd, 2)
            held_text.close()
            held.seek(0)
            text = held.read().decode("utf-8", errors="replace")
            terminal.close()
            # A usage error's one line says what to fix; the log keeps lm-eval's side of it.
            _keep(text, folder, name, what, note=not isinstance(failed, UsageError))


def _stderr_handlers(stderr: TextIO) -> list[logging.StreamHandler]:  # type: ignore[type-arg]
    """The handlers of :data:`_LOGGERS` that write to ``stderr`` (or to the interpreter's own)."""
    found = []
    for logger_name in _LOGGERS:
        if logger_name and logger_name not in logging.Logger.manager.loggerDict:
            continue
        for handler in logging.getLogger(logger_name).handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream in (
                stderr,
                sys.__stderr__,
            ):
                found.append(handler)
    return found


def _keep(text: str, folder: Path, name: str, what: str, *, note: bool) -> None:
    if not text.strip():
        return
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with contextlib.suppress(OSError):  # else append_inside refuses, and the text is shown
        folder.mkdir(parents=True, exist_ok=True)
    kept = append_inside(folder, name, f"--- {when} {what}'s output\n{text}")
    if kept is None:  # a read-only run folder: the output is not lost for it
        sys.stderr.write(text)
        return
    lines = text.count("\n") + (not text.endswith("\n"))
    if note:
        print(
            f"note: {what}'s own output ({lines} lines: its warnings and progress) is in {kept}",
            file=sys.stderr,
        )
