"""Helpers that make error messages say what failed, what was given and what was expected."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any


def did_you_mean(name: str, candidates: Iterable[str], *, n: int = 3) -> str:
    """A ``" Did you mean 'x'?"`` suffix for near misses, or ``""`` when none is close.

    Example:
        >>> did_you_mean('kernal', ['kernel', 'bias'])
        " Did you mean 'kernel'?"
        >>> did_you_mean('zzz', ['kernel'])
        ''
    """
    close = difflib.get_close_matches(str(name), [str(c) for c in candidates], n=n, cutoff=0.6)
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(c) for c in close) + "?"


def list_alternatives(candidates: Iterable[Any], *, limit: int = 20) -> str:
    """Candidates as a sorted, quoted, comma-separated list, cut off after ``limit``.

    Example:
        >>> list_alternatives(['b', 'a'])
        "'a', 'b'"
        >>> list_alternatives([])
        '(none)'
        >>> list_alternatives(range(5), limit=2)
        "'0', '1', ... (3 more)"
    """
    items = sorted(str(c) for c in candidates)
    if not items:
        return "(none)"
    shown = ", ".join(repr(c) for c in items[:limit])
    extra = len(items) - limit
    return shown + (f", ... ({extra} more)" if extra > 0 else "")


def got_expected(what: str, got: Any, expected: Any) -> str:
    """``"<what>: got <got>, expected <expected>."``

    Example:
        >>> got_expected('shape of net/w', (3, 4), (5, 4))
        'shape of net/w: got (3, 4), expected (5, 4).'
    """
    return f"{what}: got {got}, expected {expected}."


def format_problems(header: str, problems: Sequence[str]) -> str:
    """One message that lists every problem found, so a user fixes them all in one go.

    Example:
        >>> print(format_problems('Bad rules', ['a is unknown', 'b is used twice']))
        Bad rules (2 problems):
          - a is unknown
          - b is used twice
    """
    noun = "problem" if len(problems) == 1 else "problems"
    lines = [f"{header} ({len(problems)} {noun}):"] + [f"  - {p}" for p in problems]
    return "\n".join(lines)
