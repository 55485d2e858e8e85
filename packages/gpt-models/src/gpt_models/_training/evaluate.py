"""Using trained params: the validation loss on fixed windows, and text continued from a prompt."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from .._config.schema import Config
from .._data.byte_tokenizer import ByteTokenizer
from .._data.corpus import Dataset, Tokenizer, eval_batches, load_dataset
from .._data.mixture import MixedTokens
from .._data.run_tokenizer import decode_lenient, run_tokenizer
from .._distributed.mesh import place_batch, single_device_mesh
from .._distributed.processes import host_value
from .._model.generate import generate
from .._runs.folders import load_run
from .step import compile_eval_step


class Evaluator:
    """Mean loss over the first ``train.eval_batches`` validation windows, in ``self.unit``:
    nats per byte, or nats per token when the data's bytes are unknown (a ``.bin`` without a
    sidecar).

    A mixture (``data.sources``) is evaluated on each source's own validation split (the same
    windows per source); the call returns the weighted mean ``sum_k w_k * loss_k`` (each in the
    unit; the weights normalised) and ``by_source`` keeps each source's loss.
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
        self.bytes_per_token = [(p.bytes_per_token or 1.0) if known else 1.0 for p in parts]
        self.unit = "nats/byte" if known else "nats/token"
        self.source = dataset.source
        self.windows = (len(self.batches[0]), self.rows, cfg.model.seq_len)
        self.by_source: dict[str, float] = {}

    def __call__(self, params: Any) -> float:
        losses = []
        for batches, bpt in zip(self.batches, self.bytes_per_token, strict=True):
            values = [self.fn(params, place_batch(b, self.mesh)) for b in batches]
            losses.append(float(np.mean([host_value(x) for x in values])) / bpt)
        if not self.names:
            return losses[0]
        self.by_source = dict(zip(self.names, losses, strict=True))
        return float(np.dot(self.weights, losses))

    def metrics(self, loss: float) -> dict[str, np.ndarray]:
        """``val_loss`` (``loss``, this call's result) and a mixture's ``val_loss/<source>``."""
        out = {"val_loss": np.array([loss], np.float32)}
        out |= {f"val_loss/{k}": np.array([v], np.float32) for k, v in self.by_source.items()}
        return out


@dataclasses.dataclass(frozen=True)
class ValLoss:
    """A run's validation loss: the value, its unit, the data and windows it was measured on.

    For a mixture, ``loss`` is the weighted mean and ``by_source`` holds ``(name, weight, loss)``
    of each source.
    """

    loss: float
    unit: str
    step: int
    source: str
    windows: tuple[int, int, int]  # batches, rows per batch, tokens per row
    by_source: tuple[tuple[str, float, float], ...] = ()

    def describe(self) -> str:
        """``val_loss 2.535940 nats/byte`` with the data, windows and step it measured."""
        batches, rows, seq = self.windows
        per = " per source" if self.by_source else ""
        mean = ", the weighted mean of its sources" if self.by_source else ""
        lines = [
            f"val_loss {self.loss:.6f} {self.unit}{mean} on the validation split of {self.source} "
            f"({batches} batch(es) of {rows} x {seq} tokens{per}, train.eval_batches), step "
            f"{self.step}"
        ]
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
    return ValLoss(loss, evaluator.unit, at, dataset.source, evaluator.windows, parts)


def sample_text(params: Any, cfg: Config, *, prompt: str | None = None, max_new_tokens: int | None = None,
                temperature: float | None = None, top_k: int | None = None, top_p: float | None = None,
                seed: int = 0, tokenizer: Tokenizer | None = None) -> str:  # fmt: skip
    """Generate text with ``tokenizer`` (default bytes); defaults come from the config's ``[sample]``."""
    s = cfg.sample
    tok = tokenizer or ByteTokenizer()
    ids, n = sample_lengths(cfg, tok, prompt, max_new_tokens)
    out = generate(
        jax.tree.map(_on_one_device, params), ids, cfg.model, max_new_tokens=n,
        temperature=s.temperature if temperature is None else temperature,
        top_k=(s.top_k or None) if top_k is None else top_k,
        top_p=(s.top_p if s.top_p < 1 else None) if top_p is None else top_p,
        key=jax.random.key(seed),
    )  # fmt: skip
    return decode_lenient(tok, np.asarray(out))


def sample_lengths(cfg: Config, tok: Tokenizer, prompt: str | None,
                   max_new_tokens: int | None) -> tuple[Any, int]:  # fmt: skip
    """The prompt's token ids and the number of tokens to add, as ``sample_text`` takes them:
    ``max_new_tokens`` (default ``sample.max_new_tokens``) capped so that the prompt and the new
    tokens fit in ``model.seq_len``."""
    ids = tok.encode(cfg.sample.prompt if prompt is None else prompt)
    if len(ids) == 0:
        what = f"--prompt {prompt!r}" if prompt is not None else "sample.prompt"
        raise ValueError(
            f"{what} is empty, but sampling continues a text: it needs at least one token. "
            "Give a prompt of at least one character, e.g. --prompt ' ' or --prompt 'The'."
        )
    room = cfg.model.seq_len - len(ids)
    if room < 1:
        what = "The prompt" if prompt is not None else "sample.prompt"
        raise ValueError(
            f"{what} is {len(ids)} tokens long, but the model's context (model.seq_len) is "
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
