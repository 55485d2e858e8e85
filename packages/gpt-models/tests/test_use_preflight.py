"""The memory pre-flight of ``gpt sample`` and ``gpt eval``: their own programs are compiled
before the checkpoint is read; one that cannot fit is refused with exit 2, both numbers and the
largest ``--max-new-tokens`` / ``--batch-size`` that fits, and nothing read or written."""

import dataclasses
import io
import re
from pathlib import Path

import pytest

from gpt_models import PRESETS, main, train

TASK = Path(__file__).parent / "data" / "synthetic_mc.jsonl"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The small run of conftest's ``small_args``, two steps."""
    tiny = PRESETS["tiny"]
    cfg = dataclasses.replace(
        tiny,
        model=dataclasses.replace(tiny.model, seq_len=32, d_model=32, n_layers=2, n_heads=2),
        train=dataclasses.replace(tiny.train, steps=2, batch_size=8, warmup_steps=1,
                                  eval_batches=1, checkpoint_every=2),
        mesh=dataclasses.replace(tiny.mesh, data=-1),
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("use") / "run"
    train(cfg, folder, stream=io.StringIO(), write_sample=False)
    return folder


def _files(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))}


def _need(capsys, *argv: str) -> int:
    """Bytes the program of ``gpt ARGV --dry-run`` needs, as its plan prints them."""
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "It fits: the same command without --dry-run runs it." in out
    return int(re.search(r"^memory +\S+ \S+ \(([\d,]+) bytes", out, re.M).group(1).replace(",", ""))


def test_sample_dry_run_prints_the_plan_and_reads_nothing(run, capsys):
    before = _files(run)
    assert main(["sample", "--run", str(run), "--dry-run", "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert "Plan of gpt sample (dry run: no checkpoint read, nothing written)" in out
    assert "sampling program (prompt of" in out and "+ 4 new tokens)" in out
    assert "available" in out and "host peak" in out
    assert _files(run) == before


def test_sample_refused_with_the_max_new_tokens_that_fits(run, capsys, monkeypatch, error_line):
    one = _need(capsys, "sample", "--run", str(run), "--max-new-tokens", "1")
    many = _need(capsys, "sample", "--run", str(run), "--max-new-tokens", "20")
    assert many > one
    budget = (one + many) // 2
    monkeypatch.setenv("GPT_MEMORY_BUDGET", str(budget))
    before = _files(run)
    assert main(["sample", "--run", str(run), "--max-new-tokens", "20"]) == 2
    err = capsys.readouterr().err
    assert error_line(err).startswith("gpt: error: gpt sample does not fit in memory: its sampling")
    assert f"GPT_MEMORY_BUDGET={budget}" in err and "Nothing was read or written" in err
    assert "Traceback" not in err and _files(run) == before
    fits = int(re.search(r"--max-new-tokens (\d+) fits in", err).group(1))
    assert 1 <= fits < 20
    # The suggestion is computed, not guessed: under the same budget it passes the pre-flight.
    assert _need(capsys, "sample", "--run", str(run), "--max-new-tokens", str(fits)) <= budget


def test_eval_task_refused_with_the_batch_size_that_fits(run, capsys, monkeypatch, error_line):
    argv = ["eval", "--run", str(run), "--task", str(TASK)]
    one = _need(capsys, *argv, "--batch-size", "1")
    many = _need(capsys, *argv, "--batch-size", "64")
    budget = (one + many) // 2
    monkeypatch.setenv("GPT_MEMORY_BUDGET", str(budget))
    assert main([*argv, "--batch-size", "64"]) == 2
    err = capsys.readouterr().err
    assert error_line(err).startswith("gpt: error: gpt eval does not fit in memory: its scorer (64")
    assert not (run / "evals").exists()
    fits = int(re.search(r"--batch-size (\d+) fits in", err).group(1))
    assert 1 <= fits < 64 and _need(capsys, *argv, "--batch-size", str(fits)) <= budget


def test_eval_whose_parameters_cannot_fit_says_so(run, capsys, monkeypatch, error_line):
    monkeypatch.setenv("GPT_MEMORY_BUDGET", "1KiB")
    before = _files(run)
    assert main(["eval", "--run", str(run)]) == 2
    err = capsys.readouterr().err
    assert error_line(err).startswith(
        "gpt: error: gpt eval does not fit in memory: its eval step (8"
    )
    assert "Even --batch-size 1 does not fit: the parameters alone take" in err
    assert "Traceback" not in err and _files(run) == before


def test_eval_runs_the_step_the_pre_flight_compiled(run, capsys):
    assert main(["eval", "--run", str(run), "--dry-run"]) == 0
    assert "eval step (8 windows of 32 tokens" in capsys.readouterr().out
    assert main(["eval", "--run", str(run)]) == 0
    assert re.fullmatch(r"val_loss \d+\.\d+ nats/byte on .*, step 2\n", capsys.readouterr().out)


def test_eval_refused_points_to_the_scorer_with_fewer_rows(run, capsys, monkeypatch):
    # The eval step's rows are the run's micro-batch: the advice is --text @val with a batch that fits.
    budget = _need(capsys, "eval", "--run", str(run)) - 1
    monkeypatch.setenv("GPT_MEMORY_BUDGET", str(budget))
    assert main(["eval", "--run", str(run)]) == 2
    err = capsys.readouterr().err
    assert "The eval step's 8 rows are the run's micro-batch" in err, err
    rows = int(re.search(r"--text @val --batch-size N, where --batch-size (\d+) fits in", err)[1])
    argv = ["eval", "--run", str(run), "--text", "@val", "--batch-size", str(rows)]
    assert 1 <= rows < 8 and _need(capsys, *argv) <= budget
