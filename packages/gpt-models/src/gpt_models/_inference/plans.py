"""The programs ``gpt sample`` and ``gpt eval`` compile for their memory pre-flight, each on one
device and sized by its knob: the sampling loop (``--max-new-tokens``), the eval step and the
``--text``/``--task`` scorer (``--batch-size``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TextIO

import jax
import jax.numpy as jnp

from .._compute.preflight import Plan, abstract_batch
from .._compute.programs import Sized, one_device, one_device_mesh, plan_one_device
from .._config.schema import Config
from .._distributed.mesh import BATCH_AXES
from .._model.generate import compile_generate
from .._model.gpt import abstract_params
from .._runs.preference_run import eval_needs_reference
from .eval_step import compile_eval_step
from .scoring import compiled_scorer


def plan_sample(
    cfg: Config,
    prompt_len: int,
    max_new_tokens: int,
    *,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    stream: TextIO | None = None,
    stop_token: int | None = None,
) -> Plan:
    """``gpt sample``'s program (one prompt, KV cache, ``max_new_tokens`` steps), compiled."""
    cfg = one_device(cfg)
    params = abstract_params(cfg, one_device_mesh())

    def compile_at(n: int) -> Any:
        return compile_generate(
            params,
            prompt_len,
            cfg.model,
            max_new_tokens=n,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            stop_token=stop_token,
        )

    program = f"sampling program (prompt of {prompt_len} tokens + {max_new_tokens} new tokens)"
    sized = Sized("gpt sample", program, "--max-new-tokens", max_new_tokens, compile_at)
    return plan_one_device(sized, cfg, stream)


def plan_score(cfg: Config, batch_size: int, stream: TextIO | None = None) -> Plan:
    """``gpt eval --text/--task``'s scorer for ``batch_size`` windows per call, compiled."""
    cfg = one_device(cfg)
    compile_at = _scorer_at(cfg, abstract_params(cfg, one_device_mesh()))
    program = f"scorer ({batch_size} windows of {cfg.model.seq_len} tokens per call)"
    sized = Sized("gpt eval", program, "--batch-size", batch_size, compile_at)
    return plan_one_device(sized, cfg, stream)


def _scorer_at(cfg: Config, params: Any) -> Callable[[int], Any]:
    fn = compiled_scorer(cfg.model)

    def compile_at(rows: int) -> Any:
        windows = jax.ShapeDtypeStruct((rows, cfg.model.seq_len + 1), jnp.int32)
        return fn.lower(params, windows).compile()

    return compile_at


def plan_eval(cfg: Config, run: str, stream: TextIO | None = None) -> Plan:
    """``gpt eval``'s validation step (the run's micro-batch of windows), compiled.

    Its rows are fixed by the run (``train.batch_size / train.grad_accum``), so the advice when it
    does not fit is the scorer of ``gpt eval --text @val`` with a ``--batch-size`` that fits.
    """
    cfg = one_device(cfg)
    mesh = one_device_mesh()
    params = abstract_params(cfg, mesh)
    rows = cfg.train.batch_size // cfg.train.grad_accum

    def first() -> Any:
        batch = abstract_batch(cfg, mesh, (rows, cfg.window + 1), BATCH_AXES)
        if isinstance(batch, dict):  # gpt eval scores the reference itself: no "ref" to read
            batch.pop("ref", None)
        ref = (params,) if eval_needs_reference(cfg) else ()  # a preference run's reference
        step = compile_eval_step(cfg, mesh, params, reference=bool(ref))
        return step.lower(params, batch, *ref).compile()

    program = f"eval step ({rows} windows of {cfg.window} tokens, the run's micro-batch)"
    prefix = (
        f"The eval step's {rows} rows are the run's micro-batch; to score the validation text "
        f"with fewer rows at a time: gpt eval --run {run} --text @val --batch-size N, where "
    )
    sized = Sized("gpt eval", program, "--batch-size", rows, _scorer_at(cfg, params), first, prefix)
    return plan_one_device(sized, cfg, stream)
