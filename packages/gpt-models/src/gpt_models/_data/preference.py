"""Preference lines for ``gpt prepare``: a prompt with a chosen and a rejected answer, in the two
shapes TRL documents.

- standard: ``{"prompt": str, "chosen": str, "rejected": str}``; each answer is rendered as a
  completion (``{prompt}{answer}{EOT}``, the answer and EOT counted);
- conversational: ``"chosen"`` and ``"rejected"`` message lists (``{"role", "content"}``), with an
  optional ``"prompt"`` message list before both (without it the two lists hold the whole
  conversation, TRL's implicit prompt). Each answer is ``prompt + chosen`` (or ``rejected``)
  rendered by the chat template, and only its last turn, which must be the assistant's, is counted.

A pair is stored as two examples, chosen then rejected (``sft_store.py``); ``packing.py`` keeps
them together. A line is refused by file and line for a missing field, a field of the wrong type,
an unknown role, or a conversation that does not end with the assistant's turn.
"""

from __future__ import annotations

from typing import Any

from .._errors import DataError

KIND = "preference"
FIELDS = ("prompt", "chosen", "rejected")
EXPECTED = (
    '{"prompt": "...", "chosen": "...", "rejected": "..."} (or "chosen" and "rejected" as '
    'message lists ending with the assistant\'s turn, with an optional "prompt" message list)'
)
_ROLES = ("system", "user", "assistant")


def is_pair(record: Any) -> bool:
    """Whether a parsed JSONL line is a preference pair (it has ``chosen`` or ``rejected``).

    Example:
        >>> is_pair({"prompt": "a", "chosen": "b", "rejected": "c"}), is_pair({"text": "a"})
        (True, False)
    """
    return isinstance(record, dict) and ("chosen" in record or "rejected" in record)


def check_pair(record: dict[str, Any], where: str) -> tuple[Any, ...]:
    """The pair of a preference line: ``("text", prompt, chosen, rejected)`` (strings) or
    ``("chat", chosen_messages, rejected_messages)``, each list the whole conversation with
    ``"weight": 0`` on every assistant turn but the last.

    Raises:
        DataError: a missing field, mixed or wrong types, an unknown role, a conversation that
            does not end with the assistant's turn; named by ``where`` (``file:line``).
    """
    for field in ("chosen", "rejected"):
        if field not in record:
            raise _bad(where, f'the field "{field}" is missing', f'add "{field}"')
    chosen, rejected = record["chosen"], record["rejected"]
    if isinstance(chosen, str) and isinstance(rejected, str):
        prompt = record.get("prompt")
        if not isinstance(prompt, str):
            found = 'the field "prompt" is missing' if prompt is None else f'"prompt" is {prompt!r}'
            raise _bad(where, found, 'give the prompt as a string in "prompt"')
        return ("text", prompt, chosen, rejected)
    if isinstance(chosen, list) and isinstance(rejected, list):
        prompt = record.get("prompt", [])
        if not isinstance(prompt, list):
            raise _bad(
                where,
                f'"chosen" and "rejected" are message lists but "prompt" is {_shown(prompt)}',
                'give "prompt" as a message list too, or leave it out',
            )
        head = _messages(prompt, "prompt", where)
        return (
            "chat",
            head + _answer(_messages(chosen, "chosen", where), "chosen", where),
            head + _answer(_messages(rejected, "rejected", where), "rejected", where),
        )
    raise _bad(
        where,
        f'"chosen" is {_shown(chosen)} and "rejected" is {_shown(rejected)}',
        "give both as strings, or both as message lists",
    )


def _messages(messages: list[Any], field: str, where: str) -> list[dict[str, Any]]:
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or "role" not in m:
            raise _bad(
                where,
                f"{field}[{i}] is {_shown(m)}",
                'give each message a "role" and a string "content"',
            )
        if m["role"] not in _ROLES:
            raise _bad(
                where,
                f"{field}[{i}] has the unknown role {m['role']!r}",
                f"use one of {', '.join(_ROLES)}",
            )
        out.append({"role": m["role"], "content": m["content"], "weight": 0})
    return out


def _answer(messages: list[dict[str, Any]], field: str, where: str) -> list[dict[str, Any]]:
    """``messages`` with its last turn (the assistant's, the answer) counted."""
    if not messages or messages[-1]["role"] != "assistant":
        last = messages[-1]["role"] if messages else "nothing (the list is empty)"
        raise _bad(
            where,
            f'the last turn of "{field}" is {last}',
            "end each answer with the assistant's turn (the answer the loss compares)",
        )
    return [*messages[:-1], {k: v for k, v in messages[-1].items() if k != "weight"}]


def _bad(where: str, found: str, fix: str) -> DataError:
    return DataError(
        f"{where} is a preference line, but {found}. Expected {EXPECTED}; fix: {fix}. "
        "Nothing was written."
    )


def _shown(value: Any) -> str:
    text = "null" if value is None else f"{type(value).__name__} {value!r}"
    return text if len(text) <= 60 else text[:57] + "..."
