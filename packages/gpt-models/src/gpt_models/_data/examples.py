"""The kind of a ``.jsonl`` line for ``gpt prepare``: chat, completion or plain text, from its fields.

A line holding ``"messages"`` is a chat: a list of ``{"role", "content"}`` objects, roles
``system``, ``user`` and ``assistant``, at least one assistant turn, every content a string. A line
holding both ``"prompt"`` and ``"completion"`` (strings) is a completion example. Any other line is
plain text, read from ``--text-field`` as before. One input holds one kind: a store is either
plain text or examples with a loss mask, never both, so a line of another kind than the first is
refused by file and line, as is a malformed example (they are mistakes in the data, which a
silent skip would hide until the model shows it).
"""

from __future__ import annotations

from typing import Any

from .._errors import DataError

ROLES = ("system", "user", "assistant")
KINDS = ("text", "chat", "completion")
_EXPECTED = {
    "chat": '{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": '
    '"..."}]}',
    "completion": '{"prompt": "...", "completion": "..."}',
}


def kind_of(record: Any) -> str:
    """``"chat"``, ``"completion"`` or ``"text"``: what a parsed JSONL line holds, by its fields.

    Example:
        >>> kind_of({"messages": []}), kind_of({"prompt": "a", "completion": "b"}), kind_of({"text": ""})
        ('chat', 'completion', 'text')
    """
    if isinstance(record, dict) and "messages" in record:
        return "chat"
    if isinstance(record, dict) and "prompt" in record and "completion" in record:
        return "completion"
    return "text"


def check_example(record: dict[str, Any], kind: str, where: str) -> Any:
    """The example of a chat or completion line: its messages, or ``(prompt, completion)``.

    Raises:
        DataError: an unknown role, no assistant turn, a content or field that is not a string,
            or messages that are not a list of objects; named by ``where`` (``file:line``).
    """
    if kind == "completion":
        for field in ("prompt", "completion"):
            if not isinstance(record[field], str):
                raise DataError(_bad(where, kind, f'"{field}" is {_type(record[field])}',
                                     f'make "{field}" a string'))  # fmt: skip
        return (record["prompt"], record["completion"])
    messages = record["messages"]
    if not isinstance(messages, list) or not messages:
        raise DataError(_bad(where, kind, f'"messages" is {_type(messages)}',
                             "give a non-empty list of {role, content} objects"))  # fmt: skip
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            raise DataError(_bad(where, kind, f"messages[{i}] is {_shown(msg)}",
                                 'give each message "role" and "content"'))  # fmt: skip
        if msg["role"] not in ROLES:
            raise DataError(_bad(
                where, kind, f"messages[{i}] has the unknown role {msg['role']!r}",
                f"use one of {', '.join(ROLES)} (rename e.g. human -> user, gpt -> assistant)",
            ))  # fmt: skip
        if not isinstance(msg["content"], str):
            raise DataError(_bad(where, kind, f"messages[{i}].content is {_type(msg['content'])}",
                                 "make each content a string (join a list of parts into one)"))  # fmt: skip
    if not any(m["role"] == "assistant" for m in messages):
        roles = ", ".join(m["role"] for m in messages)
        raise DataError(_bad(where, kind, f"the conversation has no assistant turn (roles: {roles})",
                             "the loss counts assistant turns only: add one, or leave the line out"))  # fmt: skip
    return [{"role": m["role"], "content": m["content"]} for m in messages]


def mixed_kinds(where: str, found: str, first: str, first_where: str) -> DataError:
    """The error for a line (or file) of kind ``found`` in inputs whose first line is ``first``."""
    expect = _EXPECTED.get(first, '{"text": "..."} lines or text files')
    return DataError(
        f"{where} holds {_PHRASE[found]}, but {first_where} (where the inputs begin) holds "
        f"{_PHRASE[first]}: one gpt prepare writes one kind of store (plain text, chat or "
        f"completion). Expected {expect} throughout; prepare each kind into its own --out."
    )


_PHRASE = {"text": "plain text", "chat": "a chat example", "completion": "a completion example"}


def _bad(where: str, kind: str, found: str, fix: str) -> str:
    return f"{where} is a {kind} line, but {found}. Expected {_EXPECTED[kind]}; fix: {fix}."


def _type(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {_shown(value)}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
