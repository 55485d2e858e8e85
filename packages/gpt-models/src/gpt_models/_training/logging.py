"""Where a run's metrics go: ``metrics/`` in the run folder (lox ``SaveLogger``), and wandb if asked."""

from __future__ import annotations

from pathlib import Path

import lox

from .._config.schema import Config
from .._config.toml import to_dict
from .._errors import ConfigError


def check_wandb(cfg: Config) -> None:
    """Fail before anything is written when ``log.wandb`` asks for wandb and it is not installed."""
    if cfg.log.wandb == "disabled":
        return
    try:
        import wandb  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            f"log.wandb = {cfg.log.wandb!r} needs the wandb package, which is not installed "
            f"({err}). Install the extra with `pip install 'gpt-models[wandb]'`, "
            "or train without wandb (drop --wandb, or --set log.wandb=disabled): the metrics are "
            "saved in the run folder's metrics/ either way."
        ) from err


def make_logger(cfg: Config, run: Path) -> lox.Logger:
    """The run's logger: ``run/metrics`` always, plus a wandb run (files under ``run``) if enabled."""
    loggers: list[lox.Logger] = [lox.SaveLogger(run / "metrics", flush_every=20)]
    if cfg.log.wandb != "disabled":
        loggers.append(
            lox.WandbLogger(
                project=cfg.log.wandb_project,
                name=run.name,
                mode=cfg.log.wandb,
                dir=str(run),
                config=to_dict(cfg),
            )
        )
    return lox.MultiLogger(*loggers)
