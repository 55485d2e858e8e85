"""The error class users catch when specs, rules and mesh do not fit together."""

from __future__ import annotations

from typing import Any

import numpy as np


class ShardingError(ValueError):
    """Specs, rules and mesh do not fit together; the message lists every problem with its path.

    Also raised for a mesh no array can be laid out on: one that lists a device twice.

    A ``ValueError``, so ``except ValueError`` keeps working for callers that do not know it.
    """


def repeated_devices(devices: Any) -> list[tuple[Any, int]]:
    """The devices listed more than once in ``devices`` (any nesting), with their counts."""
    counts: dict[Any, int] = {}
    for d in np.ravel(np.asarray(devices, dtype=object)):
        counts[d] = counts.get(d, 0) + 1
    return [(d, n) for d, n in counts.items() if n > 1]


def describe_repeats(repeats: list[tuple[Any, int]]) -> str:
    return ", ".join(f"{d!r} {n} times" for d, n in repeats)
