"""A preference run's part of the train step (its objective) and its reference, ready before the
first step: a copy of the init weights, or every pair's reference log-probs computed in one pass.

Where the reference comes from (``[preference]``, ``_model/preference.py``):

- SimPO: none;
- ``precompute_ref``: the init weights score every pair of both splits (of each source of a
  mixture) once, before training;
  the batches then carry each answer's reference log-prob (``ref``) and no step runs the
  reference model. The weights are freed before the first step;
- else, with LoRA: the run's own base weights with the adapters off, in the step (no copy);
- else: a copy of the init weights, an input of the step beside the state (``Hooks.reference``).

A resumed run gets the same reference again (the same weights, the same compiled pass), so it
continues bit for bit.
"""

from __future__ import annotations

import functools
from typing import Any, TextIO

import jax
import numpy as np

from .._compute.preflight import check_fits
from .._data.packing import PackedExamples
from .._data.preference_mixture import packed_splits
from .._distributed.mesh import BATCH_AXES, activation_constraint, place_batch
from .._distributed.processes import host_value
from .._model.preference import answer_logps, reference_params
from .._runs.preference_run import load_reference, needs_reference_weights
from .._runs.run import Run
from .plans import TrainPlan


def prepare_reference(run: Run, plan: TrainPlan, stream: TextIO | None = None) -> Any:
    """The reference a preference run's steps read: the copy of the init weights they take as
    an input (returned), or, with ``precompute_ref``, every pair's reference log-probs of both
    splits, kept with the data (then None, as for SimPO, LoRA and runs without preference).

    The pre-flight is checked first: a plan that cannot fit loads nothing.
    """
    cfg = run.config
    p = cfg.preference
    if not p.uses_reference or run.init is None:
        return None
    check_fits(plan.preflight)
    if needs_reference_weights(cfg):
        return load_reference(cfg, run.init, plan.abstract.params)
    if not p.precompute_ref:
        return None
    # With LoRA the base weights alone (the adapters off), as the reference of the step would be.
    abstract, model = reference_params(plan.abstract.params, cfg.model)
    weights = load_reference(cfg, run.init, abstract)
    score = _scorer(model, plan)
    splits = packed_splits(run.data)  # each source's of a mixture of preference stores
    for split in splits:
        split.ref = _precompute(split, weights, score, plan, cfg.train.seed)
    if stream is not None:
        n = sum(len(split.units) for split in splits)
        print(
            f"Reference log-probs of {n:,} pairs computed (preference.precompute_ref).", file=stream
        )
    return None


def _scorer(model: Any, plan: TrainPlan) -> Any:
    constrain = activation_constraint(plan.mesh)
    return jax.jit(functools.partial(_pair_logps, model=model, constrain=constrain))


def _pair_logps(weights: Any, batch: Any, *, model: Any, constrain: Any) -> jax.Array:
    return answer_logps(weights, batch, model, constrain)[0]


def _precompute(
    split: PackedExamples, weights: Any, score: Any, plan: TrainPlan, seed: int
) -> np.ndarray:
    """``(units, 2)``: each pair's reference log-prob of its chosen and rejected answer."""
    t = plan.preflight.cfg.train
    rows = t.batch_size // t.grad_accum
    order, ptr = split.rows(seed if split.shuffle else None)
    table = np.zeros(split.units.shape, np.float32)
    n_rows = len(ptr) - 1
    for first in range(0, n_rows, rows):
        picks = np.arange(first, first + rows) % n_rows  # a whole batch; the extra rows repeat
        local = split.read(picks, seed if split.shuffle else None)
        batch = place_batch(local, plan.mesh, BATCH_AXES)
        logps = np.asarray(host_value(score(weights, batch)))
        for i, r in enumerate(picks[: n_rows - first].tolist()):
            units = order[ptr[r] : ptr[r + 1]]
            table[units] = logps[i, :, 1 : len(units) + 1].T
    return table
