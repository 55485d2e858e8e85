import io

import numpy as np

import lox
from gpt_models._progress import Progress, _last_per_step, plot_losses


def test_progress_line_reports_loss_rate_mfu_and_eta():
    out = io.StringIO()
    bar = Progress(
        100, 0, tokens_per_step=1000, flops_per_token=1e6, peak=1e10, every=10, stream=out
    )
    bar.update(1, 3.0)  # first step: compilation, not timed
    bar.timer_start -= 1.0  # pretend one second passed for 10 more steps
    bar.update(11, 2.5, force=True)
    line = out.getvalue().strip()
    assert line.startswith("step  11/100 [##") and "loss 2.500" in line
    tps, mfu = bar.rates(11)
    assert 9_000 < tps <= 10_000 and mfu == tps * 1e6 / 1e10  # MFU = flops/token * tok/s / peak
    assert "k tok/s" in line and "MFU" in line and "ETA" in line


def test_progress_line_leaves_out_mfu_when_the_peak_is_unknown():
    out = io.StringIO()
    bar = Progress(10, 0, tokens_per_step=100, flops_per_token=1e6, peak=None, every=1, stream=out)
    bar.update(1, 3.0)
    bar.timer_start -= 1.0
    bar.update(2, 2.5, force=True)
    assert "MFU" not in out.getvalue() and "tok/s" in out.getvalue()
    assert np.isnan(bar.rates(2)[1])


def test_loss_plot_keeps_the_last_value_of_a_repeated_step(tmp_path):
    # A resumed run logs the steps after its last checkpoint again; the plot keeps the later value.
    logs = lox.logdict(
        {"loss": np.array([3.0, 2.0, 9.0, 1.5]), "val_loss": np.array([2.2])},
        steps={"loss": {"step": np.array([0, 1, 1, 2])}, "val_loss": {"step": np.array([2])}},
    )
    steps, values = _last_per_step(logs, "loss")
    assert steps.tolist() == [0, 1, 2] and values.tolist() == [3.0, 9.0, 1.5]
    plot_losses(logs, tmp_path / "loss.png")
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"
