"""``train.init_from``: start a new run from the weights of a run folder or a Hugging Face folder.

The new run gets those weights, a fresh optimizer state and step 0; batch, learning rate, steps and
data may differ from the source's, the architecture may not: every model key that shapes the params
or the forward pass must equal the source's (``ARCH_KEYS``), checked before anything is written.
``gpt train --resume`` holds a run to its own architecture the same way (``check_resume_model``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from .._config.schema import Config, ModelConfig
from .._errors import ConfigError
from .._runs.folders import load_run
from .._runs.hf import import_hf, read_hf_config
from .step import TrainState, _replicated, abstract_state, state_shardings

# Model keys that may differ from the source: how the same weights are computed (the attention
# kernel, compute dtype, remat, scan), stored or regularised in training (dropout).
FREE_KEYS = ("dtype", "param_dtype", "remat", "scan_layers", "init_std", "dropout", "attention")
ARCH_KEYS = tuple(f.name for f in dataclasses.fields(ModelConfig) if f.name not in FREE_KEYS)


def _is_run(source: Path) -> bool:
    return (source / "config.toml").is_file()


def source_model(source: str) -> ModelConfig:
    """The model config of ``source``: a run folder's ``config.toml`` or a HF ``config.json``."""
    path = Path(source)
    if _is_run(path):
        from .._runs.folders import run_config

        return run_config(path, flag="train.init_from").model
    if (path / "config.json").is_file():
        return read_hf_config(path)[1].model
    raise ConfigError(
        f"train.init_from = {source!r} is neither a run folder (config.toml) nor a Hugging Face "
        "model folder (config.json + model.safetensors). Pass one of those, e.g. --init-from "
        "runs/<name>."
    )


def check_init_from(cfg: Config) -> None:
    """Refuse a model section that changes the architecture of ``cfg.train.init_from``."""
    source = cfg.train.init_from
    if not source:
        return
    theirs = source_model(source)
    for key in ARCH_KEYS:
        if getattr(cfg.model, key) != getattr(theirs, key):
            raise ConfigError(
                f"model.{key} = {getattr(cfg.model, key)!r} changes the architecture of "
                f"train.init_from = {source!r}, which has model.{key} = {getattr(theirs, key)!r}. "
                f"A run started from its weights keeps its architecture: drop the --set "
                f"model.{key} (train/data/sample keys and model.{'/'.join(FREE_KEYS)} may change)."
            )


def check_resume_model(run: Path, saved: ModelConfig, model: ModelConfig) -> None:
    """Refuse a ``--set`` that changes the architecture of the run being resumed (its ``saved``
    model); the checkpoint's params could not be restored into it."""
    for key in ARCH_KEYS:
        if getattr(model, key) != getattr(saved, key):
            raise ConfigError(
                f"gpt train --resume {run} --set model.{key}={getattr(model, key)!r}: a resumed run "
                f"keeps its architecture, and this run has model.{key} = "
                f"{getattr(saved, key)!r}. Drop that --set (train/data/sample keys and "
                f"model.{'/'.join(FREE_KEYS)} may change), or train the other architecture as a "
                "new run with --name."
            )


def with_source_model(cfg: Config) -> Config:
    """``cfg`` with the model section of its ``train.init_from`` (free keys kept from ``cfg``)."""
    theirs = source_model(cfg.train.init_from)
    free = {k: getattr(cfg.model, k) for k in FREE_KEYS if k != "init_std"}
    return dataclasses.replace(cfg, model=dataclasses.replace(theirs, **free))


def init_state_from(cfg: Config, optimizer: optax.GradientTransformation, mesh: Mesh) -> TrainState:
    """A step-0 state whose params are the source's, placed in the run's sharded layout."""
    source = Path(cfg.train.init_from)
    if _is_run(source):
        _, params, _ = load_run(source)
    else:
        _, params = import_hf(source)
    shardings = state_shardings(abstract_state(cfg, optimizer, mesh))
    dtype = jnp.dtype(cfg.model.param_dtype)
    params = jax.tree.map(lambda a, s: jax.device_put(a.astype(dtype), s), params, shardings.params)
    opt_state = jax.jit(optimizer.init, out_shardings=shardings.opt_state)(params)
    rep = _replicated(mesh)
    key = jax.random.key(cfg.train.seed)
    step = jax.device_put(jnp.zeros((), jnp.int32), rep)
    rng = jax.device_put(jax.random.key_data(jax.random.fold_in(key, 1)), rep)
    return TrainState(params=params, opt_state=opt_state, step=step, rng=rng)
