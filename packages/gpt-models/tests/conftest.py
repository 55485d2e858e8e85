"""Small configs and runs for the gpt tests (the environment is the root conftest's)."""

import dataclasses
import logging

import pytest

from gpt_models import PRESETS, Config, main

# `gpt train` flags for the same small run as small_config(), with checkpoints at steps 3 and 6.
SMALL_ARGS = [
    "--set", "model.seq_len=32", "--set", "model.d_model=32", "--set", "model.n_layers=2",
    "--set", "model.n_heads=2", "--set", "train.steps=6", "--set", "train.batch_size=8",
    "--set", "train.warmup_steps=1", "--set", "train.eval_every=3", "--set", "train.eval_batches=2",
    "--set", "train.checkpoint_every=3", "--set", "sample.max_new_tokens=8", "--set", "mesh.data=-1",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _absl_log_level():
    """Each test starts with absl's log level as it found it.

    `gpt train` silences absl after a full disk (orbax's writers wind down while the process exits);
    called in-process by one test, that would hide orbax's log lines from every later test.
    """
    absl = logging.getLogger("absl")
    level = absl.level
    yield
    absl.setLevel(level)


def small_config(**sections) -> Config:
    """A model and run small enough to compile and train in seconds on a shared 2-core CPU.

    ``small_config(train={"steps": 20})`` changes keys of a section. Tests take it through the
    ``make_config`` fixture; test_train.py and test_muon.py still load it from this file by path.
    """
    base = PRESETS["tiny"]
    cfg = dataclasses.replace(
        base,
        model=dataclasses.replace(base.model, seq_len=32, d_model=32, n_layers=2, n_heads=2),
        train=dataclasses.replace(
            base.train,
            steps=6,
            batch_size=8,
            warmup_steps=1,
            eval_every=3,
            eval_batches=2,
            checkpoint_every=3,
            lr=3e-3,
        ),
        mesh=dataclasses.replace(base.mesh, data=1),
        sample=dataclasses.replace(base.sample, max_new_tokens=8),
    )
    for name, changes in sections.items():
        cfg = dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **changes)})
    return cfg


@pytest.fixture
def small() -> Config:
    return small_config()


@pytest.fixture
def make_config():
    """``make_config(train={...}, mesh={...})``: the small config with some keys changed."""
    return small_config


@pytest.fixture
def gpt_train(tmp_path):
    """``gpt_train(*flags)``: ``gpt train`` of the small run into ``tmp_path/run``; the exit status."""

    def run(*flags: str) -> int:
        return main(["train", "--out", str(tmp_path), "--name", "run", *SMALL_ARGS, *flags])

    return run


@pytest.fixture
def small_args() -> list[str]:
    """The ``--set`` flags of the small run, for ``gpt train`` calls that choose their own folder."""
    return list(SMALL_ARGS)


@pytest.fixture(scope="session")
def sharded_mesh() -> tuple[dict[str, int], list]:
    """`mesh` config sizes over up to 8 devices (tensor, then fsdp, then data get 2) and those devices.

    8 fake CPU devices (the default) give data=fsdp=tensor=2; 4 TPU chips 1 x 2 x 2; 2 GPUs 1 x 1 x 2.
    """
    import jax

    n = jax.device_count()
    sizes = {"data": 2 if n >= 8 else 1, "fsdp": 2 if n >= 4 else 1, "tensor": 2 if n >= 2 else 1}
    used = sizes["data"] * sizes["fsdp"] * sizes["tensor"]
    return sizes, jax.devices()[:used]
