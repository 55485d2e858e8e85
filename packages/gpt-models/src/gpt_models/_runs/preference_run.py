"""The checks a preference run (``[preference]``) passes when it is resolved: its data is a
preference store (or a mixture of them) and its reference (the weights it starts from) is
there."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

import blox as bx

from .._config.schema import Config
from .._data.corpus import Dataset
from .._data.packing import PackedExamples
from .._data.preference_mixture import PackedMixture
from .._errors import UsageError
from .._model.gpt import gpt
from .folders import load_run
from .hf_import import import_hf
from .init_source import InitSource


def is_preference_data(data: Dataset) -> bool:
    """Whether ``data`` is a preference store's pairs (``gpt prepare`` of chosen/rejected JSONL),
    or a mixture of such stores (``data.sources``)."""
    return isinstance(data.train, PackedExamples | PackedMixture) and data.train.group == 2


def check_preference(cfg: Config, data: Dataset, source: InitSource | None, resume: bool) -> None:
    """Refuse, in one line each, preference settings without preference data or without a
    reference, and a preference store trained without them.

    Raises:
        UsageError: what is missing, with the setting or flag that gives it.
    """
    p, pairs = cfg.preference, is_preference_data(data)
    if pairs and not p.enabled:
        what = "are preference stores" if cfg.data.sources else "is a preference store"
        raise UsageError(
            f"{_data_named(cfg, data)} {what} (chosen/rejected pairs), but "
            "preference.loss is not set, and next-token training would learn the rejected "
            "answers too. Add --set preference.loss=dpo (or ipo, simpo)."
        )
    if not p.enabled:
        return
    if not pairs:
        held = "plain text or token ids" if cfg.data.sources else f"{cfg.data.kind or 'text'} data"
        fix = (
            "give those stores as data.sources" if cfg.data.sources else "pass --set data.path=DIR"
        )
        raise UsageError(
            f"preference.loss = {p.loss!r} trains on chosen/rejected pairs, but "
            f"{_data_named(cfg, data)} holds {held}. Prepare the pairs with gpt prepare "
            f"PAIRS.jsonl --out DIR and {fix}."
        )
    if not cfg.init.source:
        raise UsageError(
            f"preference.loss = {p.loss!r} tunes a trained model and compares it with where it "
            "started, but the run has no init.source. Add --init-from RUN_OR_HF_DIR (a run "
            "folder or a Hugging Face folder)."
        )
    if resume and source is None and p.uses_reference:
        raise UsageError(
            f"The reference weights of this {p.loss} run, init.source = {cfg.init.source}, "
            "cannot be read any more, and every step compares with them. Put the folder back "
            "where it was, or point --set init.source= at a copy of it."
        )


def _data_named(cfg: Config, data: Dataset) -> str:
    """``data.path = DIR``, or ``data.sources (mixture of ...)``: the data, as messages name it."""
    if cfg.data.sources:
        return f"data.sources ({data.source})"
    return f"data.path = {cfg.data.path or '(the embedded corpus)'}"


def needs_reference_weights(cfg: Config) -> bool:
    """Whether a preference step reads the reference from a copy of the init weights: DPO or IPO
    with the reference computed in the step, without LoRA (whose reference is its own base
    weights with the adapters off, no copy)."""
    p = cfg.preference
    return p.uses_reference and not p.precompute_ref and not cfg.lora.enabled


def eval_needs_reference(cfg: Config) -> bool:
    """Whether an evaluation of a preference run (``gpt eval``) reads a copy of the init weights:
    DPO or IPO without LoRA, a precomputed reference included (an evaluation computes its own)."""
    p = cfg.preference
    return p.uses_reference and not cfg.lora.enabled


def reference_lines(cfg: Config, param_bytes: int) -> list[str]:
    """The pre-flight's line on a preference run's reference (none without preference)."""
    p = cfg.preference
    if not p.enabled:
        return []
    if not p.uses_reference:
        how = "none (SimPO compares the answers' mean log-probs alone)"
    elif p.precompute_ref:
        how = "precomputed in one pass before training; each batch carries its pairs' log-probs"
    elif cfg.lora.enabled:
        how = "in each step: the base weights with the adapters off (no copy)"
    else:
        how = f"in each step: a copy of the init weights ({param_bytes / 2**20:,.1f} MiB, counted)"
    return [f"reference        {how} ({p.loss}, beta {p.beta:g})"]


def load_reference(cfg: Config, source: InitSource, abstract: Any) -> Any:
    """The weights of ``source`` (the run's init) as the reference model's params: those of
    ``abstract`` (the run's abstract params, or their part without adapters), in the run's dtype
    and each placed by its sharding, as the run's first state places them.

    A source that was itself trained with LoRA gives its weights with its adapters merged in, as
    the run started from them.
    """
    if source.kind == "run":
        source_cfg, base, _ = load_run(source.path)
        lora = gpt(source_cfg).lora
        if lora is not None:
            base = lora.merge(base)
    else:
        _, base = import_hf(source.path)
    dtype = jnp.dtype(cfg.model.param_dtype)
    out = bx.Params(
        {
            path: spec.replace(
                value=jax.device_put(
                    jnp.asarray(base[path].value).astype(dtype), spec.value.sharding
                )
            )
            for path, spec in abstract.items()
        }
    )
    return out.locked() if abstract.is_locked else out
