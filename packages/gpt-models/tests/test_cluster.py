"""``gpt train`` on a cluster: ``--cluster`` detection refusals, the one-line refusal of a mesh that
cannot shard the model (a new run, or a checkpoint resumed on another mesh), store, mixture and
SFT checkpoints resumed on another mesh shape with the same losses, and the recipes of
examples/cluster/ (the Kubernetes manifest's fields read from its YAML, every ``gpt`` command of
the scripts parsed by the ``gpt`` parser).

The detection itself (SLURM and Open MPI variables) is tested in paramspec; two SLURM tasks that
find each other and train, their checkpoint resumed on fewer devices, and two Open MPI ranks
refusing a mesh their devices cannot fill, in integration_tests/test_gpt_distributed.py.
"""

import csv
import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
import yaml

from gpt_models import main
from gpt_models.internal import cli_parser

ROOT = Path(__file__).resolve().parents[3]
RECIPES = ROOT / "examples" / "cluster"
SLURM_VARS = (
    "SLURM_JOB_ID",
    "SLURM_STEP_NODELIST",
    "SLURM_NTASKS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
)


@pytest.fixture
def no_scheduler(monkeypatch):
    for var in (*SLURM_VARS, "OMPI_MCA_orte_hnp_uri", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    for var in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("gpt: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_named_cluster_that_is_absent_is_refused(tmp_path, capsys, no_scheduler):
    assert main(["train", "--out", str(tmp_path), "--cluster", "slurm"]) == 2
    assert _one_line_error(capsys) == (
        "gpt: error: gpt train --cluster slurm: No SLURM job found in this process's environment "
        "(SLURM sets SLURM_JOB_ID, SLURM_STEP_NODELIST, SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID "
        "in each process it starts, and they are not all set). Start the program through SLURM. "
        "Or pass --cluster none to train as one process."
    )
    assert not any(tmp_path.iterdir())


def test_incomplete_slurm_variables_are_one_line(tmp_path, capsys, no_scheduler):
    # sbatch without srun in front of `gpt train`: the job's variables, none of a task's.
    for var, value in (("SLURM_JOB_ID", "4242"), ("SLURM_NTASKS", "2")):
        no_scheduler.setenv(var, value)
    assert main(["train", "--out", str(tmp_path)]) == 2
    line = _one_line_error(capsys)
    assert line.startswith(
        "gpt: error: gpt train --cluster auto: Incomplete SLURM environment: SLURM_STEP_NODELIST, "
        "SLURM_PROCID, SLURM_LOCALID not set (got SLURM_JOB_ID=4242, SLURM_NTASKS=2)"
    )
    assert line.endswith("Or pass --cluster none to train as one process.")
    # --cluster none trains alone whatever the scheduler set: here it gets as far as the mesh,
    # checked against the devices before anything is read or written.
    assert main(["train", "--out", str(tmp_path), "--cluster", "none", "--mesh", "data=3"]) == 2
    assert "gpt: error: Impossible mesh: mesh.data=3" in _one_line_error(capsys)
    assert not any(tmp_path.iterdir())


@pytest.mark.min_devices(8, why="a tensor=8 mesh that the devices fit but 2 heads cannot")
def test_a_mesh_that_cannot_shard_the_model_is_one_line_with_meshes_that_fit(
    tmp_path, capsys, small_args, no_scheduler
):
    args = ["--mesh", "data=1,tensor=8", "--set", "model.n_heads=2", "--set", "model.d_model=32"]
    assert main(["train", "--out", str(tmp_path), *small_args, *args]) == 2
    line = _one_line_error(capsys)
    assert line.startswith(
        "gpt: error: Impossible mesh for this model: --mesh data=1,fsdp=1,tensor=8 cannot shard "
    )
    assert "(first: gpt/model/" in line and "not divisible by 8" in line
    assert re.search(r"shapes that fit these 8 devices: --mesh data=\d,fsdp=\d,tensor=\d", line)
    assert not any(tmp_path.iterdir())


@pytest.mark.min_devices(8, why="a tensor=8 mesh that the devices fit but 2 heads cannot")
def test_resuming_on_a_mesh_that_cannot_hold_the_checkpoint_is_one_line_and_keeps_it(
    tmp_path, capsys, small_args, no_scheduler
):
    # A job preempted and brought back with a mesh that cannot shard the checkpoint's parameters:
    # refused before the checkpoint is read (exit 2), the run's files as they were.
    run = tmp_path / "run"
    three_steps = ["--set", "train.steps=3"]
    assert main(["train", "--out", str(tmp_path), "--name", "run", *small_args, *three_steps]) == 0
    capsys.readouterr()
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    assert any("checkpoints" in p.relative_to(run).parts for p in before)
    assert main(["train", "--resume", str(run), "--mesh", "data=1,tensor=8"]) == 2
    line = _one_line_error(capsys)
    assert line.startswith(
        "gpt: error: Impossible mesh for this model: --mesh data=1,fsdp=1,tensor=8 cannot shard "
    )
    assert "shapes that fit these 8 devices: --mesh " in line
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()} == before


def _commands(text: str) -> list[list[str]]:
    """Every ``gpt`` command of a script (comments aside): continuation lines joined, the launcher's
    words before it and the shell's after it dropped."""
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for match in re.finditer(r"(?<![\w-])gpt (train|eval|sample)\b[^\"\n&]*", joined):
        found.append(shlex.split(match.group(0))[1:])
    return found


@pytest.mark.parametrize(
    ("recipe", "cluster"),
    [("slurm.sbatch", "slurm"), ("mpirun.sh", "mpi"), ("tpu-vm.sh", "tpu"),
     ("k8s-jobset.yaml", "k8s")],
)  # fmt: skip
def test_recipe_commands_parse_with_the_gpt_parser(recipe, cluster):
    text = (RECIPES / recipe).read_text()
    if recipe.endswith(".yaml"):  # the container's shell command, as YAML folds it
        [jobset] = [d for d in yaml.safe_load_all(text) if d["kind"] == "JobSet"]
        pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        text = pod["containers"][0]["command"][-1]
    commands = _commands(text)
    assert commands, f"no gpt command in {recipe}"
    for argv in commands:
        args = cli_parser().parse_args(argv)
        assert args.command == "train" and args.cluster == cluster and args.auto_resume


def test_slurm_recipe_starts_one_task_per_gpu_with_srun():
    text = (RECIPES / "slurm.sbatch").read_text()
    directives = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", text, re.M))
    assert directives["ntasks-per-node"] == directives["gpus-per-node"]
    assert re.search(r"^srun gpt train ", text, re.M)


def test_kubernetes_recipe_is_an_indexed_jobset_that_may_read_its_pods():
    docs = {d["kind"]: d for d in yaml.safe_load_all((RECIPES / "k8s-jobset.yaml").read_text())}
    assert set(docs) == {"ServiceAccount", "Role", "RoleBinding", "JobSet"}
    jobset = docs["JobSet"]
    assert jobset["apiVersion"].startswith("jobset.x-k8s.io/")
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    [workers] = jobset["spec"]["replicatedJobs"]
    job = workers["template"]["spec"]
    assert job["completionMode"] == "Indexed" and job["parallelism"] == job["completions"] >= 2
    pod = job["template"]["spec"]
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"]
    [container] = pod["containers"]
    assert "k8s" in container["command"][-1]  # jax[k8s]: the kubernetes package JAX detects with
    assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
    mounts = {m["name"] for m in container["volumeMounts"]}
    assert mounts == {v["name"] for v in pod["volumes"]}  # a shared run folder for every pod
    binding = docs["RoleBinding"]
    assert binding["roleRef"]["name"] == docs["Role"]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == docs["ServiceAccount"]["metadata"]["name"]
    readable = {(r, v) for rule in docs["Role"]["rules"] for r in rule["resources"]
                for v in rule["verbs"]}  # fmt: skip
    assert {("pods", "list"), ("jobs", "get"), ("services", "list")} <= readable


def _data_flags(kind: str, folder: Path) -> list[str]:
    """``--set`` flags of a run on ``kind`` data: a text store, a mixture of two texts, or chat
    examples (SFT: packed rows with a loss mask)."""
    prose = folder / "prose.txt"
    prose.write_text("the quick brown fox jumps over the lazy dog. " * 300)
    if kind == "mixture":
        digits = folder / "digits.txt"
        digits.write_text("0123456789 " * 600)
        tables = f'{{path = "{prose}", weight = 0.8}}, {{path = "{digits}", weight = 0.2}}'
        return ["--set", f"data.sources=[{tables}]"]
    source = folder / "docs.jsonl"  # documents, one a line: a store has train and val splits
    source.write_text(
        "".join(json.dumps({"text": f"{i}: the lazy dog. " * 20}) + "\n" for i in range(60))
    )
    if kind == "sft":
        source = folder / "chat.jsonl"
        chats = [
            [{"role": "user", "content": f"What is {i} plus two?"},
             {"role": "assistant", "content": f"It is {i + 2}."}]
            for i in range(120)
        ]  # fmt: skip
        source.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats))
    store = folder / "store"
    assert main(["prepare", str(source), "--out", str(store), "--val-fraction", "0.2"]) == 0
    rows = ["--set", "model.seq_len=64"] if kind == "sft" else []  # an example is 52+ tokens
    return ["--set", f"data.path={store}", *rows]


@pytest.mark.slow
@pytest.mark.min_devices(8, why="a checkpoint of 8 data shards resumed on data=2,fsdp=2,tensor=2")
@pytest.mark.parametrize("kind", ["store", "mixture", "sft"])
def test_a_checkpoint_resumes_on_another_mesh_with_the_losses_of_the_whole_run(
    tmp_path, small_args, no_scheduler, kind
):
    # A job preempted after its step-3 checkpoint comes back on another mesh shape: orbax restores
    # into the new shardings, and each batch is a function of (seed, step) alone.
    flags = [*small_args, *_data_flags(kind, tmp_path)]
    assert main(["train", "--out", str(tmp_path), "--name", "whole", *flags]) == 0  # mesh data=8
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    shutil.copytree(whole, cut)
    for gone in ("checkpoints/6", "metrics", "metrics.csv"):
        shutil.rmtree(cut / gone) if (cut / gone).is_dir() else (cut / gone).unlink()
    assert main(["train", "--resume", str(cut), "--mesh", "data=2,fsdp=2,tensor=2"]) == 0

    def losses(run: Path) -> dict[int, float]:
        with open(run / "metrics.csv", newline="") as f:
            return {int(r["step"]): float(r["loss"]) for r in csv.DictReader(f) if r["loss"]}

    resumed, reference = losses(cut), losses(whole)
    assert sorted(resumed) == sorted(reference)[3:]  # steps 4-6 (rows 3-5 of metrics.csv)
    diff = max(abs(resumed[s] - reference[s]) for s in resumed)
    print(f"{kind}: steps 4-6 resumed on data=2,fsdp=2,tensor=2, max |difference| {diff:.2e}")
    assert diff <= 1e-4
