"""``gpt eval --text`` / ``--task``: score files with a run's newest checkpoint and print the results.

``--text @val`` names the run's own validation text (the tail of its text data), so the sliding
window protocol can be compared with the loop's ``val_loss`` on the same text.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from pathlib import Path

from .._config.schema import Config
from .._data.corpus import bin_files, text_splits
from .._data.run_tokenizer import run_tokenizer
from .._errors import DataError
from .._runs.folders import load_run, run_config
from .._training.tasks import evaluate_task, save_task_score
from .._training.text_eval import evaluate_text
from .._training.use_preflight import UsePlan, check_use_fits, plan_score

VAL_TEXT = "@val"


def eval_files(args: argparse.Namespace, run: str, config: Config | None) -> int:
    """Print the ``--text`` score and the ``--task`` table; save each task's JSON in the run."""
    if run_preflight(args, plan_score(config or run_config(run), args.batch_size)):
        return 0
    cfg, params, step = load_run(run, config)
    tok = run_tokenizer(run, cfg)
    if args.text is not None:
        with tempfile.TemporaryDirectory() as tmp:
            paths = [_val_file(cfg, Path(tmp)) if p == VAL_TEXT else p for p in args.text]
            s = evaluate_text(
                params, cfg, paths, tokenizer=tok, stride=args.stride, batch_size=args.batch_size,
                stream=sys.stderr,
            )  # fmt: skip
        nats_per_byte = s.bits_per_byte * math.log(2)
        print(
            f"text: {s.files} file(s), {s.tokens:,} tokens, {s.bytes:,} bytes, {s.windows} "
            f"windows of {cfg.model.seq_len} (stride {s.stride}), step {step}\n"
            f"nats_per_token {s.nats_per_token:.6f}\nnats_per_byte {nats_per_byte:.6f}\n"
            f"bits_per_byte {s.bits_per_byte:.6f}"
        )
    if args.task is not None:
        opts = {"format": args.format, "tokenizer": tok, "batch_size": args.batch_size}
        scores = [evaluate_task(params, cfg, p, stream=sys.stderr, **opts) for p in args.task]
        print(_table([s.summary() for s in scores]))
        for score in scores:
            print(f"saved {save_task_score(score, run, step)}")
    return 0


def run_preflight(args: argparse.Namespace, plan: UsePlan) -> bool:
    """Print the plan for ``--dry-run``; refuse a program that cannot fit. True: stop here."""
    if args.dry_run:
        print(f"Plan of gpt {args.command} (dry run: no checkpoint read, nothing written):\n"
              f"{plan.describe()}")  # fmt: skip
    check_use_fits(plan)  # OutOfMemoryError: exit 2 with the knob's value that fits
    if args.dry_run:
        print("It fits: the same command without --dry-run runs it.")
    return bool(args.dry_run)


def _val_file(cfg: Config, tmp: Path) -> Path:
    if bin_files(cfg.data) is not None:
        raise DataError(
            f"gpt eval --text {VAL_TEXT}: the run's data ({cfg.data.path}) is .bin token ids, not "
            "text, so it has no validation text to score. Pass the text file(s) instead."
        )
    _, val = text_splits(cfg.data)
    path = tmp / "validation.txt"
    path.write_bytes(val)
    return path


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
