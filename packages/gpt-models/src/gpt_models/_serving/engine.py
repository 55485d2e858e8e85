"""The engine: one thread that owns the KV cache and decodes every sequence in it, a step at a
time, while requests add sequences from the server's event loop (continuous batching).

Between two steps the engine takes waiting sequences into free slots (a prefill each), then runs
one step of every slot. A sequence leaves its slot when it ends (an end token, a stop string,
its ``max_tokens``, the context) or its client has gone; the next waiting one takes the slot at
the next step. What a sequence produces goes back as :class:`Piece` s through its ``emit``
callback (called on the engine's thread). At most ``slots + max_queue`` sequences are held:
:meth:`Engine.submit` refuses the rest, so the server answers 503 instead of queueing without
bound.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TextIO

import jax
import jax.numpy as jnp
import numpy as np

from .decode import Knobs, empty_cache, move, prefill, step
from .text import Text

_MIN_BUCKET = 16  # the shortest prompt bucket: prompts are padded to a power of two from here


class Piece(NamedTuple):
    """New text of text ``choice`` of a request; ``finish`` (``stop``, ``length``, ``error``) once
    it ended. ``tokens``: the ids produced since the last piece, with their log-probabilities."""

    choice: int
    text: str
    tokens: tuple[tuple[int, float], ...]
    finish: str | None
    prompt_tokens: int
    completion_tokens: int


@dataclasses.dataclass(eq=False)
class Sequence:
    """One text to produce: its prompt ids, its settings, where its pieces go."""

    index: int
    ids: tuple[int, ...]
    max_new: int
    knobs: tuple[float, float, int]  # temperature, top_p, top_k
    key: np.ndarray  # the key data of its draws (:func:`draw_key`)
    ends: tuple[int, ...]
    text: Text
    emit: Callable[[Piece], object]
    made: int = 0
    slot: int = -1
    cancelled: bool = False
    pending: list[tuple[int, float]] = dataclasses.field(default_factory=list)


def bucket(length: int, max_len: int) -> int:
    """The padded length of a prompt of ``length`` tokens: the next power of two (at least
    16), capped at ``max_len``."""
    return min(max(_MIN_BUCKET, 1 << (length - 1).bit_length()), max_len)


def step_size(busy: int, slots: int) -> int:
    """The slots a step decodes for ``busy`` busy ones: the next power of two, at most
    ``slots``."""
    return min(1 << max(busy - 1, 0).bit_length(), slots)


class Engine:
    """The decoding loop of ``gpt serve`` (see the module docstring).

    The busy sequences hold the first slots, in ``active`` (a sequence's ``slot`` is its index
    there): a step decodes only them, rounded up to a power of two. A sequence that ends gives its
    slot to the last busy one (its cache rows are moved).
    """

    def __init__(self, cfg: Any, weights: Any, limits: tuple[int, int, int], log: TextIO) -> None:
        self.cfg, self.weights, self.log = cfg, weights, log
        self.slots, self.max_len, self.max_queue = limits
        self.cache = empty_cache(weights, cfg, self.slots, self.max_len)
        self.active: list[Sequence] = []
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.cond = threading.Condition()
        self.stopping = False
        s = self.slots
        self.tokens, self.positions = np.zeros(s, np.int32), np.zeros(s, np.int32)
        self.made = np.zeros(s, np.int32)
        self.temperature, self.top_p = np.zeros(s, np.float32), np.ones(s, np.float32)
        self.top_k = np.zeros(s, np.int32)
        self.keys = np.zeros((s, *jax.random.key_data(jax.random.key(0)).shape), np.uint32)
        self.compiled: set[str] = set()
        self.thread = threading.Thread(target=self._run, name="gpt-serve-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """End the loop once no sequence is held (the server has drained its requests)."""
        with self.cond:
            self.stopping = True
            self.cond.notify()
        self.thread.join()

    def load(self) -> int:
        """Sequences held: decoding and waiting."""
        return len(self.waiting) + len(self.active)

    def submit(self, seqs: list[Sequence]) -> bool:
        """Hold ``seqs`` for decoding; False (nothing held) when that would pass the bound."""
        with self.cond:
            if self.stopping or self.load() + len(seqs) > self.slots + self.max_queue:
                return False
            self.waiting.extend(seqs)
            self.cond.notify()
        return True

    def cancel(self, seqs: list[Sequence]) -> None:
        """Drop ``seqs`` (their client has gone): their slots free up at the next step."""
        for s in seqs:
            s.cancelled = True

    def warm_up(self) -> None:
        """Compile every step size, the slot move and the shortest prompt bucket before the
        server takes requests (a compile while serving would stall every sequence)."""
        k = 1
        while True:
            self._note("step", k, functools.partial(self._step, k))
            if k == self.slots:
                break
            k = min(2 * k, self.slots)
        self.cache = move(self.cache, jnp.int32(0), jnp.int32(0))
        self._note("prefill", bucket(1, self.max_len), lambda: self._prefill_at(0, (0,)))

    def _run(self) -> None:
        while True:
            with self.cond:
                while not self.waiting and not self.active and not self.stopping:
                    self.cond.wait()
                if self.stopping and not self.waiting and not self.active:
                    return
                taken = self._take()
            try:
                for seq in taken:
                    self._start(seq)
                if self.active:
                    self._advance()
            except Exception as err:  # a failed program fails the sequences it held, not the server
                print(f"gpt serve: decoding failed: {type(err).__name__}: {err}", file=self.log)
                for seq in list(self.active):
                    self._finish(seq, "error")
                # The programs donate the cache: after a failure it may be gone.
                self.cache = empty_cache(self.weights, self.cfg, self.slots, self.max_len)

    def _take(self) -> list[Sequence]:
        taken = []
        while len(self.active) < self.slots and self.waiting:
            seq = self.waiting.popleft()
            if seq.cancelled:
                continue
            seq.slot = len(self.active)
            self.active.append(seq)
            taken.append(seq)
        return taken

    def _start(self, seq: Sequence) -> None:
        """Prefill ``seq`` into its slot: its first token."""
        slot = seq.slot
        self.temperature[slot], self.top_p[slot], self.top_k[slot] = seq.knobs
        self.keys[slot] = seq.key
        size = bucket(len(seq.ids), self.max_len)
        token, logprob = self._note("prefill", size, lambda: self._prefill_at(slot, seq.ids))
        self._accept(seq, int(token), float(logprob))

    def _prefill_at(self, slot: int, ids: tuple[int, ...]) -> tuple[Any, Any]:
        padded = np.zeros((1, bucket(len(ids), self.max_len)), np.int32)
        padded[0, : len(ids)] = ids
        knobs = Knobs(*(jnp.asarray(a[slot]) for a in self._knob_arrays()))
        token, logprob, self.cache = prefill(
            self.cfg, self.weights, self.cache, jnp.int32(slot), padded, jnp.int32(len(ids)), knobs
        )
        return jax.device_get((token, logprob))

    def _knob_arrays(self) -> tuple[np.ndarray, ...]:
        return self.temperature, self.top_p, self.top_k, self.keys

    def _advance(self) -> None:
        k = step_size(len(self.active), self.slots)
        busy = list(self.active)  # index i: the slot the step decoded it in
        tokens, logprobs = self._note("step", k, lambda: self._step(k))
        for i, seq in enumerate(busy):
            self._accept(seq, int(tokens[i]), float(logprobs[i]))

    def _step(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        knobs = Knobs(*(jnp.asarray(a[:k]) for a in self._knob_arrays()))
        rows = (self.tokens[:k], self.positions[:k])
        new, logprobs, self.cache = step(
            self.cfg, self.weights, self.cache, *rows, knobs, self.made[:k]
        )
        return jax.device_get((new, logprobs))  # type: ignore[no-any-return]

    def _note(self, program: str, size: int, run: Callable[[], Any]) -> Any:
        """Run ``run``; the first call of each program and size (a compile) is logged."""
        name = f"{program} {size}"
        if name in self.compiled:
            return run()
        start = time.perf_counter()
        out = run()
        self.compiled.add(name)
        what = f"{size} slots" if program == "step" else f"prompts of up to {size} tokens"
        print(
            f"gpt serve: compiled the {program} program ({what}) in "
            f"{time.perf_counter() - start:.1f} s",
            file=self.log,
            flush=True,
        )
        return out

    def _accept(self, seq: Sequence, token: int, logprob: float) -> None:
        """``seq`` drew ``token``: give out its text, and end it or feed the token back."""
        if seq.cancelled:
            self._release(seq)
            return
        seq.made += 1
        ended = token in seq.ends
        seq.pending.append((token, logprob))
        piece = "" if ended else seq.text.add(token)
        if ended or seq.text.stopped:
            self._finish(seq, "stop", piece)
        elif seq.made >= seq.max_new:
            self._finish(seq, "length", piece)
        else:
            if piece:
                self._emit(seq, piece, None)
            slot = seq.slot
            self.tokens[slot], self.made[slot] = token, seq.made
            self.positions[slot] = len(seq.ids) + seq.made - 1

    def _emit(self, seq: Sequence, text: str, finish: str | None) -> None:
        tokens, seq.pending = tuple(seq.pending), []
        seq.emit(Piece(seq.index, text, tokens, finish, len(seq.ids), seq.made))

    def _finish(self, seq: Sequence, why: str, piece: str = "") -> None:
        self._emit(seq, piece + seq.text.flush(), why)
        self._release(seq)

    def _release(self, seq: Sequence) -> None:
        """Free ``seq``'s slot: the last busy sequence moves into it."""
        slot, last = seq.slot, self.active[-1]
        if last is not seq:
            self.cache = move(self.cache, jnp.int32(last.slot), jnp.int32(slot))
            for a in (self.tokens, self.positions, self.made, *self._knob_arrays()):
                a[slot] = a[last.slot]
            last.slot = slot
        with self.cond:
            self.active[slot] = last
            self.active.pop()
        end = len(self.active)
        self.tokens[end] = self.positions[end] = self.made[end] = 0


def draw_key(seed: int, index: int) -> np.ndarray:
    """The key data of text ``index`` (of ``n``) of a request with ``seed``: text 0 draws as
    ``gpt sample --seed`` does; the others from keys folded from it."""
    key = jax.random.key(seed)
    return np.asarray(jax.random.key_data(key if index == 0 else jax.random.fold_in(key, index)))
