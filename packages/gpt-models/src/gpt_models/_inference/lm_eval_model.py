"""The model type lm-evaluation-harness runs on a gpt run: ``gpt-models`` in lm_eval's registry.

This module subclasses lm_eval's ``LM`` when it is imported, so only ``lm_eval.py`` imports it,
after checking that lm_eval is installed. Each request type is answered by the code ``gpt eval``
and ``gpt sample`` run, so the harness measures what they measure:

- ``loglikelihood(context, continuation)``: the windows of ``gpt eval --task`` (context and
  continuation tokenized separately and joined, the context cut from the left to fit) scored by
  ``score_windows``; ``is_greedy`` when every continuation token is the model's argmax.
- ``loglikelihood_rolling(text)``: the sliding windows of ``gpt eval --text`` (same ``stride``),
  summed per text. These models have no beginning-of-text token, so a text's first token has no
  context and is not scored, as in ``gpt eval --text``; an empty context in ``loglikelihood``
  likewise makes the continuation's first token the context.
- ``generate_until(context, gen_kwargs)``: ``generate`` (KV cache; greedy unless ``do_sample``),
  requests of one prompt length batched together, each output cut at its first ``until`` string.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple, TextIO

import jax
import numpy as np
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from .._compute.preflight import check_fits
from .._config.schema import Config
from .._data.byte_tokenizer import ByteTokenizer
from .._data.corpus import Tokenizer
from .._data.run_tokenizer import decode_lenient, run_tokenizer
from .._distributed.mesh import on_one_device
from .._errors import DataError, UsageError
from .._model.generate import generate
from .._runs.folders import load_run, run_config
from .plans import plan_score
from .scoring import score_windows
from .tasks import TaskExample, _windows
from .text_eval import text_windows

MODEL_NAME = "gpt-models"
# lm-eval's generation options this model honours; others are refused rather than ignored.
GEN_KWARGS = ("until", "max_gen_toks", "do_sample", "temperature", "top_k", "top_p")


class LoadedRun(NamedTuple):
    """A run in memory, for :class:`RunLM`: its config, parameters and tokenizer (None: bytes)."""

    config: Config
    params: Any
    tokenizer: Tokenizer | None = None


@register_model(MODEL_NAME)
class RunLM(LM):  # type: ignore[misc]
    """A gpt run for lm-evaluation-harness: ``model="gpt-models", model_args="run=RUN"``.

    Args:
        run: a run folder made by ``gpt train``: its newest checkpoint is read after the memory
            pre-flight of ``gpt eval`` (the scorer at ``batch_size`` rows) has passed.
        batch_size: rows per model call (scored windows or generated sequences).
        stride: tokens between the windows of ``loglikelihood_rolling`` (default
            ``model.seq_len // 2``, as ``gpt eval --text``).
        seed: random seed of sampled generations (``do_sample``); greedy ones ignore it.
        max_gen_toks: tokens generated when a task's ``generation_kwargs`` sets no
            ``max_gen_toks`` (lm-eval's Hugging Face model uses 256 too); capped by the context.
        loaded: instead of ``run``: a run in memory, its config, parameters and tokenizer.
        progress: where progress lines go (e.g. ``sys.stderr``); default none.
        harness: the options lm-eval passes to every model type and this one does not use:
            ``device`` (JAX runs on its default device) and ``max_batch_size`` (for
            ``batch_size="auto"``, not supported).

    Raises:
        UsageError: no run and no params, a ``batch_size`` or ``stride`` out of range, or a run
            whose scorer does not fit in memory (``OutOfMemoryError``).
    """

    def __init__(
        self,
        run: str | None = None,
        batch_size: int | str = 8,
        stride: int | None = None,
        seed: int = 0,
        max_gen_toks: int = 256,
        *,
        loaded: LoadedRun | None = None,
        progress: TextIO | None = None,
        **harness: Any,
    ) -> None:
        super().__init__()
        del harness  # lm-eval's options for every model type, unused here (see Args)
        self.batch_size = _positive("batch_size", batch_size, "8")
        self.max_gen_toks = _positive("max_gen_toks", max_gen_toks, "256")
        if run is not None:
            loaded = LoadedRun(*_load(str(run), self.batch_size))
        if loaded is None:
            raise UsageError(
                f"The {MODEL_NAME} model of lm-eval needs a run folder: model_args='run=RUN' "
                "(e.g. run=runs/tiny-20250101-120000), or params and config in Python."
            )
        config = loaded.config
        self.config, self.params = config, on_one_device(loaded.params)
        self.tokenizer = loaded.tokenizer or ByteTokenizer()
        seq_len = config.model.seq_len
        self.stride = seq_len // 2 if stride is None else int(stride)
        if not 1 <= self.stride <= seq_len:
            raise UsageError(
                f"{MODEL_NAME}: stride = {stride} is out of range; it must be 1..model.seq_len "
                f"({seq_len}), the tokens between the windows of a rolling log-likelihood. Use "
                f"{max(seq_len // 2, 1)} (the default, as gpt eval --text) or {seq_len}."
            )
        self.key = jax.random.key(int(seed))
        self.progress = progress

    def loglikelihood(
        self, requests: list[Any], disable_tqdm: bool = False
    ) -> list[tuple[float, bool]]:
        """``(log p(continuation | context), is_greedy)`` of each ``(context, continuation)``."""
        examples = [TaskExample(r.args[0], (r.args[1],), 0, _where(r)) for r in requests]
        windows, spans, _ = _windows(examples, self.tokenizer, self.config.model.seq_len)
        out = []
        for (logp, greedy), k, r in zip(
            self._score(windows, "loglikelihood"), spans, requests, strict=True
        ):
            k = min(k, len(logp))  # an empty context: the continuation's first token is context
            if k == 0:
                raise DataError(
                    f"{_where(r)}: continuation {r.args[1]!r} is one token with an empty context, "
                    "so no token of it can be scored (these models have no beginning-of-text "
                    "token). Give the task a context (doc_to_text) or a longer continuation."
                )
            out.append((float(logp[-k:].sum()), bool(greedy[-k:].all())))
            self.cache_hook.add_partial("loglikelihood", r.args, out[-1])
        return out

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Log-likelihood of each whole text, in the sliding windows of ``gpt eval --text``."""
        windows, starts, owners = [], [], []
        for i, r in enumerate(requests):
            ids = np.asarray(self.tokenizer.encode(r.args[0]), np.int32)
            more, firsts = text_windows(ids, self.config.model.seq_len, self.stride)
            windows += more
            starts += firsts
            owners += [i] * len(more)
        totals = [0.0] * len(requests)
        scores = self._score(windows, "loglikelihood_rolling")
        for (logp, _), k, i in zip(scores, starts, owners, strict=True):
            totals[i] += float(logp[k:].sum())
        for r, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", r.args, total)
        return totals

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        """Each context continued by ``generate``, cut at the first of its ``until`` strings."""
        jobs = [self._job(r) for r in requests]
        groups: dict[tuple, list[int]] = collections.defaultdict(list)
        for i, (ids, n, options, _, _) in enumerate(jobs):
            groups[(len(ids), n, options)].append(i)
        out = [""] * len(requests)
        done = 0
        for (_, n, options), members in groups.items():
            for start in range(0, len(members), self.batch_size):
                chunk = members[start : start + self.batch_size]
                for i, text in zip(chunk, self._generate(jobs, chunk, n, options), strict=True):
                    out[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                done += len(chunk)
                self._say(
                    f"\rlm-eval generate_until: {done}/{len(requests)} requests",
                    done == len(requests),
                )
        return out

    def _job(self, request: Any) -> tuple[np.ndarray, int, tuple, list[str], str]:
        """``(prompt ids, new tokens, (temperature, top_k, top_p), until, where)`` of a request."""
        context, kwargs = request.args
        where = _where(request)
        unknown = sorted(set(kwargs) - set(GEN_KWARGS))
        if unknown:
            raise UsageError(
                f"{where}: generation_kwargs {unknown} are not supported by the {MODEL_NAME} "
                f"model; it takes {list(GEN_KWARGS)}. Remove them from the task's "
                "generation_kwargs (or the --gen_kwargs given to lm-eval)."
            )
        until = kwargs.get("until", [])
        until = [until] if isinstance(until, str) else list(until)
        seq_len = self.config.model.seq_len
        n = min(
            _positive(
                f"{where}: max_gen_toks", kwargs.get("max_gen_toks", self.max_gen_toks), "256"
            ),
            seq_len - 1,
        )
        ids = np.asarray(self.tokenizer.encode(context), np.int32)[-(seq_len - n) :]
        if len(ids) == 0:
            raise DataError(
                f"{where}: the context is empty, but generation continues a text and needs at "
                "least one token. Give the task a context (doc_to_text)."
            )
        sampled = bool(kwargs.get("do_sample", False))
        temperature = float(kwargs.get("temperature", 1.0)) if sampled else 0.0
        top_k, top_p = kwargs.get("top_k"), kwargs.get("top_p")
        options = (temperature, top_k if sampled else None, top_p if sampled else None)
        return ids, n, options, until, where

    def _generate(self, jobs: list, chunk: list[int], n: int, options: tuple) -> list[str]:
        # Rows are padded to a power of two (copies of the last prompt, dropped after): a handful
        # of compiled programs per prompt length, not one per batch size.
        rows = [jobs[i][0] for i in chunk]
        rows += [rows[-1]] * ((1 << (len(rows) - 1).bit_length()) - len(rows))
        stop = getattr(self.tokenizer, "eot_id", None)
        temperature, top_k, top_p = options
        try:
            out = generate(
                self.params,
                np.stack(rows),
                self.config.model,
                max_new_tokens=n,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                key=jax.random.fold_in(self.key, chunk[0]),
                stop_token=stop,
            )
        except ValueError as err:  # bad sampling options of a task (temperature < 0, ...)
            raise UsageError(f"{jobs[chunk[0]][4]}: generation_kwargs: {err}") from err
        tokens = np.asarray(out)[:, rows[0].shape[0] :]
        texts = []
        for i, new in zip(chunk, tokens, strict=False):
            if stop is not None and (hits := np.flatnonzero(new == stop)).size:
                new = new[: hits[0]]
            text = decode_lenient(self.tokenizer, new)
            for s in jobs[i][3]:
                if s:
                    text = text.split(s, 1)[0]
            texts.append(text)
        return texts

    def _score(self, windows: list[np.ndarray], label: str) -> list[tuple[np.ndarray, np.ndarray]]:
        return score_windows(
            self.params,
            self.config.model,
            windows,
            batch_size=self.batch_size,
            label=f"lm-eval {label}",
            stream=self.progress,
        )

    def _say(self, line: str, last: bool) -> None:
        if self.progress is not None:
            print(line, end="\n" if last else "", file=self.progress, flush=True)


def _load(run: str, batch_size: int) -> tuple[Config, Any, Tokenizer]:
    """The run's config, params and tokenizer, once the scorer's memory pre-flight has passed."""
    check_fits(plan_score(run_config(run), batch_size))
    cfg, params, _ = load_run(run)
    return cfg, params, run_tokenizer(run, cfg)


def _positive(name: str, value: Any, example: str) -> int:
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1 or str(number) != str(value).strip():
        raise UsageError(
            f"{MODEL_NAME}: {name} = {value!r}; expected a whole number >= 1, e.g. {example}"
            + (
                " ('auto' is not supported: gpt eval --run RUN --dry-run --batch-size N says "
                "whether N rows fit)."
                if name == "batch_size"
                else "."
            )
        )
    return number


def _where(request: Any) -> str:
    return f"lm-eval task {request.task_name} document {request.doc_id}"
