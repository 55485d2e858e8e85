"""``init.source``: the step-0 state of a run that starts from another run's or a Hugging Face
folder's weights (fresh optimizer state, step 0).

What the source is and whether the run's architecture and tokenizer fit it was settled when the run
was resolved (``_runs/resolve.py``, before anything was written); this reads its weights.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from .._config.schema import Config
from .._runs.folders import load_run
from .._runs.hf_import import import_hf
from .._runs.resolve import init_source
from .step import TrainState, _replicated, abstract_state, state_shardings


def init_state_from(cfg: Config, optimizer: optax.GradientTransformation, mesh: Mesh) -> TrainState:
    """A step-0 state whose params are the source's, placed in the run's sharded layout."""
    source = init_source(cfg.init.source)
    if source.kind == "run":
        _, params, _ = load_run(source.path)
    else:
        _, params = import_hf(source.path)
    shardings = state_shardings(abstract_state(cfg, optimizer, mesh))
    dtype = jnp.dtype(cfg.model.param_dtype)
    params = jax.tree.map(lambda a, s: jax.device_put(a.astype(dtype), s), params, shardings.params)
    opt_state = jax.jit(optimizer.init, out_shardings=shardings.opt_state)(params)
    rep = _replicated(mesh)
    key = jax.random.key(cfg.train.seed)
    step = jax.device_put(jnp.zeros((), jnp.int32), rep)
    rng = jax.device_put(jax.random.key_data(jax.random.fold_in(key, 1)), rep)
    return TrainState(params=params, opt_state=opt_state, step=step, rng=rng)
