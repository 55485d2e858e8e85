"""The text one sequence has produced so far, given out in pieces that never change afterwards.

A piece is held back while it could still change: the last bytes of an unfinished UTF-8 character
(the byte tokenizer decodes them as U+FFFD until the character is whole), and the end of the text
that could be the start of a stop string. A stop string found ends the text just before it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._data.run_tokenizer import decode_lenient


class Text:
    """The decoded text of one sequence, and how much of it has been given out."""

    def __init__(self, tokenizer: Any, stop: tuple[str, ...]) -> None:
        self.tokenizer, self.stop = tokenizer, stop
        self.ids: list[int] = []
        self.text = ""
        self.sent = 0
        self.stopped = False

    def add(self, token: int) -> str:
        """Append ``token``; the new text that is final (may be empty). After a stop string:
        ``stopped`` is set and the text ends before it."""
        self.ids.append(token)
        # Decoded whole: a character (or a merge) may span tokens.
        self.text = decode_lenient(self.tokenizer, np.asarray(self.ids))
        cut = min((i for i in (self.text.find(s) for s in self.stop) if i >= 0), default=-1)
        if cut >= 0:
            self.text, self.stopped = self.text[:cut], True
            return self.flush()
        end = len(self.text.rstrip("\ufffd")) if self.text.endswith("\ufffd") else len(self.text)
        end -= _partial_stop(self.text[:end], self.stop)
        if end <= self.sent:
            return ""
        piece, self.sent = self.text[self.sent : end], end
        return piece

    def flush(self) -> str:
        """The text not given out yet, all of it (the sequence has ended)."""
        piece, self.sent = self.text[self.sent :], len(self.text)
        return piece


def _partial_stop(text: str, stop: tuple[str, ...]) -> int:
    """Length of the longest end of ``text`` that is the start of a stop string (held back)."""
    longest = 0
    for s in stop:
        for n in range(min(len(s) - 1, len(text)), longest, -1):
            if text.endswith(s[:n]):
                longest = n
                break
    return longest
