"""Error classes: every user-facing failure is one of these, so the CLI can print it without a
traceback."""

from __future__ import annotations


class UsageError(ValueError):
    """A problem with what the user asked for (config, data, mesh, run folder).

    The CLI prints the message and exits with status 2, like ``argparse`` does for bad flags.
    """


class ConfigError(UsageError):
    """An unknown config key, a value of the wrong type or an inconsistent combination of values."""


class DataError(UsageError):
    """A missing, unreadable or too-short data source."""


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or infinite; the run stopped with its last good checkpoint intact."""


class OutOfMemoryError(UsageError, MemoryError):
    """The train step (or the program of ``gpt sample``/``gpt eval``) needs more memory than the
    devices have (host RAM on CPU).

    Raised by the memory pre-flight before anything is written, or when XLA reports ``Out of
    memory`` while running; the message gives both numbers and settings that fit. The CLI exits
    with status 2, as for other settings that cannot work.
    """


class DiskFullError(OSError):
    """A file write failed because its filesystem is full (``ENOSPC``) or over quota.

    The newest complete checkpoint stays restorable; the message names the file, the free space
    and how to continue. The CLI exits with status 4.
    """


class CheckpointFormatError(UsageError):
    """A Hugging Face folder that cannot be imported, or a model that cannot be exported as one."""
