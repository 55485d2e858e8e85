"""The documents of ``gpt prepare``'s inputs in chunks, read ahead in a thread, and its progress
line.

A reader thread parses the files (``sources.py``) into chunks of about ``chunk_bytes`` of text while
the main thread tokenizes the previous chunk; a killed prepare resumes from a (source, position)
cursor, so the chunks start there.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

from .._console import StatusLine
from .sources import PLAIN_TEXT, Document, Expect, SourceFile, read_documents


def chunks(
    sources: list[SourceFile],
    source: int,
    pos: int,
    text_field: str,
    chunk_bytes: int,
    expect: Expect = PLAIN_TEXT,
) -> Iterator[tuple[int, list[Document], bool]]:
    """(source index, documents, source finished) pieces of about ``chunk_bytes`` of text, from
    document ``pos`` of ``sources[source]`` on; every line of the kind ``expect`` says."""
    for i in range(source, len(sources)):
        skip = pos if i == source else 0
        docs: list[Document] = []
        size = 0
        for doc in read_documents(sources[i], text_field=text_field, skip=skip, expect=expect):
            docs.append(doc)
            size += len(doc.text)
            if size >= chunk_bytes:
                yield i, docs, False
                docs, size = [], 0
        yield i, docs, True


def threaded(it: Iterator[Any], depth: int = 2) -> Iterator[Any]:
    """``it`` run ahead in a thread (at most ``depth`` items), its exceptions re-raised here."""
    q: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def work() -> None:
        try:
            for item in it:
                if stop.is_set():
                    return
                q.put((True, item))
            q.put((False, None))
        except BaseException as err:  # handed to the consumer, which raises it
            q.put((False, err))

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        while True:
            ok, item = q.get()
            if not ok:
                if item is not None:
                    raise item
                return
            yield item
    finally:
        stop.set()


class Meter:
    """The progress line: documents, MB/s, tokens/s, share done, ETA (``_console.StatusLine``)."""

    def __init__(self, stream: TextIO | None, total_bytes: int, done_bytes: int) -> None:
        self.status = StatusLine(stream, total=max(total_bytes, 1))
        self.total, self.done = max(total_bytes, 1), done_bytes
        self.start = time.perf_counter()
        self.docs = self.text = self.tokens = 0
        self.in_file = 0

    def update(self, docs: int, text: int, tokens: int, finished_file: int) -> None:
        self.docs, self.text, self.tokens = self.docs + docs, self.text + text, self.tokens + tokens
        self.in_file += text
        if finished_file:
            self.done, self.in_file = self.done + finished_file, 0
        left = max(self.total - self.done - self.in_file, 0)
        if not self.status.due(self.total - left):
            return
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        rate = self.text / elapsed
        eta = left / rate if rate else float("inf")
        self.status.write(
            f"prepare: {self.docs:,} docs | {rate / 1e6:.1f} MB/s | "
            f"{self.tokens / elapsed:,.0f} tokens/s | "
            f"{100 * (self.total - left) / self.total:.0f}% | "
            f"ETA {eta:,.0f} s"
        )

    def close(self) -> None:
        if self.docs:
            elapsed = max(time.perf_counter() - self.start, 1e-9)
            self.status.write(
                f"prepare: {self.docs:,} docs, {self.tokens:,} tokens in {elapsed:.1f} s "
                f"({self.text / elapsed / 1e6:.1f} MB/s)"
            )
        self.status.close()
