"""``metrics.csv``: a run's scalar metrics as one plain table (pandas: ``pd.read_csv(path)``)."""

from __future__ import annotations

from pathlib import Path

import lox

# Columns after `step`, in this order; keys a run did not log (mfu on CPU) are left out.
COLUMNS = ("wall_time", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "mfu")


def write_metrics_csv(metrics_dir: Path, path: Path) -> None:
    """Export the scalar metrics saved in ``metrics_dir`` (a lox ``SaveLogger`` folder) to ``path``.

    ``wall_time`` is seconds since this process started its training loop (a resumed run starts
    again at 0); ``val_loss`` is in nats per byte; ``loss`` is the train loss in nats per token.
    A mixture adds each source's ``loss/<source>``, ``val_loss/<source>`` and cumulative
    ``tokens/<source>``; a mixture of experts ``moe/aux_loss`` and ``moe/expert_fraction/<i>``.
    """
    logs = lox.load(metrics_dir)
    tasks = sorted(k for k in logs if k.startswith("eval/"))  # eval.tasks: eval/<task>/acc
    # A mixture's sources (data.sources): loss/<source>, val_loss/<source>, tokens/<source>.
    sources = sorted(k for k in logs if k.startswith(("loss/", "val_loss/", "tokens/")))
    moe = sorted((k for k in logs if k.startswith("moe/")), key=_expert_order)
    lox.to_csv(logs, path, keys=[k for k in COLUMNS if k in logs] + sources + moe + tasks)


def _expert_order(key: str) -> tuple[int, str]:
    """``moe/aux_loss`` first, then the experts by number (``/2`` before ``/10``)."""
    last = key.rsplit("/", 1)[-1]
    return (int(last), "") if last.isdigit() else (-1, key)
