"""Cluster detection: what ``initialize_distributed`` starts from when no argument configures it.

Detection only reads the scheduler's variables (SLURM and Open MPI), so it is tested in-process with
the variables set as ``srun`` and ``mpirun`` set them; nothing waits for a peer here.
"""

import pytest

import paramspec as ps

SLURM = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_NODELIST": "node[001-002]",
    "SLURM_NTASKS": "2",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
}
SCHEDULER_VARS = (
    *SLURM,
    "OMPI_MCA_orte_hnp_uri",
    "KUBERNETES_SERVICE_HOST",
    "JAX_COORDINATOR_PORT",
)


@pytest.fixture
def clean_env(monkeypatch):
    for var in SCHEDULER_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_slurm_task_is_found_with_jax_coordinator_port_winning(clean_env):
    for var, value in SLURM.items():
        clean_env.setenv(var, value)
    found = ps.detect_cluster()
    assert found == ps.Cluster("slurm", "node001:61586", 2, 1, "SLURM job 4242")
    assert found.describe() == "process 1 of 2 (SLURM job 4242, coordinator node001:61586)"
    clean_env.setenv("JAX_COORDINATOR_PORT", "1234")
    assert ps.detect_cluster("slurm").coordinator_address == "node001:1234"
    assert ps.detect_cluster("none") is None


def test_open_mpi_task_is_found(clean_env):
    clean_env.setenv("OMPI_MCA_orte_hnp_uri", "1531576320.0;tcp://10.0.0.1,10.0.0.2:34911")
    clean_env.setenv("OMPI_COMM_WORLD_SIZE", "4")
    clean_env.setenv("OMPI_COMM_WORLD_RANK", "3")
    clean_env.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1")
    found = ps.detect_cluster("mpi")
    assert (found.kind, found.num_processes, found.process_id) == ("mpi", 4, 3)
    assert found.coordinator_address.startswith("10.0.0.1:")


def test_no_cluster_is_one_process_unless_one_was_named(clean_env):
    assert ps.detect_cluster() is None
    with pytest.raises(
        ValueError,
        match=r"^No SLURM job found in this process's environment \(SLURM sets SLURM_JOB_ID",
    ):
        ps.detect_cluster("slurm")
    with pytest.raises(ValueError, match=r"kind='lsf'\): expected one of auto, none, slurm"):
        ps.detect_cluster("lsf")


def test_incomplete_slurm_is_one_line_naming_what_is_missing(clean_env):
    for var in ("SLURM_JOB_ID", "SLURM_NTASKS", "SLURM_PROCID"):
        clean_env.setenv(var, SLURM[var])
    with pytest.raises(ValueError) as err:
        ps.detect_cluster()
    assert str(err.value) == (
        "Incomplete SLURM environment: SLURM_STEP_NODELIST, SLURM_LOCALID not set (got "
        "SLURM_JOB_ID=4242, SLURM_NTASKS=2, SLURM_PROCID=1); starting a job's tasks together "
        "needs all of SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS, SLURM_PROCID, "
        "SLURM_LOCALID. Start each task with srun (`srun python train.py` inside sbatch), or set "
        "JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID yourself."
    )
    clean_env.setenv("SLURM_NTASKS", "two")
    with pytest.raises(ValueError, match=r"SLURM_NTASKS='two' is not a whole number"):
        ps.detect_cluster()


def test_a_one_task_allocation_is_one_process(clean_env):
    # `salloc` or an sbatch script without srun: the job's variables, no task to start with others.
    clean_env.setenv("SLURM_JOB_ID", "4242")
    clean_env.setenv("SLURM_NTASKS", "1")
    assert ps.detect_cluster() is None


def test_initialize_distributed_refuses_a_named_cluster_that_is_absent(clean_env):
    with pytest.raises(ValueError, match=r"^No Open MPI job found"):
        ps.initialize_distributed(cluster="mpi")


def test_a_kubernetes_pod_that_is_no_indexed_job_is_one_process(clean_env):
    # Every pod has KUBERNETES_SERVICE_HOST; a notebook's is not a job to start with others.
    clean_env.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert ps.detect_cluster() is None


def test_a_cluster_jax_cannot_read_is_one_value_error(clean_env):
    for var, value in {**SLURM, "SLURM_JOB_ID": "abc"}.items():
        clean_env.setenv(var, value)
    with pytest.raises(ValueError) as err:
        ps.detect_cluster()
    assert str(err.value) == (
        "Found a SLURM job, but JAX could not read its coordinator and process count: ValueError: "
        "invalid literal for int() with base 10: 'abc' Fix the job's set-up, or set "
        "JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID yourself."
    )
