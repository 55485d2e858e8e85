"""The GPT-2 presets and runs whose model vocab exceeds the tokenizer's train, sample and eval."""

import numpy as np
import pytest

from gpt_models import load_config, main

TINY_SHAPES = [
    "--set", "model.n_layers=1", "--set", "model.d_model=32", "--set", "model.n_heads=2",
    "--set", "model.seq_len=32", "--set", "train.batch_size=8", "--set", "train.grad_accum=1",
    "--set", "train.steps=4", "--set", "train.warmup_steps=1", "--set", "train.eval_every=2",
    "--set", "train.eval_batches=1", "--set", "train.checkpoint_every=2",
    "--set", "sample.max_new_tokens=8",  # mesh: data-parallel over the devices present
]  # fmt: skip
GREEDY = ["--prompt", "def ", "--max-new-tokens", "8", "--temperature", "0"]


def test_gpt2_small_with_cpu_overrides_trains_samples_and_evaluates(tmp_path, capsys):
    args = ["train", "--config", "gpt2-small", "--out", str(tmp_path), "--name", "g2"]
    assert main(args + TINY_SHAPES) == 0
    out = capsys.readouterr()
    assert (
        "model.vocab_size = 50304 -> 256: the model's vocabulary follows the tokenizer" in out.err
    )
    assert "--- sample ---" in out.out and "Traceback" not in out.err
    run = tmp_path / "g2"
    cfg = load_config(str(run / "config.toml"))
    assert (cfg.model.vocab_size, cfg.model.d_model, cfg.model.pos) == (256, 32, "learned")
    assert main(["sample", "--run", str(run), *GREEDY]) == 0
    assert capsys.readouterr().out.startswith("def ")
    assert main(["eval", "--run", str(run)]) == 0
    assert capsys.readouterr().out.startswith("val_loss ")


def test_a_model_vocab_beyond_the_tokenizer_samples_without_error(tmp_path, capsys):
    # A nanoGPT-style .bin without a sidecar keeps model.vocab_size as set (here 512 > 256 bytes);
    # the model can then pick ids the byte tokenizer lacks, shown as U+FFFD instead of raising.
    data = tmp_path / "data"
    data.mkdir()
    ids = np.frombuffer(b"hello world, hello tokens. " * 40, np.uint8).astype(np.uint16)
    for split in ("train", "val"):
        ids.tofile(data / f"{split}.bin")
    args = ["train", "--out", str(tmp_path), "--name", "wide", "--set", f"data.path={data}"]
    assert main(args + TINY_SHAPES + ["--set", "model.vocab_size=512"]) == 0
    run = tmp_path / "wide"
    assert load_config(str(run / "config.toml")).model.vocab_size == 512
    capsys.readouterr()
    # A barely trained model over 512 ids puts much of its mass on ids 256..511 (never targets).
    assert main(["sample", "--run", str(run), "--prompt", "hello", "--max-new-tokens", "20"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("hello") and "\ufffd" in text


def test_run_folder_holds_metrics_csv_that_pandas_reads_in_one_line(tmp_path, capsys):
    pd = pytest.importorskip("pandas", reason="pandas is a dev-only dependency")
    args = ["train", "--out", str(tmp_path), "--name", "m", "--set", "log.every=2"]
    assert main(args + TINY_SHAPES) == 0
    err = capsys.readouterr().err
    assert "note: no MFU shown: the peak FLOP/s of 'cpu' is unknown" in err
    assert "--set log.peak_flops=" in err and "| MFU" not in err
    metrics = pd.read_csv(tmp_path / "m" / "metrics.csv")
    assert list(metrics.columns) == [
        "step",
        "wall_time",
        "loss",
        "val_loss",
        "lr",
        "grad_norm",
        "tokens_per_s",
    ]  # fmt: skip  (no mfu column on CPU without a peak)
    assert metrics["step"].tolist() == [0, 1, 2, 3]
    assert metrics["val_loss"].notna().tolist() == [False, True, False, True]
    assert metrics["loss"].notna().all() and (metrics["lr"] > 0).any()
    assert (metrics["wall_time"].dropna().diff().dropna() >= 0).all()


def test_a_given_peak_shows_mfu_on_cpu(tmp_path, capsys):
    args = ["train", "--out", str(tmp_path), "--name", "p", "--set", "log.peak_flops=1e9"]
    assert main(args + TINY_SHAPES) == 0
    out = capsys.readouterr()
    assert "| MFU " in out.err and "no MFU shown" not in out.err and ", MFU " in out.out
    pd = pytest.importorskip("pandas", reason="pandas is a dev-only dependency")
    assert "mfu" in pd.read_csv(tmp_path / "p" / "metrics.csv").columns
