"""Parity with TRL: the project's DPO, IPO and SimPO losses and reward metrics against TRL's own
loss function computed in torch, on the same answers' log-probs (the ``interop`` nox session
installs torch and trl; without them this file skips).

TRL's ``CPOTrainer.cpo_loss`` is its one preference loss that takes log-probs as arguments: it is
SimPO for ``loss_type="simpo"``, and DPO (with its conservative label smoothing) or IPO for
``"sigmoid"``/``"ipo"`` when given the log-ratios to the reference, ``policy - reference``, as
``DPOTrainer`` forms them.
"""

import types
import warnings

import jax.numpy as jnp
import numpy as np
import pytest

from gpt_models import PreferenceConfig
from gpt_models.internal import preference_sums

pytestmark = pytest.mark.interop  # run by the interop nox session (noxfile.py: INTEROP_TESTS)

torch = pytest.importorskip("torch")
pytest.importorskip("trl")
with warnings.catch_warnings():  # trl.experimental says it is experimental
    warnings.simplefilter("ignore")
    try:
        from trl.experimental.cpo import CPOTrainer
    except ImportError:  # trl before 0.24 kept it at the top level
        from trl import CPOTrainer

N = 12  # pairs, one per row


def _batch(seed: int):
    """Answers' summed log-probs and token counts as the project lays them out, ``(N, 2, W)``
    with each row's pair at segment 1, and the same as flat arrays."""
    rng = np.random.default_rng(seed)
    logps = -rng.uniform(2.0, 30.0, size=(N, 2)).astype(np.float32)
    ref = logps + rng.normal(0.0, 1.5, size=(N, 2)).astype(np.float32)
    counts = rng.integers(1, 20, size=(N, 2)).astype(np.float32)

    def laid(x):
        out = np.zeros((N, 2, 4), np.float32)
        out[:, :, 1] = x
        return jnp.asarray(out)

    valid = np.zeros((N, 4), np.float32)
    valid[:, 1] = 1
    return (laid(logps), laid(counts)), laid(ref), jnp.asarray(valid), (logps, ref, counts)


def _trl(loss_type: str, p: PreferenceConfig, chosen, rejected):
    trainer = types.SimpleNamespace(
        alpha=0.0,
        accelerator=types.SimpleNamespace(device="cpu"),
        loss_type=loss_type,
        beta=p.beta,
        label_smoothing=p.label_smoothing,
        simpo_gamma=p.gamma,
    )
    losses, good, bad = CPOTrainer.cpo_loss(
        trainer,
        torch.tensor(chosen, dtype=torch.float64),
        torch.tensor(rejected, dtype=torch.float64),
    )
    return {
        "loss": losses.mean().item(),
        "rewards/chosen": good.mean().item(),
        "rewards/rejected": bad.mean().item(),
        "rewards/margins": (good - bad).mean().item(),
        "rewards/accuracies": (good > bad).double().mean().item(),
    }


@pytest.mark.parametrize(
    "p",
    [
        PreferenceConfig(loss="dpo", beta=0.1),
        PreferenceConfig(loss="dpo", beta=0.5, label_smoothing=0.2),
        PreferenceConfig(loss="ipo", beta=0.3),
        PreferenceConfig(loss="simpo", beta=2.0, gamma=1.0, label_smoothing=0.1),
    ],
    ids=["dpo", "dpo-smoothed", "ipo", "simpo"],
)
def test_the_losses_and_rewards_match_trl(p):
    policy, ref, valid, (logps, ref_np, counts) = _batch(seed=len(p.loss))
    sums = preference_sums(policy, None if p.loss == "simpo" else ref, valid, p)
    ours = {k: float(v) / float(sums["pairs"]) for k, v in sums.items() if k != "pairs"}
    if p.loss == "simpo":  # mean log-probs per token, no reference
        theirs = _trl("simpo", p, *(logps / counts).T)
    elif p.loss == "ipo":  # log-ratios per token
        theirs = _trl("ipo", p, *((logps - ref_np) / counts).T)
    else:
        theirs = _trl("sigmoid", p, *(logps - ref_np).T)
    for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-4), key
    mean = logps / counts if p.loss in ("ipo", "simpo") else logps
    assert ours["logps/chosen"] == pytest.approx(float(mean[:, 0].mean()), abs=1e-4)
    assert ours["logps/rejected"] == pytest.approx(float(mean[:, 1].mean()), abs=1e-4)
