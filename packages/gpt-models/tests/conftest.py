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
