"""Error classes: every user-facing failure is one of these, so the CLI can print it without a traceback."""

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
