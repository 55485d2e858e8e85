"""``gpt eval --lm-eval TASK[,TASK] [--include-path DIR]``: lm-evaluation-harness tasks on a run.

The flags, the extra and the task names are checked before JAX compiles anything; then the
memory pre-flight of ``gpt eval --task`` (the same scorer at ``--batch-size`` rows) runs before
the checkpoint is read, and ``--dry-run`` stops after it. Each task's results are printed with
what each metric measures and saved as ``RUN/evals/lm-eval/<task>-<step>.json``; lm-eval's own
output (warnings, progress bars) goes to ``RUN/evals/lm-eval/lm-eval.log``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .._data.run_tokenizer import run_tokenizer
from .._errors import UsageError
from .._inference.lm_eval import (
    HarnessScore,
    check_include_path,
    check_task_data,
    require_lm_eval,
    run_tasks,
    save_harness_score,
    task_manager,
    task_names,
)
from .._inference.plans import plan_score
from .._runs.folders import load_run, run_config
from .empty_values import refuse_empty
from .run_args import EVAL_KEYS, chosen_run, read_run_config
from .third_party_log import output_to_log

LOG = "lm-eval.log"  # lm-eval's own output, in RUN/evals/lm-eval/

# What each of lm-eval's common metrics measures, in the units it is printed in.
MEASURES = {
    "acc": "share of examples whose most likely choice (summed log-prob) is the answer",
    "acc_norm": "as acc, with each choice's log-prob divided by its length in characters",
    "acc_bytes": "as acc, with each choice's log-prob divided by its length in UTF-8 bytes",
    "acc_mutual_info": "as acc, with log-probs less those of the choice without its context",
    "exact_match": "share of examples whose answer equals the target exactly",
    "perplexity": "exp(-mean log-prob of the target) over examples (1 = certain)",
    "word_perplexity": "exp(nats per word) over all the text (lower is better)",
    "byte_perplexity": "exp(nats per UTF-8 byte) over all the text (lower is better)",
    "bits_per_byte": "bits per UTF-8 byte of the text, log2 of byte_perplexity",
    "f1": "F1 score of the predicted choices (0..1)",
    "mcc": "Matthews correlation of the predicted choices (-1..1)",
}


def lm_eval_command(args: argparse.Namespace) -> int:
    """Run ``--lm-eval``'s tasks on the run's newest checkpoint; print and save the results."""
    from .eval_report import run_preflight

    _check_flags(args)
    names = task_names(args.lm_eval)
    check_include_path(args.include_path)
    lm_eval = require_lm_eval()
    run = chosen_run(args)
    config = read_run_config(args, run, EVAL_KEYS)
    manager = task_manager(names, args.include_path)
    check_task_data(manager, names)  # offline: one line now, not minutes of retries
    if run_preflight(args, plan_score(config or run_config(run), args.batch_size, sys.stderr)):
        return 0
    cfg, params, step = load_run(run, config)
    # lm-eval's warnings, progress bars and `git describe` errors: to RUN/evals/lm-eval/lm-eval.log
    with output_to_log(Path(run) / "evals" / "lm-eval", LOG, "lm-eval") as terminal:
        scores = run_tasks(
            manager,
            names,
            params,
            cfg,
            tokenizer=run_tokenizer(run, cfg),
            batch_size=args.batch_size,
            stride=args.stride,
            stream=terminal,
        )
    print(
        f"lm-eval {lm_eval.__version__} on {run} at step {step} "
        f"({args.batch_size} rows per model call)\n{table(scores)}"
    )
    for score in scores:
        print(f"saved {save_harness_score(score, run, step)}")
    return 0


def _check_flags(args: argparse.Namespace) -> None:
    # `--lm-eval "$TASKS"` with TASKS unset: name the flag (the task list's own check cannot).
    refuse_empty(
        "gpt eval",
        [
            ("--lm-eval", args.lm_eval, "hellaswag,arc_easy"),
            ("--include-path", args.include_path, "my_tasks/"),
        ],
    )
    if args.lm_eval is None:
        raise UsageError(
            f"gpt eval --include-path {args.include_path} adds task YAMLs to --lm-eval; pass "
            "--lm-eval TASK[,TASK] too (the task names the YAMLs define)."
        )
    other = [
        flag
        for flag, value in (("--text", args.text), ("--task", args.task), ("--format", args.format))
        if value is not None
    ]
    if other:
        raise UsageError(
            f"gpt eval --lm-eval runs the harness's tasks alone, but {' and '.join(other)} "
            "was given too. Run them as two commands: gpt eval --run RUN --lm-eval TASKS, and "
            f"gpt eval --run RUN {' '.join(other)} ..."
        )


def table(scores: list[HarnessScore]) -> str:
    """One line per (task, metric): value, its standard error, examples, shots, what it measures."""
    head = ["task", "metric", "value", "stderr", "examples", "shots", "what was measured"]
    rows = [head]
    for s in scores:
        for metric, value in s.metrics.items():
            err = s.stderr.get(metric)
            rows.append(
                [
                    s.task,
                    metric,
                    f"{value:.4f}",
                    "-" if err is None else f"{err:.4f}",
                    "-" if s.examples is None else str(s.examples),
                    "-" if s.num_fewshot is None else str(s.num_fewshot),
                    MEASURES.get(metric.partition(",")[0], "as the task's YAML defines it"),
                ]
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    return "\n".join(
        "  ".join([*(v.ljust(w) for v, w in zip(r, widths, strict=False)), r[-1]]) for r in rows
    )
