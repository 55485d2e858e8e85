"""gpt_models across packages: lox in the jitted step, paramspec sharding, orbax, signals, resume.

Multi-device checks run in subprocesses: they need 8 fake CPU devices, set before JAX starts.
"""

import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

SMALL = [
    "--set", "model.seq_len=32", "--set", "model.d_model=32", "--set", "model.n_layers=2",
    "--set", "model.n_heads=2", "--set", "train.batch_size=8", "--set", "train.warmup_steps=1",
    "--set", "train.eval_batches=1", "--set", "sample.max_new_tokens=4", "--set", "log.every=1",
]  # fmt: skip


_patience = None  # the root conftest's, for this module's helpers


@pytest.fixture(autouse=True)
def _set_patience(patience):
    # Subprocesses are waited on while they make progress, not for a fixed time.
    global _patience
    _patience = patience


def _env(devices: int = 1) -> dict[str, str]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "WANDB_MODE": "disabled"}
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return env


def _python(code: str, devices: int = 8) -> str:
    proc = _patience.run([sys.executable, "-c", textwrap.dedent(code)], env=_env(devices),
                         text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


def test_train_step_with_lox_spool_under_jit():
    import jax

    import lox
    from gpt_models import (
        PRESETS,
        abstract_state,
        compile_train_step,
        init_state,
        make_mesh,
        make_optimizer,
    )

    base = PRESETS["tiny"]
    cfg = base.__class__(
        model=base.model.__class__(seq_len=16, d_model=32, n_layers=1, n_heads=2),
        train=base.train.__class__(steps=10, batch_size=4, grad_accum=2, warmup_steps=1),
        mesh=base.mesh.__class__(data=1),
    )
    mesh = make_mesh(cfg.mesh, jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    step = compile_train_step(cfg, opt, mesh, abstract_state(cfg, opt, mesh))
    state = init_state(cfg, opt, mesh)
    batch = jax.random.randint(jax.random.key(0), (2, 2, 17), 0, 256)
    state, logs = step(state, batch)
    state, more = step(state, batch)
    logs = logs + more
    assert isinstance(logs, lox.logdict)
    assert logs["micro_loss"].shape == (4,) and logs["loss"].shape == (2,)
    assert logs.steps["loss"]["step"].tolist() == [0, 1]
    # The same logs go through a SaveLogger and come back unchanged.
    import tempfile

    folder = tempfile.mkdtemp()
    logger = lox.SaveLogger(folder)
    logger.finish(logger.log(logger.init(), logs))
    back = lox.load(os.path.join(folder, "run_0"))
    np.testing.assert_allclose(back["loss"], logs["loss"])


def test_sharded_init_step_and_orbax_round_trip_on_8_devices(tmp_path):
    out = _python(
        f"""
        import dataclasses, jax, numpy as np
        from gpt_models import (
            PRESETS, Checkpointer, MeshConfig, abstract_state, compile_train_step, from_items,
            init_state, make_mesh, make_optimizer, to_items)
        W_IN = ("gpt", "model", "blocks", "block", "mlp", "linear_0", "kernel")
        base = PRESETS["tiny"]
        cfg = dataclasses.replace(base,
            model=dataclasses.replace(base.model, seq_len=16, d_model=32, n_layers=2, n_heads=4),
            train=dataclasses.replace(base.train, batch_size=8, warmup_steps=1),
            mesh=MeshConfig(data=2, fsdp=2, tensor=2))
        mesh = make_mesh(cfg.mesh)
        opt = make_optimizer(cfg.train)
        abstract = abstract_state(cfg, opt, mesh)
        state = init_state(cfg, opt, mesh)
        assert tuple(state.params[W_IN].value.sharding.spec) == (None, "fsdp", "tensor")
        step = compile_train_step(cfg, opt, mesh, abstract)
        batch = jax.random.randint(jax.random.key(0), (1, 8, 17), 0, 256)
        state, logs = step(state, batch)
        ckpt = Checkpointer({str(tmp_path)!r}, keep=1)
        ckpt.save(1, to_items(state), {{"step": 1}})
        ckpt.wait()
        # Restore onto a different mesh: arrays land in the new layout with equal values.
        cfg2 = dataclasses.replace(cfg, mesh=MeshConfig(data=8, fsdp=1, tensor=1))
        mesh2 = make_mesh(cfg2.mesh)
        items, meta, s = ckpt.restore(to_items(abstract_state(cfg2, opt, mesh2)))
        ckpt.close()
        back = from_items(items)
        assert back.params[W_IN].value.sharding.mesh.shape["data"] == 8
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), back, state)
        print("ok", float(logs["loss"][0]), s)
        """
    )
    assert out.startswith("ok")


def _gpt(args: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gpt_models", *args], env=_env(1), text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw,
    )  # fmt: skip


def _params(run):
    """The newest checkpoint's params of a run folder, on one device, through public names."""
    import dataclasses

    import jax

    from gpt_models import Checkpointer, MeshConfig, abstract_params, load_config, make_mesh

    cfg = load_config(str(run / "config.toml"))
    cfg = dataclasses.replace(cfg, mesh=MeshConfig(data=1, fsdp=1, tensor=1))
    ckpt = Checkpointer(run / "checkpoints")
    try:
        items, _, _ = ckpt.restore(
            {"params": abstract_params(cfg, make_mesh(cfg.mesh, jax.devices()[:1]))}
        )
    finally:
        ckpt.close()
    return jax.tree.map(np.asarray, items["params"])


@pytest.mark.slow
def test_sigterm_saves_and_resume_is_bit_exact(tmp_path):
    import jax

    steps = [
        "--set",
        "train.steps=300",
        "--set",
        "train.eval_every=300",
        "--set",
        "train.checkpoint_every=0",
    ]
    args = ["train", "--out", str(tmp_path), *SMALL, *steps]
    proc = _gpt([*args, "--name", "cut"])
    try:
        for line in proc.stderr:  # wait until training is under way, then stop it
            if line.startswith("step") and "/300" in line:
                proc.send_signal(signal.SIGTERM)
                break
        # The rest of stderr once it has exited (a few lines after SIGTERM: no pipe fills).
        _patience.wait_for(lambda: proc.poll() is not None, [proc], "gpt's exit after SIGTERM")
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "checkpoint saved" in err and "gpt train --resume" in err
    run = tmp_path / "cut"
    saved = sorted(int(p.name) for p in (run / "checkpoints").iterdir() if p.name.isdigit())
    assert len(saved) == 1 and 0 < saved[0] < 300

    resumed = _gpt(["train", "--resume", str(run)])
    whole = _gpt([*args, "--name", "whole"])
    for p, (_, err) in zip((resumed, whole), _patience.communicate([resumed, whole])):
        assert p.returncode == 0, err[-3000:]
    jax.tree.map(np.testing.assert_array_equal, _params(run), _params(tmp_path / "whole"))


def test_cli_end_to_end_train_eval_sample(tmp_path):
    """The installed ``gpt`` command: a few steps, then eval and sample of the run folder."""
    gpt = [os.path.join(os.path.dirname(sys.executable), "gpt")]
    steps = [
        "--set",
        "train.steps=4",
        "--set",
        "train.eval_every=4",
        "--set",
        "train.checkpoint_every=2",
    ]
    train = _patience.run(
        [*gpt, "train", "--out", str(tmp_path), "--name", "e2e", *SMALL, *steps],
        env=_env(1), text=True,
    )  # fmt: skip
    assert train.returncode == 0, train.stderr[-3000:]
    assert "--- sample ---" in train.stdout and "step 4" in train.stdout
    run = tmp_path / "e2e"
    assert sorted(p.name for p in run.iterdir()) == [
        "checkpoints", "config.toml", "loss.png", "metrics", "metrics.csv", "sample.txt",
    ]  # fmt: skip
    for command, expected in (
        (["eval", "--run", str(run)], "val_loss "),
        (["sample", "--run", str(run), "--prompt", "The ", "--max-new-tokens", "3"], "The "),
    ):
        proc = _patience.run([*gpt, *command], env=_env(1), text=True)
        assert proc.returncode == 0 and proc.stdout.startswith(expected), proc.stderr[-3000:]
    val = float(_patience.run([*gpt, "eval", "--run", str(run)], env=_env(1),
                              text=True).stdout.split()[1])  # fmt: skip
    assert 0 < val < np.log(256) + 0.5  # a byte model near or below uniform, not garbage
