"""``init.source``: the step-0 state of a run that starts from another run's or a Hugging Face
folder's weights (fresh optimizer state, step 0).

What the source is and whether the run's architecture and tokenizer fit it was settled when the run
was resolved (``_runs/run.py``, before anything was written); this reads its weights. A run
with LoRA adds fresh adapters (what ``init_params`` gives them for ``train.seed``) to the source's
weights; a source that was itself trained with LoRA gives its weights with its adapters merged in.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

import blox as bx
import paramspec as ps

from .._config.schema import Config
from .._distributed.mesh import RULES, replicated
from .._model.gpt import gpt, init_fn
from .._model.lora import is_adapter
from .._runs.folders import load_run
from .._runs.hf_import import import_hf
from .._runs.init_source import InitSource
from .step import TrainState, abstract_state, init_opt_state, state_shardings


def init_state_from(
    cfg: Config, source: InitSource, optimizer: optax.GradientTransformation, mesh: Mesh
) -> TrainState:
    """A step-0 state whose params are ``source``'s, placed in the run's sharded layout."""
    if source.kind == "run":
        source_cfg, params, _ = load_run(source.path)
        lora = gpt(source_cfg).lora
        if lora is not None:  # the source's adapted weights are what this run starts from
            params = lora.merge(params)
    else:
        _, params = import_hf(source.path)
    shardings = state_shardings(abstract_state(cfg, optimizer, mesh))
    key = jax.random.key(cfg.train.seed)
    params = _with_fresh_adapters(cfg, params, key, mesh)
    dtype = jnp.dtype(cfg.model.param_dtype)
    params = jax.tree.map(lambda a, s: jax.device_put(a.astype(dtype), s), params, shardings.params)
    opt_state = init_opt_state(optimizer, params, shardings)
    rep = replicated(mesh)
    step = jax.device_put(jnp.zeros((), jnp.int32), rep)
    rng = jax.device_put(jax.random.key_data(jax.random.fold_in(key, 1)), rep)
    return TrainState(params=params, opt_state=opt_state, step=step, rng=rng)


def _with_fresh_adapters(cfg: Config, base: bx.Params, key: Any, mesh: Mesh) -> bx.Params:
    """``base`` (weights without adapters) in the run's structure, with its fresh adapters.

    Without LoRA that is ``base`` itself. With it, the adapters are the ones ``init_params``
    makes for ``key``: the model's init is jitted with only the adapters as outputs, so XLA
    drops the base weights' initialisation instead of materialising a second copy of them.
    """
    model = cfg.model
    if model is model.base:  # no LoRA
        return base
    init = init_fn(model)
    adapters = ps.init_sharded(
        lambda k: init(k).split(lambda p, _: is_adapter(p))[0], key, mesh, RULES
    )
    structure = jax.eval_shape(init, key)  # the run's order, flags and metadata
    values = {**{p: base[p].value for p in base}, **{p: adapters[p].value for p in adapters}}
    return bx.Params(
        {path: spec.replace(value=values[path]) for path, spec in structure.items()}
    ).locked()
