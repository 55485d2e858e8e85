"""Log-probabilities of token windows under trained params: the one jitted scorer of ``gpt eval``.

Every window is padded to ``model.seq_len + 1`` tokens and every batch to ``batch_size`` rows, so
one compiled program scores any text or task; the model is causal, so right padding changes no
score of a real position (the padded ones are masked on the host).
"""

from __future__ import annotations

import functools
import sys
from typing import Any, TextIO

import jax
import jax.numpy as jnp
import numpy as np

from .._config.model import ModelConfig
from .._console import StatusLine
from .._model.gpt import forward


@functools.lru_cache(maxsize=8)
def compiled_scorer(model: ModelConfig) -> Any:
    """The jitted scorer of ``model``: ``(params, windows) -> (log-probabilities, greedy hits)``."""

    def score(params: Any, windows: jax.Array) -> tuple[jax.Array, jax.Array]:
        logits = forward(params, windows[:, :-1], model).astype(jnp.float32)
        logp = jax.nn.log_softmax(logits, axis=-1)
        targets = windows[:, 1:]
        picked = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
        return picked, jnp.argmax(logits, axis=-1) == targets

    return jax.jit(score)


def score_windows(
    params: Any,
    model: ModelConfig,
    windows: list[np.ndarray],
    *,
    batch_size: int,
    label: str = "",
    stream: TextIO | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """For each token window (at most ``seq_len + 1`` ids), the log-probability of each of its
    tokens
    after the first given the ones before it (float64), and whether it was the greedy choice.

    ``stream`` gets a progress line (``label: k/n windows``): redrawn on a terminal, a line every
    5% of the windows in a file.
    """
    width = model.seq_len + 1
    fn = compiled_scorer(model)
    out: list[tuple[np.ndarray, np.ndarray]] = []
    status = StatusLine(stream, total=len(windows))
    for start in range(0, len(windows), batch_size):
        chunk = windows[start : start + batch_size]
        batch = np.zeros((batch_size, width), np.int32)
        for row, w in enumerate(chunk):
            batch[row, : len(w)] = w
        logp, greedy = jax.device_get(fn(params, jnp.asarray(batch)))
        for row, w in enumerate(chunk):
            n = len(w) - 1
            out.append((np.asarray(logp[row, :n], np.float64), np.asarray(greedy[row, :n])))
        if status.due(len(out), final=len(out) == len(windows)):
            status.write(f"{label}: {len(out)}/{len(windows)} windows")
    status.close()
    return out


def progress_stream(show: bool) -> TextIO | None:
    return sys.stderr if show else None
