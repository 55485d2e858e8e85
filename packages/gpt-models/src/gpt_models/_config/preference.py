"""``[preference]``: preference tuning (DPO, IPO, SimPO) on a store of prompt/chosen/rejected pairs.

The losses follow TRL's definitions (``_training/preference.py`` computes them). DPO and IPO
compare the policy with a reference, the weights the run starts from (``--init-from``); SimPO
needs none (it scores each answer by its mean log-probability, against a margin ``gamma``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # schema.py imports this module
    from .schema import Config

LOSSES = ("", "dpo", "ipo", "simpo")
REFERENCE_FREE = ("simpo",)


@dataclasses.dataclass(frozen=True)
class PreferenceConfig:
    """Preference tuning: with ``loss`` set, the run trains on a preference store's pairs.

    Attributes:
        loss: "dpo" (sigmoid of the reward margin), "ipo" (squared, on mean log-probs), "simpo"
            (reference-free, mean log-probs with a margin), or "" (no preference tuning).
        beta: the strength of the preference (the rewards are beta x log-probability ratios;
            SimPO's beta scales mean log-probabilities), > 0; TRL's default 0.1.
        label_smoothing: the share of pairs taken to be mislabelled (conservative DPO), in
            [0, 0.5); dpo and simpo.
        gamma: SimPO's target reward margin (TRL's simpo_gamma), >= 0.
        precompute_ref: compute the reference log-probabilities of every pair in one pass
            before training (TRL's precompute_ref_log_probs) instead of in each step; dpo, ipo.
    """

    loss: str = ""
    beta: float = 0.1
    label_smoothing: float = 0.0
    gamma: float = 0.5
    precompute_ref: bool = False

    @property
    def enabled(self) -> bool:
        """Whether the run is preference tuning (``loss`` is set)."""
        return bool(self.loss)

    @property
    def uses_reference(self) -> bool:
        """Whether the loss compares with the reference model (DPO, IPO; not SimPO)."""
        return self.enabled and self.loss not in REFERENCE_FREE


def preference_problems(cfg: Config) -> list[str]:
    """What is wrong with the ``[preference]`` section of ``cfg``."""
    p = cfg.preference
    if not p.enabled:
        return []
    problems = []
    if not (math.isfinite(p.beta) and p.beta > 0):
        problems.append(
            f"preference.beta = {p.beta} must be a finite number > 0: it scales the rewards "
            "(beta x log-probability ratio); e.g. --set preference.beta=0.1"
        )
    if not 0.0 <= p.label_smoothing < 0.5:
        problems.append(
            f"preference.label_smoothing = {p.label_smoothing} must be in [0, 0.5): the share of "
            "pairs taken as mislabelled (0 = plain DPO); e.g. 0.1"
        )
    if not (math.isfinite(p.gamma) and p.gamma >= 0):
        problems.append(
            f"preference.gamma = {p.gamma} must be a finite number >= 0: SimPO's target reward "
            "margin; e.g. 0.5"
        )
    if p.loss in REFERENCE_FREE and p.precompute_ref:
        problems.append(
            f"preference.precompute_ref = true with preference.loss = {p.loss!r}: SimPO uses no "
            "reference model, so there is nothing to precompute. Drop precompute_ref, or use "
            "--set preference.loss=dpo"
        )
    return problems
