import numpy as np
import pytest

from gpt_models import (
    DataConfig,
    DataError,
    default_corpus,
    eval_batches,
    load_dataset,
    train_batch,
)


def test_default_corpus_is_pydoc_topics():
    text = default_corpus()
    assert len(text.encode()) > 300_000 and 'The "assert" statement' in text
    assert default_corpus() == text  # deterministic


def test_split_is_the_tail():
    ds = load_dataset(DataConfig(val_fraction=0.1), seq_len=64, vocab_size=256)
    tokens = np.frombuffer(default_corpus().encode(), np.uint8)
    assert len(ds.val) == int(len(tokens) * 0.1)
    np.testing.assert_array_equal(ds.val, tokens[-len(ds.val) :])
    np.testing.assert_array_equal(ds.train, tokens[: len(ds.train)])


def test_text_file_and_folder(tmp_path):
    (tmp_path / "a.txt").write_text("hello " * 100)
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "b.md").write_text("world " * 100)
    (sub / "img.bin.png").write_bytes(b"\xff\xfe\x00\x80" * 10)  # not UTF-8: skipped
    (tmp_path / ".hidden").write_text("secret " * 100)
    file_ds = load_dataset(DataConfig(path=str(tmp_path / "a.txt")), seq_len=16, vocab_size=256)
    assert len(file_ds.train) + len(file_ds.val) == 600
    folder = load_dataset(DataConfig(path=str(tmp_path)), seq_len=16, vocab_size=256)
    text = bytes(np.concatenate([folder.train, folder.val]).astype(np.uint8)).decode()
    assert text == "hello " * 100 + "\n\n" + "world " * 100


def test_nanogpt_bin_file_and_folder(tmp_path):
    ids = (np.arange(5000) % 1000).astype(np.uint16)
    ids.tofile(tmp_path / "train.bin")
    ids[:500].tofile(tmp_path / "val.bin")
    one = load_dataset(DataConfig(path=str(tmp_path / "train.bin")), seq_len=16, vocab_size=1024)
    assert isinstance(one.train, np.memmap) and len(one.val) == 500
    both = load_dataset(DataConfig(path=str(tmp_path)), seq_len=16, vocab_size=1024)
    assert len(both.train) == 5000 and len(both.val) == 500


def test_bin_tokens_must_fit_vocab(tmp_path):
    (np.arange(3000) % 1000).astype(np.uint16).tofile(tmp_path / "x.bin")
    with pytest.raises(
        DataError,
        match=r"has token id 999, but model.vocab_size = 256\. Set --set model\.vocab_size=1024",
    ):
        load_dataset(DataConfig(path=str(tmp_path / "x.bin")), seq_len=16, vocab_size=256)


def test_missing_and_short_data_errors(tmp_path):
    with pytest.raises(DataError, match=r"Data path .*nothere.txt does not exist"):
        load_dataset(DataConfig(path=str(tmp_path / "nothere.txt")), seq_len=16, vocab_size=256)
    (tmp_path / "short.txt").write_text("x" * 100)
    with pytest.raises(DataError) as info:
        load_dataset(DataConfig(path=str(tmp_path / "short.txt")), seq_len=64, vocab_size=256)
    text = str(info.value)
    assert (
        "validation split has 10 tokens" in text and "model.seq_len = 64 needs at least 66" in text
    )
    assert "--set model.seq_len=" in text
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=r"holds no UTF-8 text files"):
        load_dataset(DataConfig(path=str(empty)), seq_len=16, vocab_size=256)


def test_batches_depend_only_on_seed_and_step():
    tokens = np.arange(10_000)
    kw = {"seed": 3, "batch_size": 8, "grad_accum": 2, "seq_len": 16}
    a = train_batch(tokens, 5, **kw)
    assert a.shape == (2, 4, 17) and a.dtype == np.int32
    np.testing.assert_array_equal(a, train_batch(tokens, 5, **kw))
    assert not np.array_equal(a, train_batch(tokens, 6, **kw))
    assert not np.array_equal(a, train_batch(tokens, 5, **{**kw, "seed": 4}))
    np.testing.assert_array_equal(a[..., 1:], a[..., :-1] + 1)  # contiguous windows


def test_process_shards_concatenate_to_the_global_batch():
    tokens = np.arange(10_000)
    kw = {"seed": 0, "batch_size": 8, "grad_accum": 2, "seq_len": 16}
    full = train_batch(tokens, 1, **kw)
    parts = [train_batch(tokens, 1, process_index=p, process_count=2, **kw) for p in range(2)]
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), full)
    ev = eval_batches(tokens, n_batches=2, batch_size=4, seq_len=16)
    halves = [
        eval_batches(
            tokens, n_batches=2, batch_size=4, seq_len=16, process_index=p, process_count=2
        )
        for p in range(2)
    ]
    np.testing.assert_array_equal(np.concatenate(halves, axis=1), ev)
