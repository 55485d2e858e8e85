"""Text from trained params: a prompt continued, or answered as a user turn of the run's chat
template (``gpt sample``, a finished run's ``sample.txt``)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, TextIO

import jax
import numpy as np

from .._config.schema import Config, SampleConfig
from .._data.byte_tokenizer import ByteTokenizer
from .._data.chat_format import ChatFormat, sampling_format
from .._data.corpus import Tokenizer
from .._data.run_tokenizer import decode_lenient
from .._distributed.mesh import on_one_device
from .._errors import DataError
from .._model.generate import generate


class Settings(NamedTuple):
    """:class:`Sampling` with every setting given (``None`` top-k/top-p: no cut)."""

    prompt: str
    max_new_tokens: int
    temperature: float
    top_k: int | None
    top_p: float | None
    seed: int


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How to sample one text: each setting left ``None`` is the run's ``[sample]`` value.

    ``top_k`` 0 and ``top_p`` 1 mean no cut; ``temperature`` 0 is greedy.
    """

    prompt: str | None = None
    max_new_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int = 0

    def resolved(self, s: SampleConfig) -> Settings:
        """Every setting given: the ``None`` ones from ``s`` (no cut as ``None`` top-k/top-p)."""
        return Settings(
            prompt=s.prompt if self.prompt is None else self.prompt,
            max_new_tokens=s.max_new_tokens if self.max_new_tokens is None else self.max_new_tokens,
            temperature=s.temperature if self.temperature is None else self.temperature,
            top_k=(s.top_k or None) if self.top_k is None else self.top_k,
            top_p=(s.top_p if s.top_p < 1 else None) if self.top_p is None else self.top_p,
            seed=self.seed,
        )


# The run's own [sample] settings, nothing changed: the default of the functions below.
PLAIN = Sampling()


def sample_text(
    params: Any,
    cfg: Config,
    sampling: Sampling = PLAIN,
    *,
    tokenizer: Tokenizer | None = None,
    chat: ChatFormat | None = None,
) -> str:
    """Generate text with ``tokenizer`` (default bytes), as ``sampling`` says (defaults from the
    config's ``[sample]``).

    Without ``chat``: the prompt and its continuation, up to the tokenizer's end-of-text token. With
    a run's ``chat`` format: the prompt is one user turn, generation stops at the end of the
    assistant's turn, and the text is the reply.
    """
    return sample_reply(params, cfg, sampling, tokenizer=tokenizer, chat=chat)[0]


def end_of_run_sample(
    params: Any, cfg: Config, tokenizer: Tokenizer, chat: ChatFormat | None, stream: TextIO
) -> str:
    """The text of a finished run's ``sample.txt``: ``sample.prompt`` answered as a user turn on
    chat data, else continued. A template that cannot write that turn does not fail the finished
    run: the prompt is continued as plain text, with a note on ``stream``."""
    chat = sampling_format(chat, cfg)  # a chat model's template kept for exports alone: plain
    try:
        return sample_text(params, cfg, tokenizer=tokenizer, chat=chat)
    except DataError as err:
        print(f"note: sample.txt continues sample.prompt as plain text: {err}", file=stream)
        return sample_text(params, cfg, tokenizer=tokenizer)


def sample_reply(
    params: Any,
    cfg: Config,
    sampling: Sampling = PLAIN,
    *,
    tokenizer: Tokenizer | None = None,
    chat: ChatFormat | None = None,
    raw: bool = False,
) -> tuple[str, bool]:
    """:func:`sample_text`'s text, and whether it ended before ``max_new_tokens``: a chat reply at
    its end-of-turn token, other text at the tokenizer's end-of-text token (left out of the
    text, as transformers' ``generate`` stops at an export's ``eos_token_id``). ``raw``: no stop."""
    tok = tokenizer or ByteTokenizer()
    ids, n = sample_lengths(cfg, tok, sampling.prompt, sampling.max_new_tokens, chat)
    got = sampling.resolved(cfg.sample)
    ends = chat.end_of_turn_ids if chat is not None else stop_ids(tok, raw)
    out = generate(
        on_one_device(params),
        ids,
        cfg.model,
        max_new_tokens=n,
        temperature=got.temperature,
        top_k=got.top_k,
        top_p=got.top_p,
        key=jax.random.key(got.seed),
        stop_token=ends[0] if ends else None,
    )
    new = np.asarray(out)[len(ids) :]
    hit = np.flatnonzero(np.isin(new, ends))
    ended = bool(len(hit))
    if chat is None:
        return decode_lenient(tok, np.asarray(out)[: len(ids) + hit[0] if ended else None]), ended
    return chat.reply(decode_lenient(tok, new[: hit[0]] if ended else new), ended)


def stop_ids(tok: Tokenizer, raw: bool = False) -> tuple[int, ...]:
    """Where text that is not a chat reply stops: the tokenizer's end-of-text id (none with
    ``raw``, or for a tokenizer file that has none)."""
    return () if raw or tok.eot_id is None else (int(tok.eot_id),)


def sample_lengths(
    cfg: Config,
    tok: Tokenizer,
    prompt: str | None,
    max_new_tokens: int | None,
    chat: ChatFormat | None = None,
) -> tuple[Any, int]:
    """The prompt's token ids and the number of tokens to add, as ``sample_text`` takes them:
    ``max_new_tokens`` (default ``sample.max_new_tokens``) capped so that the prompt and the new
    tokens fit in ``model.seq_len``. With ``chat`` the prompt is written as one user turn."""
    text = cfg.sample.prompt if prompt is None else prompt
    ids = tok.encode(text if chat is None else chat.prompt(text))
    if len(ids) == 0:
        what = f"--prompt {prompt!r}" if prompt is not None else "sample.prompt"
        raise ValueError(
            f"{what} is empty, but sampling continues a text: it needs at least one token. "
            "Give a prompt of at least one character, e.g. --prompt ' ' or --prompt 'The'."
        )
    room = cfg.model.seq_len - len(ids)
    if room < 1:
        what = "The prompt" if prompt is not None else "sample.prompt"
        turn = "" if chat is None else ", written as a user turn of the run's chat template,"
        raise ValueError(
            f"{what}{turn} is {len(ids)} tokens long, but the model's context (model.seq_len) is "
            f"{cfg.model.seq_len} tokens, and it needs room for at least one new token. Use a "
            f"prompt of at most {cfg.model.seq_len - 1} tokens (for bytes, characters)."
        )
    # Capped (not refused): the prompt and the new tokens together fill at most the context.
    return ids, min(cfg.sample.max_new_tokens if max_new_tokens is None else max_new_tokens, room)
