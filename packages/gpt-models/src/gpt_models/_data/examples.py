"""The kind of a ``.jsonl`` line for ``gpt prepare``: chat, completion or plain text, from its
fields.

A line holding ``"messages"`` is a chat: a list of ``{"role", "content"}`` objects, roles
``system``, ``user`` and ``assistant``, at least one assistant turn, every content a string; an
assistant message may carry OpenAI's ``"weight"``: 0 (the loss does not count the turn) or 1 (the
default). Other message keys (``name``, ``tool_calls``, ...) are left out, with a note. A line
holding both ``"prompt"`` and ``"completion"`` (strings) is a completion example. Any other line is
plain text, read from ``--text-field`` as before. One input holds one kind: a store is either
plain text or examples with a loss mask, never both, so a line of another kind than the first is
refused by file and line, as is a malformed example (they are mistakes in the data, which a
silent skip would hide until the model shows it).
"""

from __future__ import annotations

from typing import Any

from .._errors import DataError
from .preference import EXPECTED as _PAIR
from .preference import KIND as PREFERENCE
from .preference import check_pair, is_pair

ROLES = ("system", "user", "assistant")
MESSAGE_KEYS = ("role", "content", "weight")
KINDS = ("text", "chat", "completion", PREFERENCE)
_EXPECTED = {
    "chat": '{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": '
    '"..."}]}',
    "completion": '{"prompt": "...", "completion": "..."}',
    PREFERENCE: _PAIR,
}


def kind_of(record: Any) -> str:
    """``"chat"``, ``"completion"``, ``"preference"`` (``chosen``/``rejected``, ``preference.py``)
    or ``"text"``: what a parsed JSONL line holds, by its fields.

    Example:
        >>> chat, completion = {"messages": []}, {"prompt": "a", "completion": "b"}
        >>> kind_of(chat), kind_of(completion), kind_of({"text": ""})
        ('chat', 'completion', 'text')
    """
    if is_pair(record):
        return PREFERENCE
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
    if kind == PREFERENCE:
        return check_pair(record, where)
    if kind == "completion":
        for field in ("prompt", "completion"):
            if not isinstance(record[field], str):
                raise DataError(
                    _bad(
                        where,
                        kind,
                        f'"{field}" is {_type(record[field])}',
                        f'make "{field}" a string',
                    )
                )
        return (record["prompt"], record["completion"])
    messages = record["messages"]
    if not isinstance(messages, list) or not messages:
        raise DataError(
            _bad(
                where,
                kind,
                f'"messages" is {_type(messages)}',
                "give a non-empty list of {role, content} objects",
            )
        )
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            raise DataError(
                _bad(
                    where,
                    kind,
                    f"messages[{i}] is {_shown(msg)}",
                    'give each message "role" and "content"',
                )
            )
        if msg["role"] not in ROLES:
            raise DataError(
                _bad(
                    where,
                    kind,
                    f"messages[{i}] has the unknown role {msg['role']!r}",
                    f"use one of {', '.join(ROLES)} (rename e.g. human -> user, gpt -> assistant)",
                )
            )
        if not isinstance(msg["content"], str):
            raise DataError(
                _bad(
                    where,
                    kind,
                    f"messages[{i}].content is {_type(msg['content'])}",
                    "make each content a string (join a list of parts into one)",
                )
            )
        if "weight" in msg:
            _check_weight(msg, i, where)
    if not any(m["role"] == "assistant" for m in messages):
        roles = ", ".join(m["role"] for m in messages)
        raise DataError(
            _bad(
                where,
                kind,
                f"the conversation has no assistant turn (roles: {roles})",
                "the loss counts assistant turns only: add one, or leave the line out",
            )
        )
    if all(m.get("weight") == 0 for m in messages if m["role"] == "assistant"):
        raise DataError(
            _bad(
                where,
                kind,
                'every assistant turn has "weight": 0, so the loss counts nothing of it',
                'set "weight": 1 on a turn to train on, or leave the line out',
            )
        )
    return [
        {
            "role": m["role"],
            "content": m["content"],
            **({"weight": 0} if m.get("weight") == 0 else {}),
        }
        for m in messages
    ]


def _check_weight(msg: dict[str, Any], i: int, where: str) -> None:
    # OpenAI's fine-tuning format: "weight" on an assistant message, 0 (do not train on this turn)
    # or 1 (train on it, the default); nothing else.
    weight = msg["weight"]
    if isinstance(weight, bool) or not isinstance(weight, int | float) or weight not in (0, 1):
        raise DataError(
            _bad(
                where,
                "chat",
                f'messages[{i}] has "weight": {_shown(weight)}',
                'give "weight": 0 (do not train on this turn) or 1 (train on it, the '
                "default), as OpenAI's fine-tuning format defines it",
            )
        )
    if msg["role"] != "assistant":
        raise DataError(
            _bad(
                where,
                "chat",
                f'messages[{i}] (a {msg["role"]} turn) has a "weight"',
                "weight applies to assistant turns, the only ones the loss counts: remove it",
            )
        )


def unknown_message_keys(record: dict[str, Any]) -> list[str]:
    """The keys of a checked chat line's messages other than role, content and weight, in order.

    Example:
        >>> unknown_message_keys({"messages": [{"role": "user", "content": "", "name": "ann"}]})
        ['name']
    """
    found = [k for m in record["messages"] for k in m if k not in MESSAGE_KEYS]
    return list(dict.fromkeys(found))


def ignored_keys_note(ignored: dict[str, list[Any]]) -> str:
    """The note on message keys left out: ``{key: [first file:line, lines]}``.

    Example:
        >>> ignored_keys_note({"name": ["c.jsonl:3", 12]}).partition(": ")[2]
        "'name' (12 lines, first c.jsonl:3)"
    """
    each = ", ".join(
        f"{k!r} ({n} line{'s' if n != 1 else ''}, first {where})"
        for k, (where, n) in ignored.items()
    )
    return f"messages' keys other than role, content and weight are left out: {each}"


def mixed_kinds(where: str, found: str, first: str, first_where: str) -> DataError:
    """The error for a line (or file) of kind ``found`` in inputs whose first line is ``first``."""
    expect = _EXPECTED.get(first, '{"text": "..."} lines or text files')
    return DataError(
        f"{where} holds {_PHRASE[found]}, but {first_where} (where the inputs begin) holds "
        f"{_PHRASE[first]}: one gpt prepare writes one kind of store (plain text, chat, "
        f"completion or preference). Expected {expect} throughout; prepare each kind into its "
        "own --out."
    )


_PHRASE = {
    "text": "plain text",
    "chat": "a chat example",
    "completion": "a completion example",
    PREFERENCE: "a preference pair",
}


def _bad(where: str, kind: str, found: str, fix: str) -> str:
    return f"{where} is a {kind} line, but {found}. Expected {_EXPECTED[kind]}; fix: {fix}."


def _type(value: Any) -> str:
    return "null" if value is None else f"{type(value).__name__} {_shown(value)}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
