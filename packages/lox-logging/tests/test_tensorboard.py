"""TensorBoardLogger: event files read back with tbparse, one run per vmapped lane."""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lox
from lox import TensorBoardLogger, logdict

tbparse = pytest.importorskip("tbparse", reason="reading event files back needs tbparse")
pytest.importorskip("tensorboardX", reason="TensorBoardLogger needs lox-logging[tensorboard]")


def read(folder, kind="scalars"):
    reader = tbparse.SummaryReader(str(folder), extra_columns={"dir_name"})
    return getattr(reader, kind)


def metrics(loss, step):
    return logdict({"loss": jnp.asarray([loss])}, {"loss": {"step": jnp.asarray([step])}})


def test_scalars_under_jit_with_steps(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    state = logger.init()
    log = jax.jit(logger.log)
    for step, loss in [(10, 2.0), (20, 1.5), (30, 1.25)]:
        state = log(state, metrics(loss, step))
    logger.finish(state)
    df = read(tmp_path / "run_0")
    assert df[["step", "tag", "value"]].values.tolist() == [
        [10, "loss", 2.0],
        [20, "loss", 1.5],
        [30, "loss", 1.25],
    ]


def test_one_run_per_vmapped_seed(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    states = jax.vmap(logger.init)(jax.random.split(jax.random.key(0), 3))
    batch = jax.vmap(metrics)(jnp.array([1.0, 2.0, 3.0]), jnp.array([5, 5, 5]))
    states = jax.jit(jax.vmap(logger.log))(states, batch)
    logger.finish(states)
    assert sorted(os.listdir(tmp_path)) == ["run_0", "run_1", "run_2"]
    df = read(tmp_path).sort_values("dir_name")
    assert df[["dir_name", "step", "value"]].values.tolist() == [
        ["run_0", 5, 1.0],
        ["run_1", 5, 2.0],
        ["run_2", 5, 3.0],
    ]


def test_histograms_text_pytree_leaves_and_step_choice(tmp_path):
    logger = TensorBoardLogger(tmp_path, step="epoch", text={"config": "lr: 0.1"})
    state = logger.init()
    logs = logdict(
        {"w": jnp.arange(8.0).reshape(1, 8), "p": {"a": jnp.array([4.0])}, "n": jnp.ones(2)},
        {"w": {"step": jnp.array([3]), "epoch": jnp.array([1])}, "p": {"it": jnp.array([7])}},
    )
    state = logger.log(state, logs)
    logger.finish(state)
    hist = read(tmp_path / "run_0", "histograms")
    assert hist[["step", "tag"]].values.tolist() == [[1, "w"]]  # `epoch`, as asked
    assert np.sum(hist["counts"][0]) == 8
    assert hist["limits"][0].max() >= 7.0  # the right edge of the last bucket holds the max
    scalars = read(tmp_path / "run_0")
    # `p/a` plots against its only step; `n` has no steps: events counted 0, 1.
    assert scalars[["tag", "step", "value"]].values.tolist() == [
        ["n", 0, 1.0],
        ["n", 1, 1.0],
        ["p/a", 7, 4.0],
    ]
    text = read(tmp_path / "run_0", "text")
    assert text[["tag", "value"]].values.tolist() == [["config", "lr: 0.1"]]


def test_tap_streams_into_the_run(tmp_path):
    logger = TensorBoardLogger(tmp_path)
    state = logger.init()

    def f(x):
        lox.log({"x": x}, step=jnp.int32(4))
        return x * 2

    out, state = jax.jit(logger.tap(f, state))(3.0)
    logger.finish(state)
    assert read(tmp_path / "run_0")[["tag", "step", "value"]].values.tolist() == [["x", 4, 3.0]]


def test_refuses_bad_arguments():
    with pytest.raises(TypeError, match=r"path must be a folder path .*got 3 \(int\)"):
        TensorBoardLogger(3)
    with pytest.raises(
        ValueError,
        match=r"^TensorBoardLogger: path is '' \(an empty string\); "
        r"expected the folder of the logs. .*e.g. TensorBoardLogger\('runs/tb'\)",
    ):
        TensorBoardLogger("")
    with pytest.raises(TypeError, match=r"text must map str tags to str texts, got \{'cfg': 'int'"):
        TensorBoardLogger("x", text={"cfg": 1})
    with pytest.raises(ValueError, match=r"flush_secs must be a positive number.*got 0"):
        TensorBoardLogger("x", flush_secs=0)


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symbolic links here")
def test_run_folder_link_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "tb").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "tb" / "run_0")
    logger = TensorBoardLogger(tmp_path / "tb")
    # Run folders open in init's host callback: JAX re-raises the error there with its text.
    error = (lox.DamagedSaveError, jax.errors.JaxRuntimeError)
    with pytest.raises(error, match=r"TensorBoardLogger: run_0 in .* is a symbolic link"):
        jax.block_until_ready(logger.init())
    assert os.listdir(tmp_path / "elsewhere") == []


def test_missing_tensorboardx_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # `import tensorboardX` fails
    with pytest.raises(ImportError, match=r"pip install 'lox-logging\[tensorboard\]'"):
        TensorBoardLogger("x")
