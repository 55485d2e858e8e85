"""Test environment: 8 fake CPU devices (set before JAX initialises), wandb off, small configs."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("WANDB_MODE", "disabled")

import dataclasses

import pytest

from gpt_models import PRESETS, Config


def small_config(**sections) -> Config:
    """A model and run small enough to compile and train in seconds on a shared 2-core CPU."""
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
