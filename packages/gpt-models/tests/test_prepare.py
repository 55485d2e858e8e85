"""gpt prepare and the token store: formats, split, resume, re-run, bad input, training reads."""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from gpt_models import DataConfig, DataError, load_dataset, main, prepare, train_batch


def _jsonl(path: Path, texts: list[str], field: str = "text") -> Path:
    path.write_text("".join(json.dumps({field: t}) + "\n" for t in texts), encoding="utf-8")
    return path


def _docs(n: int, tag: str = "doc") -> list[str]:
    return [f"{tag} {i}: " + "lorem ipsum dolor " * (i % 5 + 1) for i in range(n)]


def _ids(store: Path, split: str) -> np.ndarray:
    files = sorted(store.glob(f"{split}-*.bin"))
    return np.concatenate([np.fromfile(f, dtype="<u2") for f in files])


def test_store_holds_every_document_once_ended_by_eot(tmp_path):
    texts = _docs(40)
    (tmp_path / "in").mkdir()
    _jsonl(tmp_path / "in" / "a.jsonl", texts[:20])
    with gzip.open(tmp_path / "in" / "b.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts[20:])
    (tmp_path / "in" / "c.md").write_text("a whole file is one document", encoding="utf-8")
    r = prepare([tmp_path / "in"], tmp_path / "st", val_fraction=0.25, shard_tokens=300)
    m = r.manifest
    assert m["dtype"] == "uint16" and m["tokenizer"]["eot_id"] == 0
    assert m["documents"]["train"] + m["documents"]["val"] == 41
    assert 0 < m["documents"]["val"] < 41
    assert [s["name"] for s in m["sources"]] == ["in/a.jsonl", "in/b.jsonl.gz", "in/c.md"]
    assert all(s["tokens"] == 300 for s in m["shards"]["train"][:-1])
    got = []
    for split in ("train", "val"):
        ids = _ids(tmp_path / "st", split)
        assert ids[-1] == 0  # every document, the last too, ends with the end-of-text id
        got += bytes(ids.astype(np.uint8)).decode().split("\0")[:-1]
    assert sorted(got) == sorted([*texts, "a whole file is one document"])
    assert r.tokens == m["tokens"] and not r.up_to_date


def test_rerun_does_nothing_and_says_so(tmp_path, capsys):
    src = _jsonl(tmp_path / "a.jsonl", _docs(10))
    cmd = ["prepare", str(src), "--out", str(tmp_path / "st"), "--val-fraction", "0.5"]
    assert main(cmd) == 0
    stamp = (tmp_path / "st" / "manifest.json").stat().st_mtime_ns
    assert main(cmd) == 0
    out = capsys.readouterr().out
    assert "is up to date" in out and "nothing to do" in out
    assert (tmp_path / "st" / "manifest.json").stat().st_mtime_ns == stamp


def test_split_is_stable_when_files_are_added(tmp_path):
    (tmp_path / "d").mkdir()
    _jsonl(tmp_path / "d" / "a.jsonl", _docs(200))
    one = prepare([tmp_path / "d"], tmp_path / "s1", val_fraction=0.2).manifest
    _jsonl(tmp_path / "d" / "0.jsonl", _docs(50, "new"))
    two = prepare([tmp_path / "d"], tmp_path / "s2", val_fraction=0.2).manifest
    a1 = next(s for s in one["sources"] if s["name"] == "d/a.jsonl")
    a2 = next(s for s in two["sources"] if s["name"] == "d/a.jsonl")
    assert a1["val_documents"] == a2["val_documents"] > 0


def test_interrupted_prepare_resumes_to_the_same_store(tmp_path, kill_prepare):
    src = _jsonl(tmp_path / "a.jsonl", _docs(300))
    whole = prepare([src], tmp_path / "whole", val_fraction=0.1, shard_tokens=500).manifest
    kill_prepare(5)  # like kill -9 after the 5th chunk's ids are written, before its state
    with pytest.raises(KeyboardInterrupt):
        prepare([src], tmp_path / "st", val_fraction=0.1, shard_tokens=500)
    assert not (tmp_path / "st" / "manifest.json").exists()
    kill_prepare(None)
    again = prepare([src], tmp_path / "st", val_fraction=0.1, shard_tokens=500).manifest
    assert again["tokens"] == whole["tokens"]
    assert again["shards"] == whole["shards"]
    assert not (tmp_path / "st" / ".prepare-state.json").exists()


def test_other_tokenizer_into_the_same_store_is_refused(tmp_path):
    src = _jsonl(tmp_path / "a.jsonl", _docs(50))
    prepare([src], tmp_path / "st")
    with pytest.raises(DataError, match="from other inputs or settings .*tokenizer_arg"):
        prepare([src], tmp_path / "st", tokenizer="bpe", bpe_vocab_size=300)


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ("{not json", r"a\.jsonl:3 is not JSON"),
        (
            '{"body": "x"}',
            r"a\.jsonl:3 has no string field 'text' \(keys: \['body'\]\).*--text-field body",
        ),
    ],
)
def test_bad_jsonl_line_is_named(tmp_path, line, match):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "a"}\n{"text": "b"}\n' + line + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=match):
        prepare([src], tmp_path / "st")
    assert not (tmp_path / "st" / "manifest.json").exists()


def test_empty_corpus_and_unknown_inputs(tmp_path):
    (tmp_path / "e.jsonl").write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="holds no text"):
        prepare([tmp_path / "e.jsonl"], tmp_path / "st")
    (tmp_path / "e.txt").write_text("", encoding="utf-8")  # empty documents add nothing
    (tmp_path / "f.jsonl").write_text('{"text": ""}\n', encoding="utf-8")
    with pytest.raises(DataError, match="holds no text"):
        prepare([tmp_path / "e.txt", tmp_path / "f.jsonl"], tmp_path / "st5")
    (tmp_path / "g.jsonl").write_text('{"text": ""}\n{"text": "ab"}\n', encoding="utf-8")
    m = prepare([tmp_path / "e.txt", tmp_path / "g.jsonl"], tmp_path / "st4", val_fraction=0.0)
    assert (m.manifest["documents"]["train"], m.manifest["tokens"]["train"]) == (1, 3)
    (tmp_path / "x.csv").write_text("a,b", encoding="utf-8")
    with pytest.raises(DataError, match=r"x\.csv is not a kind of file gpt prepare reads"):
        prepare([tmp_path / "x.csv"], tmp_path / "st2")
    with pytest.raises(DataError, match="does not exist"):
        prepare([tmp_path / "missing"], tmp_path / "st3")


def test_undecodable_bytes_are_replaced_and_counted(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"good \xff\xfe text")
    m = prepare([tmp_path / "a.txt"], tmp_path / "st", val_fraction=0.0).manifest
    assert m["undecodable_bytes"] == 2
    assert (
        bytes(_ids(tmp_path / "st", "train")[:-1].astype(np.uint8)).decode()
        == "good \ufffd\ufffd text"
    )


def test_full_disk_is_a_clear_error_and_nothing_looks_complete(tmp_path, monkeypatch):
    src = _jsonl(tmp_path / "a.jsonl", _docs(20))

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(DataError, match="is full .*Free some space and re-run"):
        prepare([src], tmp_path / "st", val_fraction=0.2)
    assert not (tmp_path / "st" / "manifest.json").exists()
    monkeypatch.undo()
    assert prepare([src], tmp_path / "st", val_fraction=0.2).tokens["train"] > 0


def test_zst_and_parquet_inputs(tmp_path):
    zstandard = pytest.importorskip("zstandard", reason="the gpt-models[zstd] extra")
    pa = pytest.importorskip("pyarrow", reason="the gpt-models[parquet] extra")
    import pyarrow.parquet as pq

    line = (json.dumps({"text": "zst doc"}) + "\n").encode()
    (tmp_path / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(line * 3))
    pq.write_table(pa.table({"body": ["pq one", "pq two"]}), tmp_path / "b.parquet")
    with pytest.raises(DataError, match=r"b\.parquet has no column 'text' \(columns: \['body'\]\)"):
        prepare([tmp_path / "b.parquet"], tmp_path / "st0")
    m = prepare([tmp_path / "b.parquet"], tmp_path / "st1", text_field="body", val_fraction=0.0)
    assert m.manifest["documents"]["train"] == 2
    m = prepare([tmp_path / "a.jsonl.zst"], tmp_path / "st2", val_fraction=0.0).manifest
    assert m["tokens"]["train"] + m["tokens"]["val"] == 3 * len("zst doc\0")


def test_training_batches_read_the_store_like_an_array(tmp_path):
    src = _jsonl(tmp_path / "a.jsonl", _docs(200))
    prepare([src], tmp_path / "st", val_fraction=0.1, shard_tokens=700)
    ds = load_dataset(DataConfig(path=str(tmp_path / "st")), seq_len=16, vocab_size=256)
    flat = _ids(tmp_path / "st", "train")
    assert len(ds.train) == len(flat) and len(ds.val) == len(_ids(tmp_path / "st", "val"))
    kw = {"seed": 3, "batch_size": 8, "grad_accum": 2, "seq_len": 16}
    np.testing.assert_array_equal(train_batch(ds.train, 5, **kw), train_batch(flat, 5, **kw))
    # windows and slices across every shard boundary, integer indices (negative too), the ends
    for cut in range(700, len(flat), 700):
        np.testing.assert_array_equal(ds.train[cut - 20 : cut + 720], flat[cut - 20 : cut + 720])
    np.testing.assert_array_equal(ds.train[::7], flat[::7])
    np.testing.assert_array_equal(ds.train[len(flat) - 5 :], flat[-5:])
    assert ds.train[10:10].shape == (0,)
    some = np.array([[0, 699, 700], [-1, 1401, 3]])
    np.testing.assert_array_equal(ds.train[some], flat[some])
    with pytest.raises(IndexError):
        ds.train[np.array([len(flat)])]
    # read, not mapped: the process's RSS cannot grow with the store
    assert "train-00000.bin" not in Path("/proc/self/maps").read_text()


def test_damaged_shard_and_wrong_tokenizer_at_train_time(tmp_path):
    src = _jsonl(tmp_path / "a.jsonl", _docs(200))
    prepare([src], tmp_path / "st", shard_tokens=700)
    cfg = DataConfig(path=str(tmp_path / "st"))
    with pytest.raises(DataError, match="made by the 'byte' tokenizer .*data.tokenizer = 'bpe'"):
        load_dataset(
            DataConfig(path=str(tmp_path / "st"), tokenizer="bpe"), seq_len=8, vocab_size=256
        )
    shard = tmp_path / "st" / "train-00001.bin"
    data = shard.read_bytes()
    shard.write_bytes(data[:-2] + b"\x07\x00")
    with pytest.raises(
        DataError, match=r"train-00001\.bin has the recorded size but not the recorded sha256"
    ):
        load_dataset(cfg, seq_len=8, vocab_size=256)
    shard.write_bytes(data[:-2])
    with pytest.raises(
        DataError, match=r"train-00001\.bin has 1,398 bytes, but manifest.json records 1,400"
    ):
        load_dataset(cfg, seq_len=8, vocab_size=256)


def test_cli_bad_input_exits_2_without_traceback(tmp_path, capsys):
    (tmp_path / "a.jsonl").write_text("oops\n", encoding="utf-8")
    assert main(["prepare", str(tmp_path / "a.jsonl"), "--out", str(tmp_path / "st")]) == 2
    err = capsys.readouterr().err
    assert "a.jsonl:1 is not JSON" in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--tokenizer", "bpe", "--bpe-vocab-size", "10"],
         "--bpe-vocab-size 10 is outside 257..65536 (the 256 bytes plus at least one merge"),
        (["--bpe-vocab-size", "300"],
         "--bpe-vocab-size 300 applies to --tokenizer bpe (the tokenizer trained here), not "
         "--tokenizer byte"),
        (["--out", "a.jsonl"], "a.jsonl is a file, but a token store is a folder"),
    ],
)  # fmt: skip
def test_cli_refuses_bad_settings_before_reading_the_corpus(tmp_path, capsys, flags, needle):
    src = _jsonl(tmp_path / "a.jsonl", _docs(3))
    args = ["prepare", str(src), "--out", str(tmp_path / "st"), *flags]
    if "--out" in flags:  # the later --out wins: point it at the corpus file itself
        args[-1] = str(src)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err, err
    assert not (tmp_path / "st").exists()


def test_a_store_too_small_to_train_on_names_the_prepare_flag(tmp_path):
    # A store's split is gpt prepare's: data.val_fraction is not what to change.
    src = _jsonl(tmp_path / "a.jsonl", _docs(30))
    message = r"its validation split has 0 tokens \(split by gpt prepare --val-fraction 0\.0\)"
    for tokenizer in ("byte", "bpe"):
        prepare([src], tmp_path / tokenizer, val_fraction=0.0, tokenizer=tokenizer,
                bpe_vocab_size=300)  # fmt: skip
        cfg = DataConfig(path=str(tmp_path / tokenizer), tokenizer=tokenizer)
        with pytest.raises(DataError, match=message):
            load_dataset(cfg, seq_len=8, vocab_size=320)


def test_a_vocabulary_over_65536_ids_is_stored_as_uint32(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{i}": i for i in range(70_000)} | {"[UNK]": 70_000}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tok.json"))
    src = _jsonl(tmp_path / "a.jsonl", ["w69999 w5", "w7"])
    m = prepare([src], tmp_path / "st", tokenizer=str(tmp_path / "tok.json"), val_fraction=0.0)
    assert m.manifest["dtype"] == "uint32" and m.manifest["tokenizer"]["eot_id"] == 70_001
    ids = np.fromfile(tmp_path / "st" / "train-00000.bin", dtype="<u4").tolist()
    assert ids == [69_999, 5, 70_001, 7, 70_001]


def test_a_run_tokenizer_other_than_the_stores_is_refused(tmp_path):
    from gpt_models import BPETokenizer

    src = _jsonl(tmp_path / "a.jsonl", _docs(100))
    prepare([src], tmp_path / "st", tokenizer="bpe", bpe_vocab_size=300, val_fraction=0.1)
    cfg = DataConfig(path=str(tmp_path / "st"), tokenizer="bpe")
    own = BPETokenizer.load(tmp_path / "st" / "tokenizer.json")
    assert len(load_dataset(cfg, seq_len=8, vocab_size=320, tokenizer=own).train) > 0
    by_default = load_dataset(cfg, seq_len=8, vocab_size=320)  # the store's own tokenizer
    assert by_default.tokenizer.to_json() == own.to_json()
    assert by_default.tokenizer.decode(by_default.val[:40].tolist()) == own.decode(
        by_default.val[:40].tolist()
    )
    other = BPETokenizer.train(["some other text entirely " * 20], vocab_size=270)
    with pytest.raises(DataError, match="not the one the token store .* was made with"):
        load_dataset(cfg, seq_len=8, vocab_size=320, tokenizer=other)


def test_more_bad_input_is_named(tmp_path):
    src = _jsonl(tmp_path / "a.jsonl", _docs(30))
    with pytest.raises(DataError, match=r"--val-fraction 1.5 is outside \[0, 1\)"):
        prepare([src], tmp_path / "st", val_fraction=1.5)
    with pytest.raises(DataError, match="--tokenizer 'nope.json' is neither 'byte', 'bpe' nor"):
        prepare([src], tmp_path / "st", tokenizer="nope.json")
    (tmp_path / "bad.json").write_text("{}", encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.json is not a tokenizers JSON file"):
        prepare([src], tmp_path / "st0", tokenizer=str(tmp_path / "bad.json"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "x.bin").write_bytes(b"\0")
    with pytest.raises(DataError, match=r"empty holds no file gpt prepare reads"):
        prepare([tmp_path / "empty"], tmp_path / "st1")
    prepare([src], tmp_path / "st", shard_tokens=400)
    manifest = json.loads((tmp_path / "st" / "manifest.json").read_text())
    (tmp_path / "st" / "train-00000.bin").unlink()
    with pytest.raises(DataError, match=r"Shard .*train-00000\.bin listed in .* is missing"):
        load_dataset(DataConfig(path=str(tmp_path / "st")), seq_len=8, vocab_size=256)
    (tmp_path / "st" / "manifest.json").write_text(json.dumps({**manifest, "version": 99}))
    with pytest.raises(
        DataError, match="has store format version 99; this gpt-models reads versions 1 and 2"
    ):
        load_dataset(DataConfig(path=str(tmp_path / "st")), seq_len=8, vocab_size=256)


def test_gpt_train_on_a_bpe_store_uses_its_tokenizer(tmp_path, make_config):
    from gpt_models import train

    src = _jsonl(tmp_path / "a.jsonl", _docs(300))
    prepare([src], tmp_path / "st", tokenizer="bpe", bpe_vocab_size=300, val_fraction=0.1)
    cfg = make_config(
        data={"path": str(tmp_path / "st"), "tokenizer": "bpe", "val_fraction": 0.3},
        train={"steps": 2, "eval_every": 2},
        mesh={"data": -1},
    )
    told = io.StringIO()
    assert train(cfg, tmp_path / "run", stream=told, write_sample=False).step == 2
    # The store keeps the split gpt prepare made; a data.val_fraction set anyway is noted.
    assert "note: data.val_fraction = 0.3 does not apply to a token store" in told.getvalue()
    assert (tmp_path / "run" / "tokenizer.json").read_text() == (
        tmp_path / "st" / "tokenizer.json"
    ).read_text()
    # the model's vocabulary follows the store's tokenizer (<= 301 ids with <|endoftext|>), rounded up
    assert "vocab_size = 320" in (tmp_path / "run" / "config.toml").read_text()


def test_a_shard_cut_short_while_training_reads_it_is_named(tmp_path):
    src = _jsonl(tmp_path / "a.jsonl", _docs(200))
    prepare([src], tmp_path / "st", val_fraction=0.1, shard_tokens=700)
    ds = load_dataset(DataConfig(path=str(tmp_path / "st")), seq_len=16, vocab_size=256)
    os.truncate(tmp_path / "st" / "train-00000.bin", 100)  # after the open-time size check
    with pytest.raises(
        DataError,
        match=r"shard ended early: 40 bytes were expected at offset 200, 0"
        r" were read\. The store changed while this run read it; run gpt prepare",
    ):
        ds.train[100:120]


def test_a_resumed_prepare_refuses_a_changed_tokenizer_file_and_keeps_the_folder(
    tmp_path, kill_prepare
):
    src = _jsonl(tmp_path / "a.jsonl", _docs(300))
    kill_prepare(6)  # after the progress file, the tokenizer's record and a few chunks
    with pytest.raises(KeyboardInterrupt):
        prepare([src], tmp_path / "st", tokenizer="bpe", bpe_vocab_size=300, val_fraction=0.1)
    kill_prepare(None)
    other = tmp_path / "other"
    prepare([src], other, tokenizer="bpe", bpe_vocab_size=280, val_fraction=0.1)
    (tmp_path / "st" / "tokenizer.json").write_bytes((other / "tokenizer.json").read_bytes())
    before = sorted(p.name for p in (tmp_path / "st").iterdir())
    with pytest.raises(DataError, match=r"tokenizer.json is missing or is not the tokenizer this "
                       r"unfinished gpt prepare made .*Delete .*st and start over"):  # fmt: skip
        prepare([src], tmp_path / "st", tokenizer="bpe", bpe_vocab_size=300, val_fraction=0.1)
    assert sorted(p.name for p in (tmp_path / "st").iterdir()) == before  # left to look at


def test_a_split_left_empty_either_way_names_the_fraction_that_fills_it(tmp_path):
    src = _jsonl(tmp_path / "a.jsonl", _docs(8))
    with pytest.raises(DataError, match="leaves the train split empty: all 8 documents went to "
                       r"the validation split .*Fix: --val-fraction (0\.\d+) puts"):  # fmt: skip
        prepare([src], tmp_path / "st", val_fraction=0.99)
    assert not (tmp_path / "st").exists()
    with pytest.raises(DataError) as refused:
        prepare([src], tmp_path / "st", val_fraction=0.001)
    fraction = float(re.search(r"Fix: --val-fraction (0\.\d+) puts", str(refused.value))[1])
    m = prepare([src], tmp_path / "st", val_fraction=fraction).manifest
    assert m["documents"]["train"] > 0 and m["documents"]["val"] > 0


def test_skipped_files_are_reported_before_the_work(tmp_path):
    (tmp_path / "in").mkdir()
    _jsonl(tmp_path / "in" / "a.jsonl", _docs(40))
    (tmp_path / "in" / "notes.csv").write_text("a,b")
    (tmp_path / "in" / "README").write_text("hi")
    (tmp_path / "in" / ".hidden.txt").write_text("never read, never listed")
    told = io.StringIO()
    r = prepare([tmp_path / "in"], tmp_path / "st", val_fraction=0.2, progress=told)
    assert r.skipped == ("in/README", "in/notes.csv")
    first = told.getvalue().splitlines()[0]
    assert first == ("note: skipped 2 files (1 .csv, 1 no extension): in/README, in/notes.csv "
                     "(not a kind gpt prepare reads)")  # fmt: skip


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_is_separate_lines_in_a_file_and_one_redrawn_line_on_a_terminal(
    tmp_path, kill_prepare
):
    src = _jsonl(tmp_path / "a.jsonl", _docs(2000))
    kill_prepare(10**9)  # small chunks (many progress updates); no kill
    to_file = io.StringIO()
    prepare([src], tmp_path / "st", val_fraction=0.1, progress=to_file)
    lines = to_file.getvalue().splitlines()
    assert "\r" not in to_file.getvalue() and 2 <= len(lines) <= 21, lines
    assert all(line.startswith("prepare: ") for line in lines)
    assert lines[-1].startswith("prepare: 2,000 docs, ") and "100%" in lines[-2]
    to_terminal = _Terminal()
    prepare([src], tmp_path / "st2", val_fraction=0.1, progress=to_terminal)
    shown = to_terminal.getvalue()
    assert shown.startswith("\rprepare: ") and shown.endswith("\x1b[K\n")
    assert shown.count("\n") == 1  # one line, redrawn in place


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda m: m["tokenizer"].update(file="../tokenizer.json"),
         "tokenizer.file = '../tokenizer.json' is not a plain file name"),
        (lambda m: m["shards"]["val"].append(m["shards"]["train"][0]),
         "shard train-00000.bin is listed twice"),
        (lambda m: m["shards"]["train"][0].update(sha256="abc"),
         "shard train-00000.bin: sha256 = 'abc' is not a sha256 hex digest"),
        (lambda m: m["tokenizer"].update(vocab_size=70_000),
         "dtype = 'uint16', but the tokenizer's 70,000 ids are stored as uint32"),
        (lambda m: m["tokens"].update(train=1),
         "tokens.train = 1, but its shards hold 11,694"),
    ],
    ids=["tokenizer-outside", "shard-twice", "bad-sha256", "vocab-needs-uint32", "token-total"],
)  # fmt: skip
def test_every_manifest_field_is_checked_before_a_shard_is_read(tmp_path, edit, needle):
    src = _jsonl(tmp_path / "a.jsonl", _docs(200))
    prepare([src], tmp_path / "st", shard_tokens=700, val_fraction=0.1)
    path = tmp_path / "st" / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    with pytest.raises(DataError, match=re.escape(needle)):
        load_dataset(DataConfig(path=str(tmp_path / "st")), seq_len=8, vocab_size=256)
