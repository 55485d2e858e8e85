"""``evaluate_text`` and ``gpt eval --text``: the sliding-window loss and bits per byte."""

import math

import jax
import numpy as np
import pytest

from gpt_models import DataError, UsageError, evaluate_text, forward, init_params, main

_forward = jax.jit(forward, static_argnums=2)  # one compile per context length, not per op


def _hand_scored(params, model, tokens, stride):
    """Each token's log-prob, one forward call per token, with the context the protocol gives it."""
    seq_len, out = model.seq_len, []
    for i in range(1, len(tokens)):
        begin = max(0, math.ceil((i - seq_len) / stride)) * stride  # its first window reaching it
        logits = np.asarray(_forward(params, tokens[None, begin:i], model)[0, -1], np.float64)
        out.append(logits[tokens[i]] - logits.max() - np.log(np.exp(logits - logits.max()).sum()))
    return np.array(out)


@pytest.mark.parametrize("stride", [3, 8])
def test_matches_a_token_by_token_scorer(make_config, tmp_path, stride):
    cfg = make_config(model={"seq_len": 8, "n_layers": 1})
    params = init_params(cfg.model, jax.random.key(1))
    text = "Sliding windows, each token once: ünïcode too."
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    (tmp_path / "b.txt").write_text("short", encoding="utf-8")
    score = evaluate_text(params, cfg, tmp_path, stride=stride, batch_size=3)
    hand = np.concatenate([
        _hand_scored(params, cfg.model, np.frombuffer(t.encode(), np.uint8).astype(np.int32), stride)
        for t in (text, "short")
    ])  # fmt: skip
    assert score.files == 2 and score.tokens == len(hand) == len(text.encode()) - 1 + 4
    assert score.bytes == score.tokens  # bytes: one per token, each file's first one unscored
    np.testing.assert_allclose(score.nats_per_token, -hand.mean(), rtol=1e-6)
    np.testing.assert_allclose(
        score.bits_per_byte, -hand.sum() / math.log(2) / score.bytes, rtol=1e-6
    )


def test_bad_arguments(make_config, tmp_path):
    cfg = make_config()
    params = init_params(cfg.model, jax.random.key(0))
    (tmp_path / "a.txt").write_text("hello there")
    with pytest.raises(
        UsageError, match=r"stride = 0 is out of range; it must be 1..model.seq_len \(32\)"
    ):
        evaluate_text(params, cfg, tmp_path / "a.txt", stride=0)
    with pytest.raises(DataError, match="missing.txt does not exist. Pass text files or folders"):
        evaluate_text(params, cfg, tmp_path / "missing.txt")
    (tmp_path / "bin.dat").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DataError, match=r"bin.dat:1 is not UTF-8 text .*convert the file to UTF-8"):
        evaluate_text(params, cfg, tmp_path / "bin.dat")
    (tmp_path / "latin1.txt").write_bytes("first line\nsecond\ncaf\u00e9\n".encode("latin-1"))
    with pytest.raises(
        DataError, match=r"latin1.txt:3 is not UTF-8 text \(byte 0xe9 at byte offset 21\)"
    ):
        evaluate_text(params, cfg, tmp_path / "latin1.txt")
    (tmp_path / "one.txt").write_text("x")
    with pytest.raises(DataError, match="each file needs at least two tokens"):
        evaluate_text(params, cfg, tmp_path / "one.txt")


def _value(out, key):
    return float(next(line.split()[1] for line in out.splitlines() if line.startswith(key + " ")))


def test_cli_val_text_equals_the_loops_val_loss_on_the_same_windows(tmp_path, capsys, small_args):
    # 16 validation windows (eval_batches 2 x batch 8) of 32 tokens tile a 513-byte validation
    # split exactly, as --stride 32 does: the two protocols then score the same tokens.
    data = tmp_path / "data.txt"
    data.write_text(("The quick brown fox jumps over the lazy dog. " * 120)[:5130])
    flags = [*small_args, "--set", f"data.path={data}", "--set", "data.val_fraction=0.1"]
    assert main(["train", "--out", str(tmp_path), "--name", "run", *flags]) == 0
    run = str(tmp_path / "run")
    capsys.readouterr()
    assert main(["eval", run]) == 0
    loop = _value(capsys.readouterr().out, "val_loss")
    assert main(["eval", run, "--text", "@val", "--stride", "32", "--batch-size", "5"]) == 0
    out = capsys.readouterr()
    assert "512 tokens, 512 bytes, 16 windows of 32 (stride 32)" in out.out
    assert "eval text: 16/16 windows" in out.err
    assert _value(out.out, "nats_per_byte") == pytest.approx(loop, abs=2e-6)
    assert _value(out.out, "bits_per_byte") == pytest.approx(loop / math.log(2), abs=3e-6)
    assert main(["eval", run, "--text", "@val"]) == 0  # default stride 16: each token once too
    assert "512 tokens, 512 bytes, 31 windows of 32 (stride 16)" in capsys.readouterr().out
    assert main(["eval", run, "--text", str(data), "--stride", "33"]) == 2
    assert "stride = 33 is out of range" in capsys.readouterr().err
    assert main(["eval", run, "--stride", "4", "--task", str(data)]) == 2
    assert "gpt eval --stride applies to --text" in capsys.readouterr().err
