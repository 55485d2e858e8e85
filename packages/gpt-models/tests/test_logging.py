"""Where `gpt train` sends metrics: TensorBoard event files in the run folder (log.tensorboard)."""

import sys

import numpy as np
import pandas as pd
import pytest

tbparse = pytest.importorskip("tbparse", reason="reading event files back needs tbparse")
pytest.importorskip("tensorboardX", reason="log.tensorboard needs gpt-models[tensorboard]")


def test_tensorboard_events_hold_the_loss_curve_of_metrics_csv(tmp_path, gpt_train):
    fast = ["--set", "model.n_layers=1", "--set", "train.steps=4", "--set", "train.eval_every=4",
            "--set", "train.checkpoint_every=4", "--set", "log.every=2"]  # fmt: skip
    assert gpt_train(*fast, "--set", "log.tensorboard=true") == 0
    run = tmp_path / "run"
    reader = tbparse.SummaryReader(str(run / "tensorboard"), extra_columns={"dir_name"})
    scalars = reader.scalars
    assert set(scalars["dir_name"]) == {"run_0"}
    loss = scalars[scalars["tag"] == "loss"].sort_values("step")
    csv = pd.read_csv(run / "metrics.csv").dropna(subset=["loss"])
    assert loss["step"].tolist() == csv["step"].tolist()
    np.testing.assert_allclose(loss["value"], csv["loss"], rtol=1e-6)
    text = reader.text
    assert text["tag"].tolist() == ["config"]
    assert '"steps": 4' in text["value"][0]  # the run's config, as TensorBoard's text tab shows


def test_tensorboard_without_the_extra_exits_2_before_creating_the_run(
    tmp_path, capsys, monkeypatch, gpt_train
):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # `import tensorboardX` now fails
    assert gpt_train("--set", "log.tensorboard=true") == 2
    err = capsys.readouterr().err
    assert "log.tensorboard = true needs the tensorboardX package, which is not installed" in err
    assert "pip install 'gpt-models[tensorboard]'" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()
