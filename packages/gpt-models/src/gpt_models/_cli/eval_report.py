"""``gpt eval --text`` / ``--task``: score files with a run's newest checkpoint and print the
results.

Each task's result is saved in the run as ``evals/<task>-<key>-<step>.json``, keyed by the task
file's path (``save_task_score``), so two task files of one name are both kept.

``--text @val`` names the run's own validation split, whatever its data is (the tail of its text, a
``val.bin``, a token store's validation shards): the token ids the loop's ``val_loss`` reads, scored
by the sliding-window protocol.
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from .._compute.preflight import Plan, check_fits
from .._config.schema import Config
from .._data.corpus import Tokenizer, load_dataset
from .._data.run_tokenizer import run_tokenizer
from .._errors import DataError
from .._inference.plans import plan_score
from .._inference.tasks import TaskScore, evaluate_task, save_task_score
from .._inference.text_eval import encode_file, score_documents, text_files
from .._runs.folders import load_run, run_config

VAL_TEXT = "@val"


def eval_files(args: argparse.Namespace, run: str, config: Config | None) -> int:
    """Print the ``--text`` score and the ``--task`` table; save each task's JSON in the run."""
    if run_preflight(args, plan_score(config or run_config(run), args.batch_size, sys.stderr)):
        return 0
    cfg, params, step = load_run(run, config)
    tok = run_tokenizer(run, cfg)
    if args.text is not None:
        docs, names = [], []
        for p in args.text:
            ids, found = _val_ids(cfg, tok) if p == VAL_TEXT else ([], [])
            files = [] if ids else text_files(p)
            docs += ids or [encode_file(tok, f) for f in files]
            names += found or [str(f) for f in files]
        s = score_documents(
            params,
            cfg,
            docs,
            tokenizer=tok,
            stride=args.stride,
            batch_size=args.batch_size,
            stream=sys.stderr,
            names=names,
        )
        nats_per_byte = s.bits_per_byte * math.log(2)
        print(
            f"text: {', '.join(names) if len(names) <= 3 else f'{len(names)} files'}: "
            f"{s.tokens:,} tokens, {s.bytes:,} bytes, {s.windows} "
            f"windows of {cfg.model.seq_len} (stride {s.stride}), step {step}\n"
            f"nats_per_token {s.nats_per_token:.6f}\nnats_per_byte {nats_per_byte:.6f}\n"
            f"bits_per_byte {s.bits_per_byte:.6f}"
        )
    if args.task is not None:
        opts = {"format": args.format, "tokenizer": tok, "batch_size": args.batch_size}
        scores = [evaluate_task(params, cfg, p, stream=sys.stderr, **opts) for p in args.task]
        names = _task_names(args.task, scores)
        print(_table([{**s.summary(), "task": n} for s, n in zip(scores, names, strict=True)]))
        for score, given in zip(scores, args.task, strict=True):
            print(f"saved {save_task_score(score, run, step)} ({given})")
    return 0


def _task_names(given: list[str], scores: list[TaskScore]) -> list[str]:
    """The table's task column: each file's name, or the path as given where names repeat."""
    names = [s.task for s in scores]
    return [p if names.count(n) > 1 else n for p, n in zip(given, names, strict=True)]


def run_preflight(args: argparse.Namespace, plan: Plan) -> bool:
    """Print the plan for ``--dry-run``; refuse a program that cannot fit. True: stop here."""
    if args.dry_run:
        print(
            f"Plan of gpt {args.command} (dry run: no checkpoint read, nothing written):\n"
            f"{plan.describe()}"
        )
    check_fits(plan)  # OutOfMemoryError: exit 2 with the knob's value that fits
    if args.dry_run:
        print("It fits: the same command without --dry-run runs it.")
    return bool(args.dry_run)


def _val_ids(cfg: Config, tok: Tokenizer) -> tuple[list[np.ndarray], list[str]]:
    """The token ids of the run's validation split, as its training read them, and their name;
    a mixture's sources each give theirs (scored as separate documents)."""
    data = load_dataset(
        cfg.data, seq_len=cfg.window, vocab_size=cfg.model.vocab_size, tokenizer=tok
    )
    if data.bytes_per_token is None:
        raise DataError(
            f"gpt eval --text {VAL_TEXT}: the run's data ({data.source}) is .bin token ids "
            "without a sidecar naming their tokenizer, so their bytes (and bits per byte) are "
            "unknown. Pass the text file(s) instead, or gpt eval --run RUN for its val_loss in "
            "nats/token."
        )
    parts = data.parts or (data,)
    ids = [np.asarray(p.val[:]).astype(np.int32) for p in parts]
    return ids, [f"the validation split of {p.source}" for p in parts]


def _table(rows: list[dict[str, object]]) -> str:
    cols = [
        "task",
        "format",
        "examples",
        "acc",
        "acc_norm",
        "chance",
        "truncated",
        "examples_per_s",
    ]
    cells = [[_cell(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = [cols, *cells]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in lines
    )


def _cell(value: object) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)
