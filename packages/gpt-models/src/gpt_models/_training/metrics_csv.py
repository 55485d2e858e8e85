"""``metrics.csv``: a run's scalar metrics as one plain table (pandas: ``pd.read_csv(path)``)."""

from __future__ import annotations

from pathlib import Path

import lox

from .._model.preference import METRICS as PAIR_METRICS

# Columns after `step`, in this order; keys a run did not log (mfu on CPU) are left out.
COLUMNS = ("wall_time", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "mfu")


def write_metrics_csv(metrics_dir: Path, path: Path) -> None:
    """Export the scalar metrics saved in ``metrics_dir`` (a lox ``SaveLogger`` folder) to ``path``.

    ``wall_time`` is seconds since this process started its training loop (a resumed run starts
    again at 0); ``val_loss`` is in nats per byte; ``loss`` is the train loss in nats per token.
    A mixture adds each source's ``loss/<source>``, ``val_loss/<source>`` and cumulative
    ``tokens/<source>``; a mixture of experts ``moe/aux_loss`` and ``moe/expert_fraction/<i>``.
    A preference run adds TRL's ``rewards/...`` and ``logps/...`` of its train batches and their
    ``val_`` twins of the validation split; its losses are nats per pair.
    """
    logs = lox.load(metrics_dir)
    tasks = sorted(k for k in logs if k.startswith("eval/"))  # eval.tasks: eval/<task>/acc
    # A mixture's sources (data.sources): loss/<source>, val_loss/<source>, tokens/<source>.
    sources = sorted(k for k in logs if k.startswith(("loss/", "val_loss/", "tokens/")))
    moe = sorted((k for k in logs if k.startswith("moe/")), key=_expert_order)
    # A preference run: TRL's metrics of the train batches, then of the validation split.
    pairs = [p + k for p in ("", "val_") for k in PAIR_METRICS if p + k in logs]
    keys = [k for k in COLUMNS if k in logs] + pairs + sources + moe + tasks
    lox.to_csv(logs, path, keys=keys)


def _expert_order(key: str) -> tuple[int, str]:
    """``moe/aux_loss`` first, then the experts by number (``/2`` before ``/10``)."""
    last = key.rsplit("/", 1)[-1]
    return (int(last), "") if last.isdigit() else (-1, key)
