"""The validation loss of trained params on fixed windows: during training and in ``gpt eval``."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from .._config.schema import Config
from .._data.byte_tokenizer import ByteTokenizer
from .._data.corpus import Dataset, Tokenizer, eval_batches, load_dataset
from .._data.mixture import MixedTokens
from .._data.run_tokenizer import run_tokenizer
from .._distributed.mesh import place_batch, single_device_mesh
from .._distributed.processes import host_value
from .._model.loss import is_packed, loss_weights
from .._model.preference import METRICS, UNITS
from .._runs.folders import load_run
from .._runs.init_source import read_init_source
from .._runs.preference_run import eval_needs_reference, load_reference
from .eval_step import compile_eval_step


class Evaluator:
    """Mean loss over the first ``train.eval_batches`` validation windows, in ``self.unit``:
    nats per byte, or nats per token when the data's bytes are unknown (a ``.bin`` without a
    sidecar).

    A mixture (``data.sources``) is evaluated on each source's own validation split (the same
    windows per source); the call returns the weighted mean ``sum_k w_k * loss_k`` (each in the
    unit; the weights normalised) and ``by_source`` keeps each source's loss. A mixture of
    preference stores so too, its TRL metrics (``pair_metrics``) the sources' weighted means.

    Packed batches (a store of chat or prompt/completion examples): the call returns the masked
    loss (the answers only) and ``all_tokens`` keeps the loss of every token of the examples
    (prompts too); each is its totals' ratio over all the batches, per byte of the tokens it
    counts.
    """

    def __init__(
        self,
        cfg: Config,
        mesh: Mesh,
        params: Any,
        dataset: Dataset,
        step: Any = None,
        reference: Any = None,
    ) -> None:
        t = cfg.train
        # A preference run: the loss and TRL's metrics of its validation pairs; ``reference`` its
        # reference weights where the steps read a copy of them (else None).
        self.reference = () if reference is None else (reference,)
        self.preference = cfg.preference.enabled
        self.pair_metrics: dict[str, float] = {}
        self.fn = (
            step
            if step is not None
            else compile_eval_step(cfg, mesh, params, reference=reference is not None)
        )
        self.mesh = mesh
        self.rows = t.batch_size // t.grad_accum
        parts = dataset.parts or (dataset,)
        self.batches = [
            eval_batches(
                p.val,
                n_batches=t.eval_batches,
                batch_size=self.rows,
                seq_len=cfg.window,
                process_index=jax.process_index(),
                process_count=jax.process_count(),
            )
            for p in parts
        ]
        mixed = dataset.train if isinstance(dataset.train, MixedTokens) else None
        self.names = mixed.names if mixed is not None else ()
        self.weights = mixed.weights if mixed is not None else np.zeros(0)
        # Unknown bytes (a .bin without a sidecar, in any source): the losses stay per token.
        known = dataset.bytes_per_token is not None
        # Per part: the bytes per token of the loss, and of packed batches' all-tokens loss.
        self.bytes_per_token = [
            (1.0, 1.0)
            if not known or self.preference
            else _counted_bytes(dataset.tokenizer, b)
            if is_packed(b)
            else (p.bytes_per_token or 1.0,) * 2
            for p, b in zip(parts, self.batches, strict=True)
        ]
        self.unit = "nats/pair" if self.preference else "nats/byte" if known else "nats/token"
        self.source = dataset.source
        self.windows = (len(jax.tree.leaves(self.batches[0])[0]), self.rows, cfg.window)
        self.by_source: dict[str, float] = {}
        self.all_tokens: float | None = None  # packed batches: the loss of every example token

    def __call__(self, params: Any) -> float:
        losses, every, pairs = [], [], []
        for batches, bpt in zip(self.batches, self.bytes_per_token, strict=True):
            n = len(jax.tree.leaves(batches)[0])
            values = [
                self.fn(
                    params,
                    place_batch(jax.tree.map(lambda a, i=i: a[i], batches), self.mesh),
                    *self.reference,
                )
                for i in range(n)
            ]
            values = [host_value(x) for x in values]
            if self.preference:  # the means over every pair of the (source's) batches
                total = {k: float(sum(np.asarray(v[k]) for v in values)) for k in values[0]}
                count = max(total["pairs"], 1.0)
                pairs.append({k: total[k] / count for k in METRICS})
                losses.append(total["loss"] / count)
                continue
            if not is_packed(batches):
                losses.append(float(np.mean(values)) / bpt[0])
                continue
            total = {k: float(sum(np.asarray(v[k]) for v in values)) for k in values[0]}
            losses.append(total["answers"] / max(total["answer_tokens"], 1.0) / bpt[0])
            every.append(total["all_tokens"] / max(total["example_tokens"], 1.0) / bpt[1])
        if not self.names:
            self.all_tokens = every[0] if every else None
            self.pair_metrics = pairs[0] if pairs else {}
            return losses[0]
        if pairs:  # a mixture of preference stores: the sources' weighted means, as the loss
            self.pair_metrics = {
                k: float(np.dot(self.weights, [m[k] for m in pairs])) for k in METRICS
            }
        self.by_source = dict(zip(self.names, losses, strict=True))
        return float(np.dot(self.weights, losses))

    def metrics(self, loss: float) -> dict[str, np.ndarray]:
        """``val_loss`` (``loss``, this call's result), a mixture's ``val_loss/<source>`` and
        packed batches' ``val_loss/all_tokens``."""
        out = {"val_loss": np.array([loss], np.float32)}
        out |= {f"val_{k}": np.array([v], np.float32) for k, v in self.pair_metrics.items()}
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
    pairs: tuple[tuple[str, float], ...] = ()  # a preference run's metrics (TRL's names)

    def describe(self) -> str:
        """``val_loss 2.535940 nats/byte`` with the data, windows and step it measured."""
        batches, rows, seq = self.windows
        per = " per source" if self.by_source else ""
        mean = ", the weighted mean of its sources" if self.by_source else ""
        masked = "" if self.all_tokens is None else " of the answers (the loss mask)"
        masked = " (the preference loss)" if self.pairs else masked
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
        lines += [
            f"val_{name} {value:.6f} {UNITS.get(name, '(beta x nats)')}"
            for name, value in self.pairs
        ]
        return "\n".join(lines)


def evaluate_run(run_dir: str | Path, config: Config | None = None, *, step: Any = None) -> ValLoss:
    """Validation loss of a run's newest checkpoint on its fixed val windows (what training logs).

    ``step``: the eval step compiled ahead of time (``plan_eval(...).compiled``), else compiled
    here.
    """
    cfg, params, at = load_run(run_dir, config)
    mesh = single_device_mesh()
    dataset = load_dataset(
        cfg.data,
        seq_len=cfg.window,
        vocab_size=cfg.model.vocab_size,
        tokenizer=run_tokenizer(run_dir, cfg),
    )
    reference = None
    if eval_needs_reference(cfg):  # a precomputed reference too: gpt eval scores its own pairs
        reference = load_reference(cfg, read_init_source(cfg.init.source), params)
    evaluator = Evaluator(cfg, mesh, params, dataset, step, reference)
    loss = evaluator(params)
    parts = tuple(
        (n, float(w), evaluator.by_source[n])
        for n, w in zip(evaluator.names, evaluator.weights, strict=True)
    )
    return ValLoss(
        loss,
        evaluator.unit,
        at,
        dataset.source,
        evaluator.windows,
        parts,
        evaluator.all_tokens,
        tuple(evaluator.pair_metrics.items()),
    )
