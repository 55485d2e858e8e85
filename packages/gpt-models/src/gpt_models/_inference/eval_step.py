"""The validation step: the mean next-token loss of one batch of fixed windows, jitted on a mesh
(the evaluation during training, ``gpt eval``, and its pre-flight compile it)."""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import Mesh

from .._config.schema import Config
from .._distributed.mesh import activation_constraint, batch_sharding, compiler_options, replicated
from .._model.loss import is_packed, loss_fn, packed_sums
from .._model.preference import pair_sums


def compile_eval_step(cfg: Config, mesh: Mesh, params: Any, reference: bool = False) -> Any:
    """``eval(params, batch) -> mean loss`` over one ``(batch, seq_len + 1)`` batch, jitted.

    ``params`` is the abstract (or concrete) params; their shardings are the step's input shardings.
    A packed batch (a dict of ``tokens``, ``mask``, ``segments``) gives the sums its losses are
    made of instead (``packed_sums``), so that losses over several batches are ratios of totals.
    A preference run's batches of pairs give the sums of its loss and metrics (``pair_sums``);
    with ``reference`` the step takes the reference weights as a third argument, laid out as
    ``params``.

    Example:
        >>> import dataclasses, jax, jax.numpy as jnp
        >>> from gpt_models import PRESETS, MeshConfig, init_state, make_mesh, make_optimizer
        >>> tiny = PRESETS["tiny"]
        >>> cfg = dataclasses.replace(
        ...     tiny, model=dataclasses.replace(tiny.model, seq_len=16, d_model=32, n_layers=1)
        ... )
        >>> mesh = make_mesh(MeshConfig(data=-1), jax.devices()[:1])
        >>> params = init_state(cfg, make_optimizer(cfg.train), mesh).params
        >>> evaluate = compile_eval_step(cfg, mesh, params)
        >>> batch = jax.random.randint(jax.random.key(0), (8, 17), 0, 256)
        >>> loss = evaluate(params, batch)  # about uniform at init: log(256) = 5.55
        >>> 5.0 < float(loss) < 6.0
        True
    """
    options = {"config": cfg.model, "constrain": activation_constraint(mesh)}
    pref = cfg.preference

    def evaluate(params: Any, batch: Any, *ref: Any) -> Any:
        if pref.enabled:
            return pair_sums(params, batch, pref=pref, ref=ref[0] if ref else None, **options)
        if is_packed(batch):
            return packed_sums(params, batch, **options)[0]
        return loss_fn(params, batch, **options)

    data = batch_sharding(mesh)
    shardings = jax.tree.map(lambda a: a.sharding, params)
    return jax.jit(
        evaluate,
        in_shardings=(shardings, data, *([shardings] if reference else [])),
        out_shardings=replicated(mesh),
        compiler_options=compiler_options(mesh),
    )
