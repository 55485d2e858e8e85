"""Using trained params: the validation loss on fixed windows, and text continued from a prompt."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from .._config.schema import Config
from .._data.byte_tokenizer import ByteTokenizer
from .._data.chat_format import ChatFormat
from .._data.corpus import Dataset, Tokenizer, eval_batches, load_dataset
from .._data.mixture import MixedTokens
from .._data.run_tokenizer import decode_lenient, run_tokenizer
from .._distributed.mesh import place_batch, single_device_mesh
from .._distributed.processes import host_value
from .._errors import DataError
from .._model.generate import generate
from .._model.lora import model_of
from .._model.loss import is_packed, loss_weights
from .._runs.folders import load_run
from .step import compile_eval_step


class Evaluator:
    """Mean loss over the first ``train.eval_batches`` validation windows, in ``self.unit``:
    nats per byte, or nats per token when the data's bytes are unknown (a ``.bin`` without a
    sidecar).

    A mixture (``data.sources``) is evaluated on each source's own validation split (the same
    windows per source); the call returns the weighted mean ``sum_k w_k * loss_k`` (each in the
    unit; the weights normalised) and ``by_source`` keeps each source's loss.

    Packed batches (a store of chat or prompt/completion examples): the call returns the masked
    loss (the answers only) and ``all_tokens`` keeps the loss of every token of the examples
    (prompts too); each is its totals' ratio over all the batches, per byte of the tokens it
    counts.
    """

    def __init__(self, cfg: Config, mesh: Mesh, params: Any, dataset: Dataset,
                 step: Any = None) -> None:  # fmt: skip
        t = cfg.train
        self.fn = step if step is not None else compile_eval_step(cfg, mesh, params)
        self.mesh = mesh
        self.rows = t.batch_size // t.grad_accum
        parts = dataset.parts or (dataset,)
        self.batches = [
            eval_batches(
                p.val, n_batches=t.eval_batches, batch_size=self.rows,
                seq_len=cfg.model.seq_len, process_index=jax.process_index(),
                process_count=jax.process_count(),
            )
            for p in parts
        ]  # fmt: skip
        mixed = dataset.train if isinstance(dataset.train, MixedTokens) else None
        self.names = mixed.names if mixed is not None else ()
        self.weights = mixed.weights if mixed is not None else np.zeros(0)
        # Unknown bytes (a .bin without a sidecar, in any source): the losses stay per token.
        known = dataset.bytes_per_token is not None
        # Per part: the bytes per token of the loss, and of packed batches' all-tokens loss.
        self.bytes_per_token = [
            (1.0, 1.0) if not known
            else _counted_bytes(dataset.tokenizer, b) if is_packed(b)
            else (p.bytes_per_token or 1.0,) * 2
            for p, b in zip(parts, self.batches, strict=True)
        ]  # fmt: skip
        self.unit = "nats/byte" if known else "nats/token"
        self.source = dataset.source
        self.windows = (len(jax.tree.leaves(self.batches[0])[0]), self.rows, cfg.model.seq_len)
        self.by_source: dict[str, float] = {}
        self.all_tokens: float | None = None  # packed batches: the loss of every example token

    def __call__(self, params: Any) -> float:
        losses, every = [], []
        for batches, bpt in zip(self.batches, self.bytes_per_token, strict=True):
            n = len(jax.tree.leaves(batches)[0])
            values = [self.fn(params, place_batch(jax.tree.map(lambda a, i=i: a[i], batches),
                                                  self.mesh)) for i in range(n)]  # fmt: skip
            values = [host_value(x) for x in values]
            if not is_packed(batches):
                losses.append(float(np.mean(values)) / bpt[0])
                continue
            total = {k: float(sum(np.asarray(v[k]) for v in values)) for k in values[0]}
            losses.append(total["answers"] / max(total["answer_tokens"], 1.0) / bpt[0])
            every.append(total["all_tokens"] / max(total["example_tokens"], 1.0) / bpt[1])
        if not self.names:
            self.all_tokens = every[0] if every else None
            return losses[0]
        self.by_source = dict(zip(self.names, losses, strict=True))
        return float(np.dot(self.weights, losses))

    def metrics(self, loss: float) -> dict[str, np.ndarray]:
        """``val_loss`` (``loss``, this call's result), a mixture's ``val_loss/<source>`` and
        packed batches' ``val_loss/all_tokens``."""
        out = {"val_loss": np.array([loss], np.float32)}
        if self.all_tokens is not None:
            out["val_loss/all_tokens"] = np.array([self.all_tokens], np.float32)
        out |= {f"val_loss/{k}": np.array([v], np.float32) for k, v in self.by_source.items()}
        return out


def _counted_bytes(tok: Tokenizer, batches: Any) -> tuple[float, float]:
    """Bytes per counted target of packed eval batches: of the answers, of every example token.

    Per the tokens each loss counts, not the split's average: answers and prompts can differ.
    """
    flat = {k: np.asarray(v).reshape(-1, v.shape[-1]) for k, v in batches.items()}
    targets = flat["tokens"][:, 1:]
    if isinstance(tok, ByteTokenizer):
        lengths = np.ones(targets.shape)
    else:
        lengths = tok.byte_lengths[np.minimum(targets, tok.vocab_size - 1)]
    out = []
    for w in (np.asarray(x, np.float64) for x in loss_weights(flat)):
        counted = w.sum()
        out.append(float((lengths * w).sum() / counted) if counted else 1.0)
    return out[0], out[1]


@dataclasses.dataclass(frozen=True)
class ValLoss:
    """A run's validation loss: the value, its unit, the data and windows it was measured on.

    For a mixture, ``loss`` is the weighted mean and ``by_source`` holds ``(name, weight, loss)``
    of each source. For a run on chat or prompt/completion examples ``loss`` counts the answers
    only (the loss mask) and ``all_tokens`` every token of the examples; else it is None.
    """

    loss: float
    unit: str
    step: int
    source: str
    windows: tuple[int, int, int]  # batches, rows per batch, tokens per row
    by_source: tuple[tuple[str, float, float], ...] = ()
    all_tokens: float | None = None

    def describe(self) -> str:
        """``val_loss 2.535940 nats/byte`` with the data, windows and step it measured."""
        batches, rows, seq = self.windows
        per = " per source" if self.by_source else ""
        mean = ", the weighted mean of its sources" if self.by_source else ""
        masked = "" if self.all_tokens is None else " of the answers (the loss mask)"
        lines = [
            f"val_loss {self.loss:.6f} {self.unit}{masked}{mean} on the validation split of "
            f"{self.source} ({batches} batch(es) of {rows} x {seq} tokens{per}, "
            f"train.eval_batches), step {self.step}"
        ]
        if self.all_tokens is not None:
            lines.append(
                f"val_loss/all_tokens {self.all_tokens:.6f} {self.unit} of every token of the "
                "examples (prompts too)"
            )
        lines += [
            f"val_loss/{name} {loss:.6f} {self.unit} (weight {weight:.3g})"
            for name, weight, loss in self.by_source
        ]
        return "\n".join(lines)


def evaluate_run(run_dir: str | Path, config: Config | None = None, *, step: Any = None) -> ValLoss:
    """Validation loss of a run's newest checkpoint on its fixed val windows (what training logs).

    ``step``: the eval step compiled ahead of time (``plan_eval(...).compiled``), else compiled here.
    """
    cfg, params, at = load_run(run_dir, config)
    mesh = single_device_mesh()
    dataset = load_dataset(
        cfg.data, seq_len=cfg.model.seq_len, vocab_size=cfg.model.vocab_size,
        tokenizer=run_tokenizer(run_dir, cfg),
    )  # fmt: skip
    evaluator = Evaluator(cfg, mesh, params, dataset, step)
    loss = evaluator(params)
    parts = tuple(
        (n, float(w), evaluator.by_source[n])
        for n, w in zip(evaluator.names, evaluator.weights, strict=True)
    )
    return ValLoss(
        loss, evaluator.unit, at, dataset.source, evaluator.windows, parts, evaluator.all_tokens
    )


def sample_text(params: Any, cfg: Config, *, prompt: str | None = None, max_new_tokens: int | None = None,
                temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                seed: int = 0, tokenizer: Tokenizer | None = None,
                chat: ChatFormat | None = None) -> str:  # fmt: skip
    """Generate text with ``tokenizer`` (default bytes); defaults come from the config's ``[sample]``.

    Without ``chat``: the prompt and its continuation. With a run's ``chat`` format: the prompt is
    one user turn, generation stops at the end of the assistant's turn, and the text is the reply.
    """
    return sample_reply(params, cfg, prompt=prompt, max_new_tokens=max_new_tokens,
                        temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                        tokenizer=tokenizer, chat=chat)[0]  # fmt: skip


def end_of_run_sample(params: Any, cfg: Config, tokenizer: Tokenizer, chat: ChatFormat | None,
                      stream: TextIO) -> str:  # fmt: skip
    """The text of a finished run's ``sample.txt``: ``sample.prompt`` answered as a user turn on
    chat data, else continued. A template that cannot write that turn does not fail the finished
    run: the prompt is continued as plain text, with a note on ``stream``."""
    try:
        return sample_text(params, cfg, tokenizer=tokenizer, chat=chat)
    except DataError as err:
        print(f"note: sample.txt continues sample.prompt as plain text: {err}", file=stream)
        return sample_text(params, cfg, tokenizer=tokenizer)


def sample_reply(params: Any, cfg: Config, *, prompt: str | None = None, max_new_tokens: int | None = None,
                 temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                 seed: int = 0, tokenizer: Tokenizer | None = None,
                 chat: ChatFormat | None = None) -> tuple[str, bool]:  # fmt: skip
    """:func:`sample_text`'s text, and whether a chat reply ended (True without ``chat``)."""
    s = cfg.sample
    tok = tokenizer or ByteTokenizer()
    ids, n = sample_lengths(cfg, tok, prompt, max_new_tokens, chat)
    ends = chat.end_of_turn_ids if chat is not None else ()
    out = generate(
        jax.tree.map(_on_one_device, params), ids, model_of(cfg), max_new_tokens=n,
        temperature=s.temperature if temperature is None else temperature,
        top_k=(s.top_k or None) if top_k is None else top_k,
        top_p=(s.top_p if s.top_p < 1 else None) if top_p is None else top_p,
        key=jax.random.key(seed), stop_token=ends[0] if ends else None,
    )  # fmt: skip
    if chat is None:
        return decode_lenient(tok, np.asarray(out)), True
    new = np.asarray(out)[len(ids) :]
    hit = np.flatnonzero(np.isin(new, ends))
    ended = bool(len(hit))
    return chat.reply(decode_lenient(tok, new[: hit[0]] if ended else new), ended)


def sample_lengths(cfg: Config, tok: Tokenizer, prompt: str | None, max_new_tokens: int | None,
                   chat: ChatFormat | None = None) -> tuple[Any, int]:  # fmt: skip
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


def _on_one_device(x: jax.Array) -> jax.Array:
    # Generation runs on one device: gather sharded params (they may span several processes).
    if x.is_fully_addressable:
        return jax.device_put(x, jax.devices()[0])
    from jax.experimental import multihost_utils

    return jnp.asarray(multihost_utils.process_allgather(x, tiled=True))
