"""What a command attaches to the training loop: evaluation, task scores, the end-of-run sample and
the metrics logger, as one value.

The loop knows when each is due (every ``train.eval_every`` steps and at the end; the sample once
the steps are done; the logger at every logged step), not what they are: the command builds them
(``gpt train`` from ``_inference``'s evaluator and sampler), so ``_training`` never imports
evaluation or sampling. Every hook is optional: a loop without ``evaluate`` logs no validation
loss, without ``sample`` writes no ``sample.txt``, without ``logger`` keeps no metrics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

import lox


class Evaluation(Protocol):
    """The validation loss of params, in ``unit``, and the metrics it logs (``val_loss`` first)."""

    unit: str

    def __call__(self, params: Any) -> float: ...

    def metrics(self, loss: float) -> dict[str, np.ndarray]: ...


@dataclasses.dataclass(frozen=True)
class Hooks:
    """The training loop's hooks.

    Attributes:
        evaluate: the validation loss, at ``train.eval_every`` steps, at the end and (for a run
            started from other weights) once before the first step.
        tasks: more scores of the same params at the same moments (``eval.tasks``), by name.
        sample: the text of ``sample.txt``, from the final params.
        logger: where the metrics go (a lox logger; ``metrics/`` of the run folder for ``gpt
            train``).
        reference: a preference run's reference weights, a copy of the init weights that every
            step reads beside the state (``preference.prepare_reference``); None for any other.
    """

    evaluate: Evaluation | None = None
    tasks: Callable[[Any], dict[str, float]] | None = None
    sample: Callable[[Any], str] | None = None
    logger: lox.Logger | None = None
    reference: Any = None
