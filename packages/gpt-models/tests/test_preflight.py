"""The memory pre-flight of training: a step that cannot fit is refused before anything is
written, with settings that fit, derived from the one compiled step; the typed errors a run raises."""

import errno
import io
import logging
import re

import jax
import pytest

from core_primitives import compat
from gpt_models import (
    DiskFullError,
    OutOfMemoryError,
    UsageError,
    apply_overrides,
    main,
    plan_training,
    train,
)


def _sets(message: str) -> dict[str, str]:
    words = message.split()
    return dict(words[i + 1].split("=") for i, w in enumerate(words) if w == "--set")


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, small_args, capsys):
    assert main(["train", "--dry-run", "--out", str(tmp_path), *small_args]) == 0
    out, err = capsys.readouterr()
    for line in ("parameters", "optimizer state", "step memory", "tokens per step",
                 "FLOPs per token", "It fits"):  # fmt: skip
        assert line in out, out
    assert "tokens per step  256 (batch 8 x seq_len 32" in out
    assert list(tmp_path.iterdir()) == []
    # Not silent while it compiles: a line says so before the compile starts.
    assert "pre-flight: compiling the train step (8 cpu device(s)) ahead of time" in err, err


def test_refusal_names_both_numbers_and_settings_that_fit(tmp_path, make_config, monkeypatch):
    cfg = make_config(train={"batch_size": 32}, mesh={"data": -1})
    plan = plan_training(cfg, stream=io.StringIO())
    # The step as given cannot fit; one with more micro-batches can, also by the estimate, which
    # errs high (by 25% here, where the parameters' fixed share of the temporaries is large).
    budget = plan.memory.per_device * 3 // 4
    monkeypatch.setenv("GPT_MEMORY_BUDGET", str(budget))
    run = tmp_path / "run"
    with pytest.raises(OutOfMemoryError) as caught:
        train(cfg, run, stream=io.StringIO())
    message = str(caught.value)
    assert "does not fit in memory" in message and f"GPT_MEMORY_BUDGET={budget}" in message
    assert "Nothing was written" in message and not run.exists()
    assert "fits in" in message and "estimated from the compiled step's memory analysis" in message
    assert isinstance(caught.value, MemoryError) and isinstance(caught.value, UsageError)
    # The suggestion is accepted by the config and fits the same budget when compiled: the
    # estimate it was derived from does not fall short.
    sets = _sets(message)
    assert set(sets) <= {"train.grad_accum", "model.remat"} and sets, message
    fixed = apply_overrides(cfg, sets, from_text=True)
    again = plan_training(fixed, stream=io.StringIO())
    assert again.fits and again.memory.per_device <= budget


@pytest.mark.parametrize("scan_layers", [True, False])
def test_the_remat_a_refusal_suggests_lowers_the_memory_it_measures(make_config, scan_layers):
    # model.remat=full is one of the refusal's fixes. It must shrink the compiled train step
    # (which runs through lox.spool): the backward pass's recomputation has to survive that
    # rewrite, or every activation is kept anyway and the suggested fix fails again.
    if not scan_layers and not compat.xla_cpu_remats_unrolled_layers():
        pytest.skip("XLA:CPU before JAX 0.11 keeps the activations of unrolled remat layers")
    temps = {}
    for remat in ("none", "full"):
        cfg = make_config(model={"seq_len": 128, "n_layers": 4, "remat": remat,
                                 "scan_layers": scan_layers}, mesh={"data": -1})  # fmt: skip
        temps[remat] = plan_training(cfg, stream=io.StringIO()).memory.temporaries
    assert temps["full"] < 0.6 * temps["none"], temps


def test_the_refusal_compiles_the_step_and_nothing_else(tmp_path, make_config, monkeypatch, caplog):
    # What smaller micro-batches need is derived from the compiled step, not compiled: a refusal
    # costs the one compile the run would have needed anyway.
    cfg = make_config(train={"batch_size": 32}, mesh={"data": -1})
    budget = plan_training(cfg, stream=io.StringIO()).memory.per_device * 3 // 4
    monkeypatch.setenv("GPT_MEMORY_BUDGET", str(budget))
    stream = io.StringIO()
    refused = pytest.raises(OutOfMemoryError, match="--set train.grad_accum=")
    with jax.log_compiles(True), caplog.at_level(logging.WARNING), refused:
        train(cfg, tmp_path / "run", stream=stream)
    compiles = [
        r.getMessage() for r in caplog.records if "Finished XLA compilation" in r.getMessage()
    ]
    assert len(compiles) == 1, compiles
    said = stream.getvalue()
    assert "pre-flight: compiling the train step" in said
    assert "pre-flight: looking for the train.grad_accum that fits" in said, said


def test_a_budget_below_every_estimate_says_how_to_measure(tmp_path, make_config, monkeypatch):
    cfg = make_config(train={"batch_size": 32}, mesh={"data": -1})
    knob = plan_training(cfg, stream=io.StringIO()).knob
    most = knob.values[-1]  # the most micro-batches the 8 data shards allow
    monkeypatch.setenv("GPT_MEMORY_BUDGET", str(knob.need(most) - 1))
    with pytest.raises(OutOfMemoryError) as caught:
        train(cfg, tmp_path / "run", stream=io.StringIO())
    message = str(caught.value)
    assert f"Even a micro-batch of {32 // most} sequence(s) is estimated not to fit" in message
    assert f"gpt train --dry-run --set train.grad_accum={most} measures it" in message
    assert "model.remat=full" in message and "mesh.fsdp" in message
    # Where XLA:CPU would keep an unrolled model's activations anyway, it says what remats.
    scan = "model.remat=full with model.scan_layers=true" in message
    assert scan == (not cfg.model.scan_layers and not compat.xla_cpu_remats_unrolled_layers())


def test_cli_refusal_exits_2_without_a_traceback(tmp_path, small_args, monkeypatch, capsys,
                                                 error_line):  # fmt: skip
    monkeypatch.setenv("GPT_MEMORY_BUDGET", "1KiB")
    assert main(["train", "--out", str(tmp_path), "--name", "r", *small_args]) == 2
    err = capsys.readouterr().err
    assert error_line(err).startswith("gpt: error: This run does not fit in memory")
    assert "Traceback" not in err
    assert "The state alone" in err and "Choose a smaller model" in err  # nothing can fit 1 KiB
    # ... and how many devices of that size would hold the state: its bytes over the budget's
    sizes = re.search(r"takes ([\d.]+) (KiB|MiB) per device, more than 1.0 KiB", err)
    least = re.search(r"it needs at least ([\d,]+) devices with 1.0 KiB each", err)
    assert sizes and least, err
    state_kib = float(sizes[1]) * (1024 if sizes[2] == "MiB" else 1)
    devices = int(least[1].replace(",", ""))
    assert state_kib * 0.99 <= devices <= state_kib * 1.01 + 1, err
    assert f"(mesh.fsdp={devices})" in err
    assert list(tmp_path.iterdir()) == []


def test_a_bad_budget_says_what_a_size_looks_like(tmp_path, small_args, monkeypatch, capsys):
    monkeypatch.setenv("GPT_MEMORY_BUDGET", "lots")
    assert main(["train", "--dry-run", "--out", str(tmp_path), *small_args]) == 2
    err = capsys.readouterr().err
    assert (
        "GPT_MEMORY_BUDGET='lots' is not a memory size" in err and "GPT_MEMORY_BUDGET=8GiB" in err
    )


def test_xla_out_of_memory_is_not_a_full_disk(tmp_path, make_config, fail_train_step):
    # XLA's allocation failure while running the step: reported as out of memory with advice,
    # raised as the first error (not the metrics clean-up that fails after it).
    fail_train_step(
        RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 163235817848 bytes.")
    )
    with pytest.raises(OutOfMemoryError) as caught:
        train(make_config(mesh={"data": -1}), tmp_path / "run", stream=io.StringIO())
    message = str(caught.value)
    assert message.startswith("Out of memory while running the train step: RESOURCE_EXHAUSTED")
    assert "The pre-flight estimated" in message and "Training stopped" in message
    assert "disk is full" not in message
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_only_a_real_file_write_is_a_full_disk(tmp_path, make_config, fail_train_step):
    # XLA's out-of-memory says RESOURCE_EXHAUSTED too, and may quote a file: on a filesystem with
    # room (tmp_path's) that is not a full disk. (A write failing with ENOSPC is: the next test.)
    oom = RuntimeError(f'RESOURCE_EXHAUSTED: Out of memory allocating 5 bytes "{tmp_path}/x"')
    fail_train_step(oom)
    with pytest.raises(OutOfMemoryError) as caught:
        train(make_config(mesh={"data": -1}), tmp_path / "run", stream=io.StringIO())
    assert "disk is full" not in str(caught.value) and caught.value.__cause__ is oom
    assert issubclass(DiskFullError, OSError)


def test_a_full_disk_is_disk_full_error_and_exit_4(tmp_path, small_args, fail_train_step, capsys):
    target = tmp_path / "run" / "metrics" / "chunk.npz"
    fail_train_step(OSError(errno.ENOSPC, "No space left on device", str(target)))
    assert main(["train", "--out", str(tmp_path), "--name", "run", *small_args]) == 4
    err = capsys.readouterr().err
    assert f"gpt: error: The disk is full: writing {target}" in err and "Traceback" not in err
