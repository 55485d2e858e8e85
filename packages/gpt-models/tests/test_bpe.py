"""BPE tokenizer: trained locally, stored as JSON, used by train, sample, eval and resume."""

import ctypes
import json
import math
import os
import platform
import signal
import threading

import numpy as np
import pytest

from gpt_models import BPETokenizer, DataError, default_corpus, load_config, main

TEXT = "The quick brown fox jumps over the lazy dog. Grüße, 東京! def f(x): return x\n" * 40


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train([TEXT], vocab_size=300)


def test_bpe_round_trips_any_text_with_fewer_tokens_than_bytes(tok):
    assert tok.vocab_size == 300
    for text in (TEXT, "unseen: ñ ☃ 🙂 \x00\t", ""):
        assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode(TEXT)) < len(TEXT.encode()) / 2
    assert tok.encode("fox").dtype == np.int32


@pytest.mark.skipif(platform.system() != "Linux", reason="a glibc pthread mutex stands in for Rust")
def test_ctrl_c_stops_bpe_training_at_once(monkeypatch):
    # tokenizers learns its merges in Rust, where Python runs no signal handler until it returns:
    # gpt prepare --tokenizer bpe went on for 25 s after a Ctrl-C. The Rust
    # call is played by a C call that ignores signals: a pthread mutex that a helper holds.
    import tokenizers

    libc, mutex = ctypes.CDLL(None), ctypes.create_string_buffer(64)  # zeros: an unlocked mutex
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        libc.pthread_mutex_lock(mutex)
        held.set()
        release.wait(60)  # the old code waited this long, then raised
        held.clear()
        libc.pthread_mutex_unlock(mutex)

    def rust(self, texts, trainer):
        list(texts)
        libc.pthread_mutex_lock(mutex)  # blocks in C, the GIL released, as the trainer does
        libc.pthread_mutex_unlock(mutex)

    helper = threading.Thread(target=hold, daemon=True)
    helper.start()
    held.wait()
    monkeypatch.setattr(tokenizers.Tokenizer, "train_from_iterator", rust)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started ignored
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()
        with pytest.raises(KeyboardInterrupt):
            BPETokenizer.train([TEXT], vocab_size=300)
        assert held.is_set()  # raised while the "trainer" was still working
    finally:
        signal.signal(signal.SIGINT, before)
        release.set()
        helper.join()


def test_bpe_saves_plain_json_and_loads_the_same_tokenizer(tok, tmp_path):
    tok.save(tmp_path / "tok.json")
    assert json.loads((tmp_path / "tok.json").read_text())["model"]["type"] == "BPE"
    again = BPETokenizer.load(tmp_path / "tok.json")
    np.testing.assert_array_equal(again.encode(TEXT), tok.encode(TEXT))


def test_bpe_errors_name_the_problem(tok, tmp_path):
    with pytest.raises(ValueError, match=r"got vocab_size=256, expected 257..65536"):
        BPETokenizer.train([TEXT], vocab_size=256)
    with pytest.raises(DataError, match=r"nope.json does not exist. A run trained with"):
        BPETokenizer.load(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(DataError, match=r"bad.json is not a valid tokenizer JSON file"):
        BPETokenizer.load(tmp_path / "bad.json")
    with pytest.raises(ValueError, match=r"got token id 300, expected ids in 0..299"):
        tok.decode([1, 300])


@pytest.fixture
def train_run(tmp_path, small_args):
    """``train_run(name, *flags)``: ``gpt train`` of the small run into ``tmp_path/name``."""

    def run(name, *extra):
        return main(["train", "--out", str(tmp_path), "--name", name, *small_args, *extra])

    return run


def test_bpe_run_trains_samples_evaluates_and_resumes_from_its_run_folder(
    train_run, tmp_path, capsys
):
    assert train_run("bpe", "--set", "data.tokenizer=bpe", "--set", "data.bpe_vocab_size=300") == 0
    run = tmp_path / "bpe"
    err = capsys.readouterr().err
    assert "model.vocab_size = 256 -> 320: the model's vocabulary follows the tokenizer" in err
    saved = BPETokenizer.load(run / "tokenizer.json")
    assert saved.vocab_size == 300
    cfg = load_config(str(run / "config.toml"))
    assert (cfg.data.tokenizer, cfg.model.vocab_size) == ("bpe", 320)

    greedy = ["--prompt", "The ", "--max-new-tokens", "6", "--temperature", "0"]
    assert main(["sample", "--run", str(run), *greedy]) == 0
    assert capsys.readouterr().out.startswith("The ")
    assert main(["eval", "--run", str(run)]) == 0
    val = float(capsys.readouterr().out.split()[1])
    pd = pytest.importorskip("pandas", reason="pandas is a dev-only dependency")
    metrics = pd.read_csv(run / "metrics.csv")
    assert metrics["val_loss"].dropna().iloc[-1] == pytest.approx(val, rel=1e-5)

    # Resume reads the tokenizer from the run folder (it is not retrained).
    before = (run / "tokenizer.json").read_bytes()
    assert main(["train", "--resume", str(run), "--set", "train.steps=7"]) == 0
    assert (run / "tokenizer.json").read_bytes() == before
    (run / "tokenizer.json").unlink()
    assert main(["sample", "--run", str(run), *greedy]) == 2
    assert "tokenizer.json does not exist. A run trained with" in capsys.readouterr().err


@pytest.mark.parametrize("tokenizer", ["byte", "bpe"])
def test_val_loss_is_in_nats_per_byte_for_every_tokenizer(train_run, tmp_path, capsys, tokenizer):
    # Barely trained (lr ~ 0): the model predicts near-uniformly, so the loss is about ln(vocab)
    # nats per token (a few % off from the random init), and per byte that is ln(vocab) / (bytes per
    # token on the val split): ~3.6x smaller for BPE, which a per-token report would miss.
    assert train_run(tokenizer, "--set", f"data.tokenizer={tokenizer}", "--set", "train.lr=1e-9",
                  "--set", "train.steps=2") == 0  # fmt: skip
    capsys.readouterr()
    run = tmp_path / tokenizer
    assert main(["eval", "--run", str(run)]) == 0
    val = float(capsys.readouterr().out.split()[1])
    corpus = default_corpus().encode()
    val_bytes = corpus[len(corpus) - int(len(corpus) * 0.1) :]
    if tokenizer == "byte":
        vocab, bytes_per_token = 256, 1.0
    else:
        tok = BPETokenizer.load(run / "tokenizer.json")
        vocab, bytes_per_token = 2048, len(val_bytes) / len(tok.encode(val_bytes.decode()))
        assert bytes_per_token > 2.5
    assert val == pytest.approx(math.log(vocab) / bytes_per_token, rel=0.05)


def _write_bin(folder, ids, sidecar):
    folder.mkdir(exist_ok=True)
    for split in ("train", "val"):
        np.asarray(ids, np.uint16).tofile(folder / f"{split}.bin")
        if sidecar is not None:
            (folder / f"{split}.bin.json").write_text(json.dumps(sidecar))
    return folder


def test_bin_data_made_by_bpe_trains_with_its_tokenizer(train_run, tmp_path, capsys, tok):
    tok.save(tmp_path / "data_tok.json")
    ids = np.tile(tok.encode(TEXT), 3)
    side = {"tokenizer": "bpe", "vocab_size": 300, "tokenizer_file": "data_tok.json"}
    data = _write_bin(tmp_path, ids, side)
    assert train_run("run", "--set", f"data.path={data}", "--set", "data.tokenizer=bpe") == 0
    capsys.readouterr()
    run = tmp_path / "run"
    assert BPETokenizer.load(run / "tokenizer.json").vocab_size == 300
    assert load_config(str(run / "config.toml")).model.vocab_size == 320
    assert main(["eval", "--run", str(run)]) == 0


@pytest.mark.parametrize(
    ("sidecar", "tokenizer", "message"),
    [
        ({"tokenizer": "bpe", "vocab_size": 300, "tokenizer_file": "t.json"}, "byte",
         "train.bin.json says the ids in train.bin were made by the 'bpe' tokenizer (vocab 300), "
         "but data.tokenizer = 'byte'. Set --set data.tokenizer=bpe"),
        (None, "bpe", 'data.tokenizer = "bpe" with '),
        ({"tokenizer": "gpt2", "vocab_size": 50257}, "byte",
         "tokenizer = 'gpt2' is not one of 'bpe', 'byte'"),
        ({"tokenizer": "byte", "vocab_size": 300}, "byte", "vocab_size = 300 must be 256 for the byte"),
        ({"tokenizer": "bpe", "vocab_size": 300, "tokenizer_file": "missing.json"}, "bpe",
         "tokenizer_file = 'missing.json' must name the BPE tokenizer JSON file"),
        ({"tokenizer": "bpe", "vocab_size": 64, "tokenizer_file": "t.json"}, "bpe",
         "declares vocab_size = 64, but its tokenizer file"),
    ],
)  # fmt: skip
def test_bin_sidecar_mismatches_exit_2_naming_the_fix(
    train_run, tmp_path, capsys, tok, sidecar, tokenizer, message
):
    tok.save(tmp_path / "t.json")
    data = _write_bin(tmp_path, np.tile(tok.encode(TEXT), 3), sidecar)
    assert (
        train_run("run", "--set", f"data.path={data}", "--set", f"data.tokenizer={tokenizer}") == 2
    )
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bin_sidecar_vocab_smaller_than_the_ids_is_refused(train_run, tmp_path, capsys):
    data = _write_bin(tmp_path, np.arange(400) % 300, {"tokenizer": "byte", "vocab_size": 256})
    assert train_run("run", "--set", f"data.path={data}") == 2
    assert (
        "has token id 299, but its .bin.json sidecar declares vocab_size = 256"
        in capsys.readouterr().err
    )
