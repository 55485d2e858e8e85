"""Which log sites a transformation acts on (``names=``/``tags=`` filters)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Filter = str | Sequence[str] | None


def _normalise(what: str, value: Filter) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return frozenset([value])
    try:
        items = frozenset(value)
    except TypeError as err:
        raise TypeError(
            f"{what} must be None (all sites), a string or a sequence of strings, got "
            f"{value!r} ({type(value).__name__})."
        ) from err
    bad = sorted(repr(v) for v in items if not isinstance(v, str))
    if bad:
        raise TypeError(f"{what} must contain only strings, got {', '.join(bad)}.")
    return items


def require_callable(f: Any, who: str, what: str = "f") -> None:
    """Fail where a transform is built, not at its first call, when handed a non-function."""
    if not callable(f):
        raise TypeError(
            f"lox.{who}: {what} must be callable, got {f!r:.60} ({type(f).__name__}). Pass the "
            f"function itself: lox.{who}(step_fn), not lox.{who}(step_fn(...))."
        )


class Selector:
    """Site filter: exact name match AND any-tag match; ``None`` = all, empty = none."""

    def __init__(self, names: Filter, tags: Filter, *, invert: bool = False) -> None:
        self.names = _normalise("names", names)
        self.tags = _normalise("tags", tags)
        self.invert = invert

    def __call__(self, params: dict[str, Any]) -> bool:
        ok = (self.names is None or params["name"] in self.names) and (
            self.tags is None or any(t in self.tags for t in params["tags"])
        )
        return ok != self.invert

    def key(self) -> tuple[Any, ...]:
        return (self.names, self.tags, self.invert)
