"""The ASGI app (starlette): the OpenAI API's routes over the engine.

``GET /v1/models``, ``POST /v1/completions`` and ``POST /v1/chat/completions``, with or without
``stream`` (server-sent events, ``data: [DONE]`` last). Every error has OpenAI's JSON shape
(``{"error": {"message", "type", "param", "code"}}``); a full engine answers 503 with
``Retry-After``; with an API key, a request without it answers 401.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .._data.run_tokenizer import decode_lenient
from .engine import Engine, Piece, Sequence, draw_key
from .requests import ApiError, Asked, Model, chat, completion
from .text import Text

RETRY_AFTER_S = 1  # what a 503 tells the client to wait before trying again


@dataclasses.dataclass(frozen=True)
class Service:
    """What the app serves: the model, its engine and the API key (None: no key asked)."""

    model: Model
    engine: Engine
    api_key: str | None
    created: int


def error_response(err: ApiError) -> JSONResponse:
    headers = {"Retry-After": str(RETRY_AFTER_S)} if err.status == 503 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


def make_app(service: Service) -> Starlette:
    """The app for ``service``: routes, the API key check and OpenAI-shaped errors."""

    def guarded(handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                _check_key(request, service.api_key)
                return await handler(request)  # type: ignore[no-any-return]
            except ApiError as err:
                return error_response(err)

        return endpoint

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [_model_card(service)]})

    async def completions(request: Request) -> Response:
        return await _generate(service, completion(await _body(request), service.model))

    async def chat_completions(request: Request) -> Response:
        return await _generate(service, chat(await _body(request), service.model))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = "not_found" if exc.status_code == 404 else None
        where = f"{request.method} {request.url.path}"
        routes = "GET /v1/models, POST /v1/completions, POST /v1/chat/completions"
        message = f"{where}: {exc.detail}. This server answers {routes}."
        return error_response(ApiError(exc.status_code, message, code=code))

    routes = [
        Route("/v1/models", guarded(models), methods=["GET"]),
        Route("/v1/completions", guarded(completions), methods=["POST"]),
        Route("/v1/chat/completions", guarded(chat_completions), methods=["POST"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


def _check_key(request: Request, key: str | None) -> None:
    if key is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, token = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
        what = "no API key" if not given else "a wrong API key"
        raise ApiError(
            401,
            f"The request has {what}: this server was started with --api-key (or "
            "GPT_SERVE_API_KEY). Send it as the header 'Authorization: Bearer KEY' (the openai "
            "client's api_key).",
            kind="invalid_request_error",
            code="invalid_api_key",
        )


def _model_card(service: Service) -> dict[str, Any]:
    return {
        "id": service.model.name,
        "object": "model",
        "created": service.created,
        "owned_by": "gpt-models",
        "max_model_len": service.model.max_len,
    }


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except ValueError as err:
        raise ApiError(
            400,
            f"The request body is not valid JSON ({err}); send a JSON object such as "
            '{"model": "NAME", "prompt": "Hello"}.',
        ) from err
    if not isinstance(body, dict):
        raise ApiError(400, f"The request body must be a JSON object, got {type(body).__name__}.")
    return body


def _sequences(asked: Asked, model: Model, emit: Callable[[Piece], object]) -> list[Sequence]:
    seed = asked.seed if asked.seed is not None else secrets.randbits(31)
    seqs = []
    for p, (ids, max_new) in enumerate(zip(asked.prompts, asked.max_tokens)):
        for j in range(asked.n):
            seqs.append(
                Sequence(
                    index=p * asked.n + j,
                    ids=ids,
                    max_new=max_new,
                    knobs=(asked.temperature, asked.top_p, asked.top_k),
                    key=draw_key(seed, j),
                    ends=asked.ends,
                    text=Text(model.tokenizer, asked.stop),
                    emit=emit,
                )
            )
    return seqs


async def _generate(service: Service, asked: Asked) -> Response:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Piece] = asyncio.Queue()
    seqs = _sequences(
        asked, service.model, lambda p: loop.call_soon_threadsafe(queue.put_nowait, p)
    )
    if not service.engine.submit(seqs):
        engine = service.engine
        raise ApiError(
            503,
            f"The server is full: {engine.load()} texts are decoding or waiting, the most it "
            f"holds (--max-batch {engine.slots} + --max-queue {engine.max_queue}). Retry after "
            f"{RETRY_AFTER_S} s.",
            kind="server_error",
            code="server_busy",
        )
    tok = service.model.tokenizer
    token_text = lambda t: decode_lenient(tok, np.asarray([t]))
    reply = _Reply(service.model.name, asked, len(seqs), token_text)
    if asked.stream:
        return StreamingResponse(
            _stream(reply, queue, seqs, service.engine), media_type="text/event-stream"
        )
    try:
        while not reply.done():
            reply.add(await queue.get())
    finally:
        service.engine.cancel(seqs)  # a client gone mid-request frees its slots
    return JSONResponse(reply.whole())


async def _stream(
    reply: _Reply, queue: asyncio.Queue[Piece], seqs: list[Sequence], engine: Engine
) -> AsyncIterator[str]:
    try:
        while not reply.done():
            piece = await queue.get()
            reply.add(piece)
            yield _event(reply.chunk(piece))
        if reply.asked.usage_chunk:
            yield _event(reply.frame([], usage=reply.usage()))
        yield "data: [DONE]\n\n"
    finally:
        engine.cancel(seqs)


def _event(data: dict[str, Any]) -> str:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n"


class _Reply:
    """The texts of one request as their pieces arrive, and the API's objects for them."""

    def __init__(
        self, name: str, asked: Asked, count: int, token_text: Callable[[int], str]
    ) -> None:
        self.name, self.asked, self.token_text = name, asked, token_text
        kind = "chatcmpl" if asked.chat else "cmpl"
        self.id, self.created = f"{kind}-{secrets.token_hex(12)}", int(time.time())
        self.texts = [""] * count
        self.tokens: list[list[tuple[int, float]]] = [[] for _ in range(count)]
        self.finish: list[str | None] = [None] * count
        self.counts = [(0, 0)] * count
        self.started = [False] * count

    def add(self, piece: Piece) -> None:
        i = piece.choice
        self.texts[i] += piece.text
        self.tokens[i] += piece.tokens
        self.finish[i] = piece.finish
        self.counts[i] = (piece.prompt_tokens, piece.completion_tokens)

    def done(self) -> bool:
        return all(f is not None for f in self.finish)

    def usage(self) -> dict[str, int]:
        # One prompt counted once, however many texts were drawn from it (as OpenAI counts n).
        prompt = sum(self.counts[p * self.asked.n][0] for p in range(len(self.asked.prompts)))
        made = sum(c for _, c in self.counts)
        return {"prompt_tokens": prompt, "completion_tokens": made, "total_tokens": prompt + made}

    def frame(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        kind = "chat.completion" if self.asked.chat else "text_completion"
        if self.asked.stream and self.asked.chat:
            kind += ".chunk"
        out = {"id": self.id, "object": kind, "created": self.created, "model": self.name}
        return out | {"choices": choices} | extra

    def _logprobs(self, tokens: list[tuple[int, float]] | tuple[tuple[int, float], ...]) -> Any:
        if not self.asked.logprobs:
            return None
        if self.asked.chat:
            return {
                "content": [
                    {
                        "token": self.token_text(t),
                        "logprob": lp,
                        "bytes": list(self.token_text(t).encode()),
                        "top_logprobs": [],
                    }
                    for t, lp in tokens
                ]
            }
        return {
            "tokens": [self.token_text(t) for t, _ in tokens],
            "token_logprobs": [lp for _, lp in tokens],
            "top_logprobs": None,
            "text_offset": None,
        }

    def _text(self, i: int, text: str, tokens: Any, finish: str | None) -> dict[str, Any]:
        if self.asked.chat:
            key = "delta" if self.asked.stream else "message"
            message: dict[str, str] = {"content": text}
            if not self.asked.stream or not self.started[i]:
                message = {"role": "assistant"} | message
            self.started[i] = True
            body: dict[str, Any] = {key: message}
        else:
            body = {"text": text}
        return {"index": i, **body, "logprobs": self._logprobs(tokens), "finish_reason": finish}

    def chunk(self, piece: Piece) -> dict[str, Any]:
        return self.frame([self._text(piece.choice, piece.text, piece.tokens, piece.finish)])

    def whole(self) -> dict[str, Any]:
        choices = [
            self._text(i, self.texts[i], self.tokens[i], self.finish[i])
            for i in range(len(self.texts))
        ]
        return self.frame(choices, usage=self.usage())
