import io
import re
import sys

import matplotlib
import matplotlib.axes
import numpy as np
import pytest

import lox
from gpt_models import plot_losses, train


def test_progress_lines_report_loss_val_rate_mfu_and_eta(tmp_path, make_config):
    out = io.StringIO()
    cfg = make_config(mesh={"data": -1}, log={"every": 1, "peak_flops": 1e12})
    result = train(cfg, tmp_path / "run", stream=out, write_sample=False)
    lines = [x for x in out.getvalue().splitlines() if x.startswith("step")]
    assert len(lines) == cfg.train.steps  # not a terminal: one line per update, none rewritten
    pattern = (
        r"step (\d)/6 \[[#.]{20}\] loss \d+\.\d{3}( \(val \d+\.\d{3}\))? nats/byte \| \d+\.\dk tok/s \| "
        r"MFU \d+\.\d%( \| compute \d+% data \d+% log \d+%)? \| ETA \d+m\d\ds"
    )
    assert all(re.fullmatch(pattern, x) for x in lines), lines
    assert "compute" not in lines[0] and "compute" in lines[-1]  # step 1 compiles: not timed
    assert lines[-1].startswith("step 6/6 [####################]") and "(val " in lines[-1]
    assert "(val " not in lines[1] and "(val " in lines[2]  # evaluated every 3 steps
    assert result.tokens_per_s > 0 and 0 < result.mfu < 1  # against the 1e12 FLOP/s given


def test_no_mfu_on_cpu_without_a_given_peak(tmp_path, make_config):
    out = io.StringIO()
    cfg = make_config(mesh={"data": -1}, log={"every": 1})
    result = train(cfg, tmp_path / "run", stream=out, write_sample=False)
    lines = [x for x in out.getvalue().splitlines() if x.startswith("step")]
    assert lines and not any("MFU" in x for x in lines) and np.isnan(result.mfu)
    assert "no MFU shown" in out.getvalue()


@pytest.fixture
def svg_backend():
    """The user's matplotlib backend is svg for the test, and is put back after."""
    before = matplotlib.get_backend()
    matplotlib.use("svg")
    yield
    matplotlib.use(before)


def test_loss_plot_keeps_the_users_backend_and_the_last_value_of_a_step(tmp_path, monkeypatch,
                                                                         svg_backend):  # fmt: skip
    # A resumed run logs the steps after its last checkpoint again; the plot keeps the later value.
    logs = lox.logdict(
        {"loss": np.array([3.0, 2.0, 9.0, 1.5]), "val_loss": np.array([2.2])},
        steps={"loss": {"step": np.array([0, 1, 1, 2])}, "val_loss": {"step": np.array([2])}},
    )
    plotted = []
    original = matplotlib.axes.Axes.plot

    def spy(ax, x, y, **kwargs):
        plotted.append((kwargs["label"], list(x), list(y)))
        return original(ax, x, y, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    plot_losses(logs, tmp_path / "loss.png")
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert plotted == [("train", [0, 1, 2], [3.0, 9.0, 1.5]), ("val", [2], [2.2])]
    assert matplotlib.get_backend() == "svg"  # not switched to Agg behind the user's back
    pyplot = sys.modules.get("matplotlib.pyplot")
    assert pyplot is None or pyplot.get_fignums() == []  # no figure left in pyplot's registry
