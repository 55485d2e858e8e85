"""Two local CPU processes (2 devices each, a 4-device global mesh) started the way SLURM starts
tasks, with no distributed flags, find each other by JAX's cluster detection and train like one
4-device process; their checkpoint resumes on one process with 2 devices and another mesh shape.
Two processes started as Open MPI's mpirun starts ranks find each other too, and refuse a mesh
their devices cannot fill.

Workers are subprocesses, waited on while they make progress (the root conftest's ``patience``): a
``jax.distributed`` peer that never arrives would otherwise hang (and abort) the test process.
"""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

STEPS = 4

WORKER = """
import sys
from gpt_models import main
sys.exit(main(sys.argv[1:]))
"""

ARGS = [
    "--set", "model.seq_len=32", "--set", "model.d_model=32", "--set", "model.n_layers=2",
    "--set", "model.n_heads=2", "--set", f"train.steps={STEPS}", "--set", "train.batch_size=8",
    "--set", "train.grad_accum=2", "--set", "train.warmup_steps=1", "--set", f"train.eval_every={STEPS}",
    "--set", "train.eval_batches=1", "--set", "train.checkpoint_every=2", "--set", "log.every=1",
    "--set", "sample.max_new_tokens=4", "--mesh", "data=2,fsdp=2",
]  # fmt: skip


_patience = None  # the root conftest's, for this module's helpers


@pytest.fixture(autouse=True)
def _set_patience(patience):
    # Subprocesses are waited on while they make progress, not for a fixed time.
    global _patience
    _patience = patience


def _env(devices: int, scheduler: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled", **scheduler}
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    for var in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        env.pop(var, None)
    if not scheduler:
        env = {k: v for k, v in env.items() if not k.startswith(("SLURM_", "OMPI_"))}
    return env


def _start(
    args: list[str], devices: int, scheduler: dict[str, str] | None = None
) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, *args], env=_env(devices, scheduler or {}), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _finish(procs: list[subprocess.Popen]) -> list[str]:
    outputs = _patience.communicate(procs, peers=True)  # while they make progress
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, f"worker failed ({p.returncode}):\n{out}\n{err[-4000:]}"
    return [err for _, err in outputs]


def _slurm_task(i: int, port: int) -> dict[str, str]:
    # What srun sets in task i of a 2-task job step on one node; JAX_COORDINATOR_PORT (JAX's own
    # override of the port derived from the job id) keeps clear of ports in use on this machine.
    return {
        "SLURM_JOB_ID": "4242", "SLURM_STEP_NODELIST": "localhost", "SLURM_NTASKS": "2",
        "SLURM_PROCID": str(i), "SLURM_LOCALID": str(i), "JAX_COORDINATOR_PORT": str(port),
    }  # fmt: skip


def _losses(run) -> np.ndarray:
    import lox

    logs = lox.load(run / "metrics" / "run_0")
    return np.asarray(logs["loss"]).reshape(-1)


@pytest.mark.slow
def test_slurm_tasks_match_one_process_and_resume_on_fewer_devices(tmp_path, free_ports):
    (port,) = free_ports(1)
    base = ["train", "--out", str(tmp_path), *ARGS]
    pair = [_start([*base, "--name", "two"], 2, _slurm_task(i, port)) for i in range(2)]
    logs = _finish(pair)
    assert f"process 0 of 2 (SLURM job 4242, coordinator localhost:{port})" in logs[0]
    _finish([_start([*base, "--name", "one"], devices=4)])
    one_losses, two_losses = _losses(tmp_path / "one"), _losses(tmp_path / "two")
    assert one_losses.shape == (STEPS,)
    print("one process, 4 devices:", one_losses.tolist())
    print("two SLURM tasks x 2 devices:", two_losses.tolist())
    print("max |two tasks - one process|:", np.abs(two_losses - one_losses).max())
    np.testing.assert_allclose(two_losses, one_losses, rtol=0, atol=1e-5)
    assert (tmp_path / "two" / "sample.txt").exists()

    # Preempted after step 2: the job comes back as one process with 2 devices, mesh fsdp=2.
    shutil.rmtree(tmp_path / "two" / "checkpoints" / str(STEPS))
    resume = ["train", "--resume", str(tmp_path / "two"), "--mesh", "data=1,fsdp=2"]
    _finish([_start(resume, devices=2)])
    resumed = _losses(tmp_path / "two")[STEPS:]
    print("resumed on 1 process x 2 devices:", resumed.tolist())
    print("max |resumed - uninterrupted|:", np.abs(resumed - one_losses[2:]).max())
    np.testing.assert_allclose(resumed, one_losses[2:], rtol=0, atol=1e-4)


def _open_mpi_task(i: int, port: int) -> dict[str, str]:
    # What Open MPI 4's mpirun sets in rank i of a 2-process job on one host.
    return {
        "OMPI_MCA_orte_hnp_uri": "1531576320.0;tcp://127.0.0.1:34911", "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_RANK": str(i), "OMPI_COMM_WORLD_LOCAL_RANK": str(i),
        "JAX_COORDINATOR_PORT": str(port),
    }  # fmt: skip


@pytest.mark.slow
def test_open_mpi_ranks_too_few_for_the_mesh_are_refused_in_one_line(tmp_path, free_ports):
    # Two mpirun ranks of 2 devices each find each other (Open MPI's variables, no flags), then,
    # asked for a mesh of 8, each refuses in one line naming the job's devices (exit 2), before
    # the run folder is made.
    (port,) = free_ports(1)
    args = ["train", "--out", str(tmp_path), "--name", "bad", *ARGS[:-2], "--mesh", "data=8"]
    pair = [_start(args, 2, _open_mpi_task(i, port)) for i in range(2)]
    outputs = _patience.communicate(pair, peers=True)
    for i, (p, (_, err)) in enumerate(zip(pair, outputs)):
        assert f"process {i} of 2 (Open MPI job 1531576320.0, coordinator 127.0.0.1:{port})" in err
        lines = [line for line in err.splitlines() if line.startswith("gpt: error:")]
        assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in err, err[-3000:]
        assert "needs 8 devices, but 4 are available (2 processes x 2 cpu devices)" in lines[0]
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_a_two_process_dry_run_estimates_each_hosts_memory_from_its_own_devices(
    tmp_path, free_ports
):
    # Two SLURM tasks of 2 devices each plan one 4-device step; each process holds 2 of them, so
    # its host estimate adds the program twice, not once per device of the job. Nothing is written.
    (port,) = free_ports(1)
    args = ["train", "--out", str(tmp_path), "--name", "plan", *ARGS, "--dry-run"]
    pair = [_start(args, 2, _slurm_task(i, port)) for i in range(2)]
    outputs = _patience.communicate(pair, peers=True)
    for p, (out, err) in zip(pair, outputs):
        assert p.returncode == 0, f"worker failed ({p.returncode}):\n{out}\n{err[-4000:]}"
    plan = outputs[0][0] + outputs[0][1]
    assert "train step (4 cpu device(s))" in plan, plan[-3000:]
    assert "plus the program on each of its 2 device(s))" in plan, plan[-3000:]
    assert not (tmp_path / "plan").exists()
