"""Two local CPU processes (2 devices each, a 4-device global mesh) train like one 4-device process.

Workers are subprocesses, waited on while they make progress (the root conftest's ``patience``): a
``jax.distributed`` peer that never arrives would otherwise hang (and abort) the test process.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

STEPS = 5

WORKER = """
import sys
from gpt_models import main
sys.exit(main(sys.argv[1:]))
"""

ARGS = [
    "--set", "model.seq_len=32", "--set", "model.d_model=32", "--set", "model.n_layers=2",
    "--set", "model.n_heads=2", "--set", f"train.steps={STEPS}", "--set", "train.batch_size=8",
    "--set", "train.grad_accum=2", "--set", "train.warmup_steps=1", "--set", "train.eval_every=5",
    "--set", "train.eval_batches=1", "--set", "train.checkpoint_every=0", "--set", "log.every=1",
    "--set", "sample.max_new_tokens=4", "--mesh", "data=2,fsdp=2",
]  # fmt: skip


_patience = None  # the root conftest's, for this module's helpers


@pytest.fixture(autouse=True)
def _set_patience(patience):
    # Subprocesses are waited on while they make progress, not for a fixed time.
    global _patience
    _patience = patience


def _env(devices: int) -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"}
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    for var in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        env.pop(var, None)
    return env


def _start(args: list[str], devices: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, *args], env=_env(devices), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _finish(procs: list[subprocess.Popen]) -> None:
    outputs = _patience.communicate(procs, peers=True)  # while they make progress
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, f"worker failed ({p.returncode}):\n{out}\n{err[-4000:]}"


def _losses(run) -> np.ndarray:
    import lox

    logs = lox.load(run / "metrics" / "run_0")
    return np.asarray(logs["loss"]).reshape(-1)


@pytest.mark.slow
def test_two_processes_match_one_process_with_four_devices(tmp_path, free_ports):
    (port,) = free_ports(1)
    base = ["train", "--out", str(tmp_path), *ARGS]
    two = [
        _start([*base, "--name", "two", "--coordinator", f"127.0.0.1:{port}",
                "--num-processes", "2", "--process-id", str(i)], devices=2)
        for i in range(2)
    ]  # fmt: skip
    _finish(two)
    _finish([_start([*base, "--name", "one"], devices=4)])
    one_losses, two_losses = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert one_losses.shape == (STEPS,)
    print("one process, 4 devices:", one_losses.tolist())
    print("two processes x 2 devices:", two_losses.tolist())
    np.testing.assert_allclose(two_losses, one_losses, rtol=0, atol=1e-6)
    assert (tmp_path / "two" / "sample.txt").exists()
