import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest

import paramspec as ps

HERE = Path(__file__).parent


def test_process_info_single_process():
    info = ps.process_info()
    assert info == ps.ProcessInfo(0, 1, jax.local_device_count(), jax.device_count())


def test_make_global_batch_single_process(device_grid):
    mesh = ps.make_mesh(device_grid, ("data", "model"))
    local = {"tokens": np.arange(32).reshape(8, 4), "mask": np.ones(8, bool)}
    rules = {"batch": ("data", "model"), "seq": None}
    batch = ps.make_global_batch(local, ("batch",), mesh, rules)
    assert batch["tokens"].shape == (8, 4)
    assert tuple(batch["tokens"].sharding.spec) == (("data", "model"), None)
    rows = 8 // (device_grid[0] * device_grid[1])
    assert {s.data.shape for s in batch["tokens"].addressable_shards} == {(rows, 4)}
    np.testing.assert_array_equal(batch["tokens"], local["tokens"])
    assert tuple(batch["mask"].sharding.spec) == (("data", "model"),)
    seq = ps.make_global_batch(local["tokens"], ("batch", "seq"), mesh, rules)
    assert tuple(seq.sharding.spec) == (("data", "model"), None)


def test_make_global_batch_errors_name_the_leaf():
    mesh = ps.make_mesh((-1,), ("data",))
    with pytest.raises(ps.ShardingError) as info:
        ps.make_global_batch(
            {"x": np.ones((8, 2)), "y": np.ones(8)}, ("btch", None), mesh, {"batch": "data"}
        )
    text = str(info.value)
    assert "batch leaf x: logical axis 'btch' (dim 0) has no rule." in text
    assert "Did you mean 'batch'?" in text
    assert "batch leaf y: 2 logical axes ('btch', None) for an array of rank 1" in text


@pytest.mark.min_devices(2, why="a batch that a data axis of 2 does not divide")
def test_make_global_batch_indivisible_rows_error_text(device_grid):
    mesh = ps.make_mesh(device_grid, ("data", "model"))
    with pytest.raises(
        ps.ShardingError,
        match=r"batch leaf x: dim 0 \(logical axis 'batch'\) has size 5 in this process, not "
        r"divisible by 2, the number of shards over mesh axes \('data',\) on this process's",
    ):
        ps.make_global_batch({"x": np.ones((5, 3))}, ("batch",), mesh, {"batch": "data"})


def test_make_global_batch_logical_axes_none_replicates_and_bad_type_error():
    mesh = ps.make_mesh((-1,), ("data",))
    batch = ps.make_global_batch({"x": np.ones((5, 3))}, None, mesh, {"batch": "data"})
    assert tuple(batch["x"].sharding.spec) == (None, None)
    with pytest.raises(TypeError, match=r"logical_axes: got 0, expected a tuple of logical axis"):
        ps.make_global_batch({"x": np.ones((8, 3))}, 0, mesh, {"batch": "data"})


def test_initialize_after_jax_started_says_when_to_call_it():
    jax.devices()
    with pytest.raises(RuntimeError, match=r"Call it at the very start of the program"):
        ps.initialize_distributed("localhost:1", 2, 0)


def test_bad_environment_variable_error(monkeypatch):
    monkeypatch.setenv("JAX_NUM_PROCESSES", "two")
    with pytest.raises(ValueError, match=r"JAX_NUM_PROCESSES='two' is not an integer"):
        ps.initialize_distributed("localhost:1")


def _run_python(
    patience, code: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})}
    for var in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        if var not in (env or {}):
            full_env.pop(var, None)
    return patience.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, text=True)


def test_no_configuration_runs_one_process(patience):
    proc = _run_python(
        patience,
        """
        import paramspec as ps
        print(tuple(ps.initialize_distributed()))
        """,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("(0, 1,")


def test_incomplete_configuration_error(patience):
    proc = _run_python(
        patience,
        """
        import paramspec as ps
        try:
            ps.initialize_distributed()
        except ValueError as err:
            print(err)
        """,
        env={"JAX_COORDINATOR_ADDRESS": "localhost:1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "initialize_distributed(coordinator_address='localhost:1', num_processes=None" in (
        proc.stdout
    )
    assert "set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID" in proc.stdout


def _run_two_processes(tmp_path: Path, port: int, patience) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    outs = [tmp_path / f"out{pid}.json" for pid in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "two_process_worker.py"), str(pid), str(port), str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for pid, out in enumerate(outs)
    ]
    # Waited on while they make progress: a fixed 120 s expired under a load of 9.
    logs = [out for out, _ in patience.communicate(procs, peers=True)]
    for proc, log in zip(procs, logs):
        assert proc.returncode == 0, log[-3000:]
    return [json.loads(out.read_text()) for out in outs]


@pytest.mark.slow
@pytest.mark.min_devices(4, why="the one-process reference uses the two workers' 2 x 2 mesh")
def test_two_processes_match_one_process(tmp_path, free_ports, patience):
    sys.path.insert(0, str(HERE))
    try:
        from two_process_worker import computation
    finally:
        sys.path.remove(str(HERE))
    mesh = ps.make_mesh((2, 2), ("data", "model"), devices=jax.devices()[:4])
    expected = computation(mesh, lambda rows: rows)

    results = _run_two_processes(tmp_path, free_ports(1)[0], patience)
    for pid, got in enumerate(results):
        assert got["info"] == [pid, 2, 2, 4]
        assert got["batch_shape"] == [4, 8]
        assert got["batch"] == expected["batch"]
        assert got["bits_sum"] == expected["bits_sum"]
        assert got["kernel_spec"] == expected["kernel_spec"] == ["None", "model"]
        np.testing.assert_allclose(got["kernel_sum"], expected["kernel_sum"], rtol=1e-6)
        np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-6)
