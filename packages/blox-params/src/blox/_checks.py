"""Argument checks shared by the layers and the pooling functions.

A bad size or stride would otherwise surface at the first call as a bare JAX error (a division by
zero, a negative shape) that names neither the module nor the argument; checking in ``__init__``
reports it where it was written. ``owner`` is the module (its name leads the message) or, for a
plain function such as ``max_pool``, the function's name.
"""

from __future__ import annotations

import math
from typing import Any

import jax

from ._module import Module

PADDING_MODES = ("SAME", "SAME_LOWER", "VALID")


def _where(owner: Module | str) -> str:
    return owner if isinstance(owner, str) else owner.name


def positive_int(value: Any, what: str, owner: Module | str) -> int:
    """``value`` if it is a positive int (numpy ints included, bools not), else a ``ValueError``."""
    if isinstance(value, bool) or not hasattr(value, "__index__") or int(value) <= 0:
        raise ValueError(f"{_where(owner)}: {what} must be a positive int, got {value!r}.")
    return int(value)


def non_negative_float(value: Any, what: str, owner: Module | str) -> float:
    """``value`` as a float if it is a finite real number >= 0 (a norm's ``eps``)."""
    try:
        number = float(value) if not isinstance(value, (bool, str)) else None
    except (TypeError, ValueError):
        number = None
    if number is None or not math.isfinite(number) or number < 0:
        raise ValueError(
            f"{_where(owner)}: {what} must be a finite number >= 0, got {value!r}; a negative "
            "value can make the normaliser divide by zero or by a negative variance."
        )
    return number


def positive_ints(value: Any, what: str, owner: Module | str) -> int | tuple[int, ...]:
    """An int or a sequence of ints, each positive (per spatial dimension sizes, strides)."""
    try:
        items = tuple(value) if not isinstance(value, str) else None
    except TypeError:  # an int, a numpy int or a 0-d array
        items = None
    if items is None:
        return positive_int(value, what, owner)
    if not items or any(
        isinstance(v, bool) or not hasattr(v, "__index__") or v <= 0 for v in items
    ):
        raise ValueError(
            f"{_where(owner)}: {what} must be a positive int or a non-empty sequence of "
            f"positive ints (one per spatial dimension), got {value!r}."
        )
    return tuple(int(v) for v in items)


def check_padding(value: Any, owner: Module | str) -> str | int | tuple[tuple[int, int], ...]:
    """A padding mode name, one int for every side, or one ``(low, high)`` pair per dimension."""
    if isinstance(value, str):
        if value.upper() not in PADDING_MODES:
            raise ValueError(
                f"{_where(owner)}: padding {value!r} is not a padding mode; expected one of "
                f"{', '.join(repr(m) for m in PADDING_MODES)}, an int, or one (low, high) pair "
                "per spatial dimension."
            )
        return value.upper()
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    try:
        pairs = tuple((int(lo), int(hi)) for lo, hi in value)
    except (TypeError, ValueError):
        pairs = ()
    if not pairs:
        raise ValueError(
            f"{_where(owner)}: padding must be 'SAME', 'VALID', 'SAME_LOWER', a non-negative int "
            f"or a sequence of (low, high) int pairs, got {value!r}."
        )
    return pairs


def static_flag(value: Any, what: str, owner: Module | str) -> bool:
    """``value`` as a Python bool; a traced flag (a jitted argument) gets a message.

    ``is_training`` picks which computation to trace, so it must be known at trace time;
    without this check the user sees JAX's TracerBoolConversionError pointing inside blox.
    """
    try:
        return bool(value)
    except jax.errors.ConcretizationTypeError as err:
        raise TypeError(
            f"{_where(owner)}: {what} must be a Python bool, but it is a traced array (passed "
            "through jax.jit, vmap or scan as an argument). Make it static: "
            f"jax.jit(step, static_argnames='{what}'), or close over it."
        ) from err
