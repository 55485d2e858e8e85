"""Where a run's metrics go: ``metrics/`` in the run folder (lox ``SaveLogger``), wandb,
TensorBoard."""

from __future__ import annotations

import json
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


def check_tensorboard(cfg: Config) -> None:
    """Fail before anything is written when ``log.tensorboard`` is on and tensorboardX is
    missing."""
    if not cfg.log.tensorboard:
        return
    try:
        import tensorboardX  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            f"log.tensorboard = true needs the tensorboardX package, which is not installed "
            f"({err}). Install the extra with `pip install 'gpt-models[tensorboard]'`, or train "
            "without it (--set log.tensorboard=false): the metrics are saved in the run folder's "
            "metrics/ either way."
        ) from err


def make_logger(cfg: Config, run: Path) -> lox.Logger:
    """The run's logger: ``run/metrics`` always, plus wandb and ``run/tensorboard`` if enabled."""
    loggers: list[lox.Logger] = [lox.SaveLogger(run / "metrics", flush_every=20)]
    if cfg.log.tensorboard:
        # One TensorBoard run, `run/tensorboard/run_0`; `tensorboard --logdir RUN/tensorboard`.
        config = json.dumps(to_dict(cfg), indent=2)
        text = {"config": "```\n" + config + "\n```"}
        loggers.append(lox.TensorBoardLogger(run / "tensorboard", text=text))
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
