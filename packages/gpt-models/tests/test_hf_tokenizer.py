"""Real tokenizers: ``data.tokenizer = PATH/tokenizer.json``, and the tokenizer of ``gpt import``.

The tokenizer files are built here with the `tokenizers` library (a small byte-level BPE learnt
from the embedded corpus, shaped like GPT-2's: ``<|endoftext|>`` is a special token), never
downloaded.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpt_models import (
    PRESETS,
    BPETokenizer,
    DataConfig,
    DataError,
    default_corpus,
    export_hf,
    generate,
    init_params,
    load_dataset,
    load_run,
    main,
    prepare,
)

DATA = Path(__file__).parent / "data"


def _tokenizer_json(path: Path, vocab: int, specials: tuple[str, ...] = ("<|endoftext|>",)) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=list(specials),
        show_progress=False,
    )
    tok.train_from_iterator([default_corpus()[:60_000]], trainer)
    tok.save(str(path))
    return path


def test_prepare_and_train_read_a_tokenizer_json_alike(tmp_path):
    """One loader: the same ids, the same end-of-text id, the store's tokenizer hash matches."""
    bare = _tokenizer_json(tmp_path / "bare.json", 290, specials=())  # no end-of-text token
    tok = BPETokenizer.from_file(bare)
    assert (tok.vocab_size, tok.eot_id) == (291, 290)  # <|endoftext|> added as one more id
    (tmp_path / "in").mkdir()
    for i in range(20):
        (tmp_path / "in" / f"{i}.txt").write_text(default_corpus()[i * 600 : (i + 1) * 600])
    r = prepare([tmp_path / "in"], tmp_path / "st", tokenizer=str(bare), val_fraction=0.25)
    assert r.manifest["tokenizer"]["eot_id"] == 290
    assert r.manifest["tokenizer"]["vocab_size"] == 291
    cfg = DataConfig(path=str(tmp_path / "st"), tokenizer=str(bare))
    ds = load_dataset(cfg, seq_len=16, vocab_size=320, tokenizer=tok)  # the store's hash matches
    assert int(np.asarray(ds.train[:5000]).max()) == 290  # documents end with <|endoftext|>
    own = load_dataset(cfg, seq_len=16, vocab_size=320)  # no tokenizer=: the store's own
    assert (own.tokenizer.vocab_size, own.tokenizer.eot_id) == (291, 290)
    assert own.tokenizer.encode("import os").tolist() == tok.encode("import os").tolist()
    llama_like = _tokenizer_json(tmp_path / "l.json", 290, specials=("<s>", "</s>"))
    assert (
        BPETokenizer.from_file(llama_like).eot_id,
        BPETokenizer.from_file(llama_like).vocab_size,
    ) == (1, 290)


def test_bad_data_tokenizer_values_are_named(tmp_path, capsys):
    assert main(["config", "show", "--set", "data.tokenizer=bytes"]) == 2
    assert "data.tokenizer = 'bytes' must be 'byte', 'bpe' or the path of a tokenizers JSON" in (
        capsys.readouterr().err
    )
    missing = tmp_path / "nope" / "tokenizer.json"
    args = ["train", "--out", str(tmp_path), "--name", "r", "--set", f"data.tokenizer={missing}"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"data.tokenizer = '{missing}': no such file. Expected 'byte', 'bpe' or the path" in err
    assert not (tmp_path / "r").exists()
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(
        DataError, match=r"data.tokenizer .*bad\.json is not a tokenizers JSON file"
    ):
        BPETokenizer.from_file(tmp_path / "bad.json")


def test_config_show_sizes_the_model_by_a_tokenizer_json(tmp_path, capsys):
    file = _tokenizer_json(tmp_path / "tokenizer.json", 300)
    assert main(["config", "show", "--set", f"data.tokenizer={file}"]) == 0
    out = capsys.readouterr().out
    assert "vocab_size = 320" in out and "vocab_real = 300" in out


def _hf_folder(tmp_path: Path, vocab: int = 300) -> Path:
    """A random GPT-2-shaped Hugging Face folder with a ``vocab``-id byte-level BPE tokenizer.json."""
    file = _tokenizer_json(tmp_path / "tokenizer.json", vocab)
    cfg = dataclasses.replace(PRESETS["gpt2-small"].model, vocab_size=320, vocab_real=vocab,
                              seq_len=32, d_model=32, n_layers=1, n_heads=2)  # fmt: skip
    return export_hf(cfg, init_params(cfg, jax.random.key(5)), tmp_path / "hf", tokenizer=file)


def test_import_train_sample_with_the_folders_tokenizer(tmp_path, capsys):
    hf = _hf_folder(tmp_path)
    assert (hf / "tokenizer.json").read_text() == (tmp_path / "tokenizer.json").read_text()
    assert main(["import", str(hf), "--name", "imp", "--out", str(tmp_path)]) == 0
    imported = tmp_path / "imp"
    cfg, _, _ = load_run(imported)
    assert cfg.data.tokenizer == str((imported / "tokenizer.json").absolute())
    args = ["train", "--init-from", str(imported), "--out", str(tmp_path), "--name", "ft",
            "--set", "train.steps=2", "--set", "train.batch_size=8", "--set",
            "train.eval_batches=1", "--set", "sample.max_new_tokens=4"]  # fmt: skip
    assert main(args) == 0  # data.tokenizer follows the source's tokenizer.json
    ft = tmp_path / "ft"
    tok = BPETokenizer.load(ft / "tokenizer.json")
    assert tok.to_json() == BPETokenizer.load(imported / "tokenizer.json").to_json()
    capsys.readouterr()
    prompt = "The return statement"
    assert main(["sample", "--run", str(ft), "--prompt", prompt, "--max-new-tokens", "6",
                 "--temperature", "0"]) == 0  # fmt: skip
    shown = capsys.readouterr().out.rstrip("\n")
    cfg, params, _ = load_run(ft)
    ids = tok.encode(prompt)
    assert len(ids) < len(prompt)  # merged subwords, not bytes
    out = generate(params, jnp.asarray(ids), cfg.model, max_new_tokens=6, temperature=0.0,
                   key=jax.random.key(0))  # fmt: skip
    assert shown == tok.decode(np.asarray(out))
    assert main(["export", str(ft), str(tmp_path / "back")]) == 0
    assert (tmp_path / "back" / "tokenizer.json").read_text() == tok.to_json()


def test_import_refuses_a_tokenizer_larger_than_the_model(tmp_path, capsys):
    folder = Path(shutil.copytree(DATA / "hf_gpt2", tmp_path / "src"))  # vocabulary 100
    _tokenizer_json(folder / "tokenizer.json", 300)
    assert main(["import", str(folder), "--name", "big", "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'tokenizer.json'} has 300 token ids, but the model's vocabulary " in err
    assert "(config.json vocab_size) is 100: ids 100..299 would index past its embeddings" in err
    assert "Put the tokenizer.json the model was trained with in the folder, or remove it" in err
    assert not (tmp_path / "runs" / "big").exists()
    (folder / "tokenizer.json").write_text(json.dumps({"model": 3}))
    assert main(["import", str(folder), "--name", "big", "--out", str(tmp_path / "runs")]) == 2
    assert "is not a tokenizers JSON file" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "big").exists()
