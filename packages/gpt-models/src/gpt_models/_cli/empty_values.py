"""Empty values of path, name and address arguments, refused before a command does anything.

``--config ''`` reaches a command as an empty string, which ``value or default`` reads as "not
given" and ``Path('')`` as the working directory: without this check ``gpt config show --config ''``
showed the tiny preset and ``gpt prepare x.txt --out ''`` wrote a token store among the user's
files, both without a word. A value of only spaces is as empty.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from .._errors import UsageError


def refuse_empty(
    command: str,
    given: Iterable[tuple[str, str | None, str]],
    *,
    required: Collection[str] = (),
) -> None:
    """Raise ``UsageError`` for the first ``(label, value, example)`` whose value is empty.

    Args:
        command: the command as typed, e.g. ``"gpt train"``.
        given: a flag (``"--out"``) or a positional's metavar (``"RUN"``), its value (None when
            the flag was not given) and a value to show as the fix (for a positional: the whole
            command line).
        required: the flags that cannot be left out; positionals never can.

    Raises:
        UsageError: naming the argument, what it got and a value that works.
    """
    for label, value, example in given:
        if value is None or value.strip():
            continue
        if not label.startswith("--"):
            fix = f"Pass one, e.g. {example}."
        elif label in required:
            fix = f"Pass one, e.g. {label} {example}."
        else:
            fix = f"Pass a value (e.g. {label} {example}), or leave the flag out."
        raise UsageError(f"{command} {label} {value!r} is empty. {fix}")
