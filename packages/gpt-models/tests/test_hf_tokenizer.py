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
    ByteTokenizer,
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


def _store_bpe(tmp_path: Path) -> BPETokenizer:
    """The BPE tokenizer gpt prepare trains: 300 ids, the last (299) <|endoftext|>."""
    (tmp_path / "in").mkdir()
    for i in range(10):
        (tmp_path / "in" / f"{i}.txt").write_text(default_corpus()[i * 3000 : (i + 1) * 3000])
    prepare(
        [tmp_path / "in"], tmp_path / "st", tokenizer="bpe", bpe_vocab_size=300, val_fraction=0.1
    )
    return BPETokenizer.load(tmp_path / "st" / "tokenizer.json")


# Each tokenizer the project trains or reads -> (bos, eos) ids and the token names
# tokenizer_config.json gives them (None: not named).
SPECIALS = {
    "byte": (lambda t: ByteTokenizer(), 0, 0, None, None),
    "bpe of gpt prepare": (_store_bpe, 299, 299, "<|endoftext|>", "<|endoftext|>"),
    "bpe of gpt train": (lambda t: BPETokenizer.train([default_corpus()[:30_000]], vocab_size=300),
                         299, 299, "<|endoftext|>", "<|endoftext|>"),
    "Llama-like tokenizer.json": (
        lambda t: _tokenizer_json(t / "l.json", 290, specials=("<s>", "</s>")), 0, 1, "<s>", "</s>"),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(SPECIALS))
def test_export_names_each_tokenizers_end_of_text(kind, tmp_path):
    make, bos, eos, bos_name, eos_name = SPECIALS[kind]
    tokenizer = make(tmp_path)
    cfg = dataclasses.replace(PRESETS["gpt2-small"].model, vocab_size=320, vocab_real=301,
                              seq_len=32, d_model=32, n_layers=1, n_heads=2)  # fmt: skip
    out = export_hf(cfg, init_params(cfg, jax.random.key(0)), tmp_path / "hf", tokenizer=tokenizer)
    read = {n: json.loads((out / n).read_text()) for n in ("config.json", "generation_config.json",
                                                           "tokenizer_config.json")}  # fmt: skip
    ids = {"bos_token_id": bos, "eos_token_id": eos, "pad_token_id": eos}
    assert {k: read["config.json"][k] for k in ids} == ids  # written even when null
    assert read["generation_config.json"] == ids
    names = {"bos_token": bos_name, "eos_token": eos_name, "pad_token": eos_name}
    assert read["tokenizer_config.json"] == {
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 32,
        "clean_up_tokenization_spaces": False, **{k: v for k, v in names.items() if v},
    }  # fmt: skip
    text = tokenizer.read_text() if isinstance(tokenizer, Path) else tokenizer.to_json()
    assert (out / "tokenizer.json").read_text() == text


@pytest.mark.parametrize("kind", ["byte", "bpe", "tokenizer.json"])
def test_export_then_import_gives_the_run_back_for_every_tokenizer(kind, tmp_path, capsys):
    """A GPT-2-shaped run trained with each tokenizer: its export imports as the same model, with
    the same tokenizer (a 300-id BPE was refused: "tokenizer.json has 301 ids, vocab 300")."""
    tokenizer = {"byte": "byte", "bpe": "bpe",
                 "tokenizer.json": str(_tokenizer_json(tmp_path / "t.json", 300))}[kind]  # fmt: skip
    args = ["train", "--out", str(tmp_path), "--name", "run", "--set", "train.steps=2",
            "--set", f"data.tokenizer={tokenizer}", "--set", "data.bpe_vocab_size=300",
            "--set", "model.norm=layernorm", "--set", "model.pos=learned", "--set",
            "model.mlp=gelu", "--set", "model.bias=true", "--set", "model.qk_norm=false",
            "--set", "model.seq_len=32", "--set", "model.d_model=32", "--set", "model.n_layers=1",
            "--set", "model.n_heads=2", "--set", "train.batch_size=8", "--set",
            "train.eval_batches=1", "--set", "sample.max_new_tokens=4"]  # fmt: skip
    assert main(args) == 0
    assert main(["export", str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    assert main(["import", str(tmp_path / "hf"), "--name", "back", "--out", str(tmp_path)]) == 0
    cfg, params, _ = load_run(tmp_path / "run")
    back_cfg, back, step = load_run(tmp_path / "back")
    assert step == 0 and (back_cfg.model.vocab_size, back_cfg.model.vocab_real) == (
        cfg.model.vocab_size, cfg.model.vocab_real)  # fmt: skip
    real = cfg.model.real_vocab  # the padded rows (never used) are not exported: zeros back
    assert all(np.array_equal(back[k].value[:real], params[k].value[:real]) for k in params)
    if kind == "byte":
        assert (
            back_cfg.data.tokenizer == "byte"
            and not (tmp_path / "back" / "tokenizer.json").exists()
        )
    else:
        original = BPETokenizer.load(tmp_path / "run" / "tokenizer.json").to_json()
        assert BPETokenizer.load(tmp_path / "back" / "tokenizer.json").to_json() == original
        assert back_cfg.data.tokenizer == str((tmp_path / "back" / "tokenizer.json").absolute())
