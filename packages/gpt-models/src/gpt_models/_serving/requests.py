"""The OpenAI API's request bodies, checked and turned into prompts and sampling settings.

Every refusal is an :class:`ApiError` that names the field (OpenAI's ``param``), what it got and
what it takes. A field the request leaves out takes the run's ``[sample]`` value, as
``gpt sample`` does (``max_tokens`` is capped to the context, as ``--max-new-tokens`` is); a
``max_tokens`` given that does not fit is refused instead. ``top_k`` and ``ignore_eos`` (go on past
the end-of-text or end-of-turn token, for fixed-length benchmarks) are not OpenAI's fields; vLLM's
servers take them too.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from .._config.schema import SampleConfig
from .._data.chat_format import ChatFormat
from .._data.corpus import Tokenizer
from .._errors import DataError

_MAX_STOP = 4  # OpenAI's limit on stop strings
_ROLES = ("system", "developer", "user", "assistant", "tool")


class ApiError(Exception):
    """A request the server refuses: HTTP ``status``, OpenAI's error ``type``, ``param`` and
    ``code``."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        kind: str = "invalid_request_error",
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.kind, self.code = (
            status,
            message,
            param,
            kind,
            code,
        )

    def body(self) -> dict[str, Any]:
        """OpenAI's JSON error shape."""
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


@dataclasses.dataclass(frozen=True)
class Model:
    """What the requests are checked against: the run served and its limits."""

    name: str
    max_len: int
    max_batch: int
    tokenizer: Tokenizer
    chat: ChatFormat | None
    defaults: SampleConfig
    ends: tuple[int, ...]  # where a completion stops (the tokenizer's end-of-text id)


@dataclasses.dataclass(frozen=True)
class Asked:
    """One checked request: its prompts' ids and how to sample ``n`` texts from each."""

    chat: bool
    prompts: tuple[tuple[int, ...], ...]
    max_tokens: tuple[int, ...]  # per prompt
    temperature: float
    top_p: float
    top_k: int
    n: int
    stop: tuple[str, ...]
    ends: tuple[int, ...]
    seed: int | None
    stream: bool
    usage_chunk: bool
    logprobs: bool


def _bad(param: str, message: str) -> ApiError:
    return ApiError(400, f"{param}: {message}", param)


def _number(body: dict[str, Any], key: str, default: float) -> float:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _bad(key, f"expected a finite number, got {value!r}")
    return float(value)


def _integer(body: dict[str, Any], key: str, default: int | None) -> int | None:
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(key, f"expected an integer, got {value!r}")
    return value


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise _bad(key, f"expected true or false, got {value!r}")
    return bool(value)


def check_model(body: dict[str, Any], model: Model) -> None:
    """A request for another model than the one served: 404, as OpenAI answers it."""
    name = body.get("model")
    if name is None:
        raise _bad("model", f"missing; this server serves {model.name!r}")
    if name != model.name:
        raise ApiError(
            404,
            f"The model {name!r} does not exist: this server serves one model, {model.name!r} "
            "(GET /v1/models lists it). Pass model=" + repr(model.name) + ".",
            "model",
            code="model_not_found",
        )


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    value = body.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if (
        not isinstance(stops, list)
        or not all(isinstance(s, str) and s for s in stops)
        or len(stops) > _MAX_STOP
    ):
        raise _bad(
            "stop",
            f"expected a non-empty string or a list of at most {_MAX_STOP} non-empty strings, "
            f"got {value!r}",
        )
    return tuple(stops)


def _settings(body: dict[str, Any], model: Model) -> dict[str, Any]:
    """The sampling fields every endpoint shares, checked."""
    d = model.defaults
    temperature = _number(body, "temperature", d.temperature)
    if temperature < 0:
        raise _bad("temperature", f"got {temperature}, expected a number >= 0 (0 is greedy)")
    top_p = _number(body, "top_p", d.top_p)
    if not 0 < top_p <= 1:
        raise _bad("top_p", f"got {top_p}, expected a number in (0, 1] (1 keeps every token)")
    top_k = _integer(body, "top_k", d.top_k)
    if top_k is None or top_k < 0:
        raise _bad("top_k", f"got {top_k}, expected an integer >= 0 (0 keeps every token)")
    n = _integer(body, "n", 1)
    if n is None or not 1 <= n <= model.max_batch:
        raise _bad(
            "n",
            f"got {n}, expected 1 to {model.max_batch} (the server's --max-batch: the texts of "
            "one request decode side by side)",
        )
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("stream_options", f"expected an object, got {options!r}")
    return {
        "temperature": temperature,
        "top_p": top_p,
        "top_k": top_k,
        "n": n,
        "stop": _stop(body),
        "seed": _integer(body, "seed", None),
        "stream": _flag(body, "stream"),
        "usage_chunk": bool((options or {}).get("include_usage")),
    }


def _lengths(
    body: dict[str, Any], model: Model, prompts: list[tuple[int, ...]], field: str
) -> tuple[int, ...]:
    """Each prompt's ``max_tokens``: as asked (refused past the context), else capped."""
    asked = _integer(body, "max_completion_tokens", None)
    key = "max_completion_tokens" if asked is not None else "max_tokens"
    asked = _integer(body, "max_tokens", None) if asked is None else asked
    if asked is not None and asked < 1:
        raise _bad(key, f"got {asked}, expected an integer >= 1")
    out = []
    for ids in prompts:
        room = model.max_len - len(ids)
        if room < 1:
            raise _bad(
                field,
                f"the prompt is {len(ids)} tokens long, but the server's context is "
                f"{model.max_len} tokens (--max-len), with room for at least one new token: "
                f"use a prompt of at most {model.max_len - 1} tokens",
            )
        if asked is not None and asked > room:
            raise _bad(
                key,
                f"got {asked}, but the prompt ({len(ids)} tokens) and {asked} new tokens exceed "
                f"the server's context of {model.max_len} tokens (--max-len): ask for at most "
                f"{room}",
            )
        out.append(min(model.defaults.max_new_tokens, room) if asked is None else asked)
    return tuple(out)


def _encode(model: Model, text: str, field: str) -> tuple[int, ...]:
    ids = tuple(int(i) for i in model.tokenizer.encode(text))
    if not ids:
        raise _bad(field, "the prompt is empty: give at least one character")
    return ids


def completion(body: dict[str, Any], model: Model) -> Asked:
    """``POST /v1/completions``: one prompt (a string, or a list of strings: each gets ``n``
    texts), continued as plain text; it stops at the tokenizer's end-of-text token."""
    check_model(body, model)
    prompt = body.get("prompt")
    texts = [prompt] if isinstance(prompt, str) else prompt
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        raise _bad("prompt", f"expected a string or a non-empty list of strings, got {prompt!r}")
    prompts = [_encode(model, t, "prompt") for t in texts]
    settings = _settings(body, model)
    if len(prompts) * settings["n"] > model.max_batch:
        raise _bad(
            "prompt",
            f"{len(prompts)} prompts x n = {settings['n']} texts, but the server decodes at most "
            f"{model.max_batch} side by side (--max-batch); send fewer at a time",
        )
    logprobs = _integer(body, "logprobs", None)
    if logprobs not in (None, 0):
        raise _bad(
            "logprobs",
            f"got {logprobs}: this server gives the sampled tokens' log-probabilities only, "
            "logprobs=0 (no alternatives)",
        )
    if _flag(body, "echo"):
        raise _bad("echo", "true is not supported: the text returned is the continuation only")
    lengths = _lengths(body, model, prompts, "prompt")
    ends = () if _flag(body, "ignore_eos") else model.ends
    return Asked(False, tuple(prompts), lengths, ends=ends, logprobs=logprobs == 0, **settings)


def _messages(body: dict[str, Any]) -> list[dict[str, str]]:
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _bad("messages", f"expected a non-empty list of messages, got {raw!r}")
    out = []
    for i, m in enumerate(raw):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in _ROLES:
            raise _bad(
                f"messages[{i}].role",
                f"got {role!r}, expected one of {', '.join(_ROLES)}",
            )
        content = m.get("content")
        if isinstance(content, list):  # content parts: their text, in order
            texts = [p.get("text") for p in content if isinstance(p, dict)]
            if len(texts) != len(content) or not all(isinstance(t, str) for t in texts):
                raise _bad(f"messages[{i}].content", "only text parts are supported")
            content = "".join(texts)  # type: ignore[arg-type]
        if not isinstance(content, str):
            raise _bad(f"messages[{i}].content", f"expected a string, got {content!r}")
        out.append({"role": "system" if role == "developer" else role, "content": content})
    return out


def chat(body: dict[str, Any], model: Model) -> Asked:
    """``POST /v1/chat/completions``: the messages written by the run's chat template, the
    reply ending at the end of the assistant's turn."""
    check_model(body, model)
    messages = _messages(body)
    if model.chat is None:
        raise _bad(
            "messages",
            f"the run {model.name!r} has no chat template (it was not trained on chat data, nor "
            "imported from a chat model), so it cannot read messages; use POST /v1/completions "
            "with a prompt, or serve a run fine-tuned on chats (gpt prepare of chat JSONL)",
        )
    try:
        text = model.chat.conversation(messages)
    except DataError as err:
        raise _bad(
            "messages", f"the run's chat template cannot write these messages: {err}"
        ) from err
    settings = _settings(body, model)
    top = _integer(body, "top_logprobs", None)
    if top not in (None, 0):
        raise _bad("top_logprobs", f"got {top}: only 0 (the sampled tokens alone) is supported")
    prompts = [_encode(model, text, "messages")]
    lengths = _lengths(body, model, prompts, "messages")
    stop = settings.pop("stop")
    ends = () if _flag(body, "ignore_eos") else model.chat.end_of_turn_ids
    if (
        not ends and not _flag(body, "ignore_eos") and model.chat.end_of_turn_text.strip()
    ):  # no one id: cut at its text
        stop = (*stop, model.chat.end_of_turn_text)
    return Asked(
        True,
        tuple(prompts),
        lengths,
        stop=stop,
        ends=ends,
        logprobs=_flag(body, "logprobs"),
        **settings,
    )
