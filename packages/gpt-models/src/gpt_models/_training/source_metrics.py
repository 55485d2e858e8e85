"""The metrics of a data mixture's sources: ``tokens/<source>`` and ``loss/<source>`` at each step.

The train step returns each row's loss (``row_loss``); which source each row came from is the
sampler's pure function of ``(seed, step)``, so it is drawn again here instead of travelling with
the batch. Token counts are cumulative over the run: a resumed run counts the steps before its
checkpoint again from the same draws (about 20 microseconds a step), so they need no saved state.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._config.schema import Config
from .._data.corpus import Dataset
from .._data.mixture import MixedTokens


class SourceMetrics:
    """``logs, per_source = metrics(step, logs)``: ``row_loss`` taken out of the step's logs and
    turned into the per-source metrics; a run without ``data.sources`` passes its logs through.

    ``tokens/<source>`` counts the predicted tokens (``model.seq_len`` per row, as ``tokens_per_s``
    counts them) of every step so far; ``loss/<source>`` is the mean train loss (nats per token)
    of the step's rows from that source, logged only at steps that drew one.
    """

    def __init__(self, cfg: Config, dataset: Dataset, start: int) -> None:
        self.mix = dataset.train if isinstance(dataset.train, MixedTokens) else None
        self.seed, self.batch = cfg.train.seed, cfg.train.batch_size
        self.seq_len = cfg.model.seq_len
        self.tokens = np.zeros(len(self.mix.parts) if self.mix else 0, np.int64)
        for step in range(start if self.mix else 0):
            self.tokens += self._counts(step)

    def _counts(self, step: int) -> np.ndarray:
        assert self.mix is not None
        which = self.mix.row_sources(step, seed=self.seed, batch_size=self.batch)
        return np.bincount(which, minlength=len(self.mix.parts)) * self.seq_len

    def __call__(self, step: int, logs: Any) -> tuple[Any, dict[str, np.ndarray]]:
        if self.mix is None:
            return logs, {}
        rows = np.asarray(logs["row_loss"])[-1]
        logs = logs.filter(lambda key, _: key != "row_loss")
        which = self.mix.row_sources(step, seed=self.seed, batch_size=self.batch)
        self.tokens += self._counts(step)
        out = {}
        for k, name in enumerate(self.mix.names):
            out[f"tokens/{name}"] = np.array([self.tokens[k]], np.int64)
            if (which == k).any():
                out[f"loss/{name}"] = np.array([rows[which == k].mean()], np.float32)
        return logs, out
