"""lox.to_csv: scalar logs as a plain CSV table."""

import csv
import io

import numpy as np
import pytest

import lox


def _rows(text):
    return list(csv.reader(io.StringIO(text)))


def test_to_csv_aligns_keys_by_step_and_leaves_missing_cells_empty(tmp_path):
    logs = lox.logdict(
        {"loss": np.array([3.0, 2.0, 1.0]), "val_loss": np.array([1.5], np.float32)},
        steps={"loss": {"step": np.array([0, 1, 2])}, "val_loss": {"step": np.array([2])}},
    )
    lox.to_csv(logs, tmp_path / "m.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.csv"]
    assert _rows((tmp_path / "m.csv").read_text()) == [
        ["step", "loss", "val_loss"],
        ["0", "3.0", ""],
        ["1", "2.0", ""],
        ["2", "1.0", "1.5"],
    ]


def test_to_csv_reads_a_saved_folder_and_pandas_reads_the_file(tmp_path):
    pd = pytest.importorskip("pandas", reason="pandas is a dev-only dependency")
    logs = lox.logdict({"lr": np.array([0.1, 0.2])}, steps={"lr": {"step": np.array([5, 6])}})
    lox.save(logs, tmp_path / "saved")
    lox.to_csv(tmp_path / "saved", tmp_path / "out.csv")
    frame = pd.read_csv(tmp_path / "out.csv")
    assert frame["step"].tolist() == [5, 6] and frame["lr"].tolist() == [0.1, 0.2]


def test_to_csv_later_events_win_and_unstepped_keys_use_the_event_number():
    logs = lox.logdict(
        {"loss": np.array([9.0, 1.0]), "x": np.array([7, 8])},
        steps={"loss": {"step": np.array([4, 4])}, "x": {}},
    )
    out = io.StringIO()
    lox.to_csv(logs, out)
    assert _rows(out.getvalue()) == [
        ["step", "event", "loss", "x"],
        ["", "0", "", "7"],
        ["", "1", "", "8"],
        ["4", "", "1.0", ""],
    ]


def test_to_csv_selects_keys_and_names_the_problems():
    logs = lox.logdict({"loss": np.array([1.0]), "hist": np.zeros((1, 3))})
    out = io.StringIO()
    lox.to_csv(logs, out, keys=["loss"])
    assert _rows(out.getvalue()) == [["event", "loss"], ["0", "1.0"]]
    with pytest.raises(
        ValueError, match=r"keys \['hist'\] hold arrays.*shapes \[\(1, 3\)\].*keys="
    ):
        lox.to_csv(logs, io.StringIO())
    with pytest.raises(ValueError, match=r"keys \['los'\] are not in the logs. Keys: "):
        lox.to_csv(logs, io.StringIO(), keys=["los"])


def test_to_csv_refuses_a_folder_as_target(tmp_path):
    logs = lox.logdict({"loss": np.array([1.0])})
    with pytest.raises(ValueError, match="is a folder; pass the path of the CSV file"):
        lox.to_csv(logs, tmp_path)
    assert list(tmp_path.iterdir()) == []
