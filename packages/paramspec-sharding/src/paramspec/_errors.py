"""The error class users catch when specs, rules and mesh do not fit together."""

from __future__ import annotations


class ShardingError(ValueError):
    """Specs, rules and mesh do not fit together; the message lists every problem with its path.

    A ``ValueError``, so ``except ValueError`` keeps working for callers that do not know it.
    """
