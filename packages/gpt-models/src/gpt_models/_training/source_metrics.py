"""The metrics of a data mixture's sources: ``tokens/<source>`` and ``loss/<source>`` at each step.

The train step returns each row's loss (``row_loss``); which source each row came from is the
sampler's pure function of ``(seed, step)``, so it is drawn again here instead of travelling with
the batch. Token counts are cumulative over the run: a resumed run counts the steps before its
checkpoint again from the same draws (about 20 microseconds a step), so they need no saved state.
"""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from .._config.schema import Config
from .._data.corpus import Dataset
from .._data.mixture import MixedTokens


class SourceMetrics:
    """``logs, per_source = metrics(step, logs)``: ``row_loss`` taken out of the step's logs and
    turned into the per-source metrics; a run without ``data.sources`` passes its logs through.

    ``tokens/<source>`` counts the predicted tokens (the window, ``data.seq_len``, per row, as
    ``tokens_per_s`` counts them) of every step so far; ``loss/<source>`` is the mean train loss
    (nats per token) of the step's rows from that source, logged only at steps that drew one.
    """

    def __init__(self, cfg: Config, dataset: Dataset, restored: Any, stream: TextIO) -> None:
        self.mix = dataset.train if isinstance(dataset.train, MixedTokens) else None
        self.seed, self.batch = cfg.train.seed, cfg.train.batch_size
        self.seq_len = cfg.window
        self.tokens = np.zeros(len(self.mix.parts) if self.mix else 0, np.int64)
        if self.mix is None:
            return
        data = restored.meta.get("data", {})
        counted, weights = data.get("tokens"), data.get("weights")
        if counted is None:  # new, or a checkpoint from before they were recorded
            for step in range(restored.step):
                self.tokens += self._counts(step)
            return
        self.tokens += [int(counted.get(name, 0)) for name in self.mix.names]
        now = self.weights()
        if weights is not None and weights != now:
            print(
                f"note: the data mixture changed since checkpoint step {restored.step} (weights "
                f"{weights} then, {now} now): tokens/<source> go on from the counts so far, the "
                "steps from here on drawn with the new weights.",
                file=stream,
            )

    def weights(self) -> dict[str, float]:
        """The mixture's weights by source name, as the config gives them."""
        assert self.mix is not None
        return {
            n: round(float(w), 6) for n, w in zip(self.mix.names, self.mix.weights, strict=True)
        }

    def record(self) -> dict[str, Any]:
        """What a checkpoint keeps of the mixture: the counts so far and the weights."""
        if self.mix is None:
            return {}
        counts = {n: int(c) for n, c in zip(self.mix.names, self.tokens, strict=True)}
        return {"tokens": counts, "weights": self.weights()}

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
