"""Chat and completion examples as token ids and a loss mask (1 = the loss counts the token).

An example is rendered to text with the character spans the loss counts, then tokenized: a token
is counted when any of its characters is (the tokenizer's offsets map tokens to characters; the
byte tokenizer's tokens are the UTF-8 bytes of each character). The first token of an example is
never counted: in a packed row it would be predicted from the example before it.

Rendering, by kind:

- chat, with the tokenizer's chat template (``chat_template.py``): the conversation's text. The
  counted text of an assistant turn is found by rendering the conversation up to the turn before
  it and up to it (the text the turn adds), and once more with a marker in place of its content
  (which splits that text into the header before the content and the end-of-turn text after it):
  the content and the end-of-turn text are counted, the header is not.
- chat, without a template (the plain template)::

      <|system|>\\n{content}\\n      <|user|>\\n{content}\\n      <|assistant|>\\n{content}{EOT}

  where EOT is the tokenizer's end-of-text token; assistant content and its EOT are counted.
- completion: ``{prompt}{completion}{EOT}``; the completion and EOT are counted.

An assistant turn with OpenAI's ``"weight": 0`` is rendered like the others and not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._errors import DataError
from .chat_template import CONTENT_MARK as _MARK
from .chat_template import ChatTemplate
from .encoder import Encoder


class ExampleEncoder:
    """Turns the examples of ``gpt prepare`` into ``(ids, mask)`` pairs, one kind per store."""

    def __init__(self, kind: str, enc: Encoder, template: ChatTemplate | None) -> None:
        self.kind, self.enc, self.template = kind, enc, template
        self.eot = enc.eot_text
        if enc.tok is not None and (kind in ("completion", "preference") or template is None):
            got = enc.tok.encode(self.eot, add_special_tokens=False).ids
            if got != [enc.eot_id]:
                raise DataError(
                    f"The tokenizer's end-of-text token {self.eot!r} (id {enc.eot_id}) is not one "
                    f"of its added tokens: its text tokenizes to {got}, so the plain template "
                    "cannot end a turn with it. Use a tokenizer.json that lists it under "
                    '"added_tokens" (as Hugging Face tokenizers do), or one with a chat template.'
                )

    def encode(
        self, examples: Sequence[Any], wheres: Sequence[str]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(ids uint32, mask uint8)`` per example; ``wheres`` name them (``file:line``)."""
        rendered = [self._render(ex, w) for ex, w in zip(examples, wheres, strict=True)]
        return self._tokenize([t for t, _ in rendered], [s for _, s in rendered])

    def encode_pairs(
        self, pairs: Sequence[Any], wheres: Sequence[str]
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Preference pairs (``preference.check_pair``) as ``(ids, mask, lengths)``: the chosen
        example's ids then the rejected one's, and their two lengths; an answer's own turn (and
        its end) is counted, the prompt is not."""
        rendered = []
        for pair, where in zip(pairs, wheres, strict=True):
            kind, answers = (
                ("completion", [(pair[1], a) for a in pair[2:]])
                if pair[0] == "text"
                else ("chat", list(pair[1:]))
            )
            rendered += [self._render(a, where, kind) for a in answers]
        done = self._tokenize([t for t, _ in rendered], [s for _, s in rendered])
        return [
            (
                np.concatenate([c[0], r[0]]),
                np.concatenate([c[1], r[1]]),
                np.array([len(c[0]), len(r[0])], np.uint32),
            )
            for c, r in zip(done[0::2], done[1::2], strict=True)
        ]

    def _render(
        self, example: Any, where: str, kind: str = ""
    ) -> tuple[str, list[tuple[int, int]]]:
        if (kind or self.kind) == "completion":
            prompt, completion = example
            end = len(prompt) + len(completion) + len(self.eot)
            return prompt + completion + self.eot, [(len(prompt), end)]
        if self.template is None:
            text, spans = self._plain(example)
        else:
            turns = [{"role": m["role"], "content": m["content"]} for m in example]
            text, spans = _template_spans(self.template, turns, where)
        # One span per assistant turn, in order; OpenAI's "weight": 0 leaves the turn uncounted.
        weights = [m.get("weight", 1) for m in example if m["role"] == "assistant"]
        return text, [span for span, w in zip(spans, weights, strict=True) if w]

    def _plain(self, messages: list[dict[str, str]]) -> tuple[str, list[tuple[int, int]]]:
        text, spans = "", []
        for m in messages:
            text += f"<|{m['role']}|>\n"
            if m["role"] == "assistant":
                spans.append((len(text), len(text) + len(m["content"]) + len(self.eot)))
                text += m["content"] + self.eot
            else:
                text += m["content"] + "\n"
        return text, spans

    def _tokenize(
        self, texts: list[str], spans: list[list[tuple[int, int]]]
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        if self.enc.tok is None:
            for text, sp in zip(texts, spans, strict=True):
                ids = np.frombuffer(text.encode("utf-8", errors="replace"), np.uint8)
                mask = np.repeat(_char_mask(len(text), sp), _utf8_lengths(text))
                out.append(_finish(ids.astype(np.uint32), mask))
            return out
        encs = self.enc.tok.encode_batch(texts, add_special_tokens=False)
        for text, sp, e in zip(texts, spans, encs, strict=True):
            counted = np.concatenate([[0], np.cumsum(_char_mask(len(text), sp), dtype=np.int64)])
            offsets = np.array(e.offsets, np.int64).reshape(-1, 2)
            hit = counted[offsets[:, 1]] > counted[offsets[:, 0]]
            out.append(_finish(np.array(e.ids, np.uint32), hit.astype(np.uint8)))
        return out


def _finish(ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mask = mask.astype(np.uint8)
    if len(mask):
        mask[0] = 0  # nothing in the example comes before its first token
    return ids, mask


def _char_mask(n: int, spans: list[tuple[int, int]]) -> np.ndarray:
    mask = np.zeros(n, np.uint8)
    for a, b in spans:
        mask[a:b] = 1
    return mask


def _utf8_lengths(text: str) -> np.ndarray:
    """Bytes per character as ``str.encode("utf-8", errors="replace")`` writes them."""
    cp = np.frombuffer(text.encode("utf-32-le", errors="surrogatepass"), np.uint32)
    lengths = 1 + (cp >= 0x80) + (cp >= 0x800) + (cp >= 0x10000)
    lengths[(cp >= 0xD800) & (cp < 0xE000)] = 1  # a lone surrogate is replaced by "?"
    return lengths.astype(np.int64)


def _template_spans(
    template: ChatTemplate, messages: list[dict[str, str]], where: str
) -> tuple[str, list[tuple[int, int]]]:
    full = template.render(messages, where)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        before = template.render(messages[:i], where) if i else _render_empty(template, where)
        through = template.render(messages[: i + 1], where)
        marked = template.render([*messages[:i], {"role": "assistant", "content": _MARK}], where)
        if not (
            full.startswith(through) and through.startswith(before) and marked.startswith(before)
        ):
            raise DataError(
                f"The chat template in {template.file} renders the first {i + 1} messages of "
                f"{where} as text that does not begin the text of the whole conversation (it "
                "renders earlier turns differently once later ones follow), so the assistant "
                "turn's "
                "tokens cannot be told apart for the loss mask. Use a template whose text for the "
                "first turns begins the text of the whole conversation, or move "
                f"{template.file.name} "
                "away to use the plain template (docs/gpt-models/fine-tuning.md)."
            )
        head, _, tail = marked[len(before) :].partition(_MARK)
        added = through[len(before) :]
        if _MARK not in marked or not (added.startswith(head) and added.endswith(tail)):
            raise DataError(
                f"The chat template in {template.file} does not render the assistant content of "
                f"messages[{i}] of {where} as given (it leaves out or rewrites it), so its tokens "
                "cannot be found for the loss mask. Fix the template, or move "
                f"{template.file.name} "
                "away to use the plain template (docs/gpt-models/fine-tuning.md)."
            )
        spans.append((len(before) + len(head), len(through)))
    return full, spans


def _render_empty(template: ChatTemplate, where: str) -> str:
    """The text of no messages (a default system prompt, a BOS), or "" where the template
    refuses."""
    try:
        return template.render([], where)
    except DataError:  # e.g. a template that reads messages[0]
        return ""
