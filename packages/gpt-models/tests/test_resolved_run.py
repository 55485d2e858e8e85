"""One resolved run: config.toml records absolute paths and what the data is, every command reads
it from any working directory, and ``--text @val`` is the run's validation split whatever the data."""

import json
import shutil

import pandas as pd
import pytest

from gpt_models import DataConfig, load_config, load_dataset, main, prepare

# The fine-tune's flags: train/sample keys only (the architecture is the source's).
FINETUNE = [
    "--set", "train.steps=4", "--set", "train.batch_size=8", "--set", "train.eval_every=2",
    "--set", "train.eval_batches=1", "--set", "sample.max_new_tokens=4", "--set", "mesh.data=-1",
]  # fmt: skip


@pytest.fixture
def store(tmp_path):
    """A byte-level token store of 60 JSONL documents, about 30% of them held out."""
    lines = [
        json.dumps({"text": f"Document {i}: " + "the quick brown fox " * 12}) for i in range(60)
    ]
    (tmp_path / "docs.jsonl").write_text("\n".join(lines) + "\n")
    prepare([tmp_path / "docs.jsonl"], tmp_path / "store", val_fraction=0.3)
    return tmp_path / "store"


def test_config_records_absolute_paths_and_commands_work_from_elsewhere(tmp_path, monkeypatch, capsys, small_args):  # fmt: skip
    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "work" / "data.txt").write_text("Some text to learn from. " * 400)
    monkeypatch.chdir(tmp_path / "work")
    train = ["train", "--out", "runs", "--name", "x", *small_args, "--set", "data.path=data.txt"]
    assert main(train) == 0
    cfg = load_config(str(tmp_path / "work" / "runs" / "x" / "config.toml"))
    assert (cfg.data.path, cfg.data.kind) == (str(tmp_path / "work" / "data.txt"), "text")
    capsys.readouterr()

    monkeypatch.chdir(tmp_path / "elsewhere")
    run = "../work/runs/x"
    assert main(["eval", "--run", run]) == 0
    assert (
        f"on the validation split of {tmp_path / 'work' / 'data.txt'} (" in capsys.readouterr().out
    )
    assert main(["eval", "--run", run, "--text", "@val"]) == 0
    assert main(["sample", "--run", run, "--max-new-tokens", "3"]) == 0
    assert main(["train", "--resume", run, "--set", "train.steps=8"]) == 0
    assert "step 8" in capsys.readouterr().out


def test_at_val_of_a_store_run_scores_its_validation_shards(tmp_path, store, capsys, small_args):
    train = [
        "train",
        "--out",
        str(tmp_path),
        "--name",
        "s",
        *small_args,
        "--set",
        f"data.path={store}",
    ]
    assert main(train) == 0
    run = str(tmp_path / "s")
    assert load_config(f"{run}/config.toml").data.kind == "store"
    capsys.readouterr()
    assert main(["eval", "--run", run, "--text", "@val", "--stride", "32"]) == 0
    out = capsys.readouterr().out
    val = load_dataset(DataConfig(path=str(store)), seq_len=32, vocab_size=256).val
    # Every id of the validation shards but the first is scored (never the manifest's text).
    assert f"text: the validation split of {store}: {len(val) - 1:,} tokens" in out
    # A store named as text is refused: its files are token ids and a manifest, not text.
    assert main(["eval", "--run", run, "--text", str(store)]) == 2
    assert f"evaluate_text: {store} is a token store made by gpt prepare (token ids, not text)" in (
        capsys.readouterr().err
    )


def test_a_resumed_run_whose_data_changed_kind_is_refused(tmp_path, store, capsys, small_args):
    data = tmp_path / "data"
    data.write_text("Some text to learn from. " * 400)
    train = [
        "train",
        "--out",
        str(tmp_path),
        "--name",
        "r",
        *small_args,
        "--set",
        f"data.path={data}",
    ]
    assert main(train) == 0
    data.unlink()
    store.rename(data)  # the path now holds a token store
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "r"), "--set", "train.steps=8"]) == 2
    assert capsys.readouterr().err == (
        f"gpt: error: data.path = {data} holds a token store made by gpt prepare, but this run "
        "was made with text (a file or a folder of files) there (data.kind = 'text' in its "
        "config.toml): the files were replaced since. Put the run's data back at that path, or "
        "train a new run on this data (gpt train --set data.path=...).\n"
    )


def test_a_resumed_run_whose_store_was_replaced_is_refused_naming_it(
    tmp_path, store, capsys, small_args
):
    # Only the data's kind was checked: a store made by the same tokenizer from other text
    # passed, and --resume trained on it without a word.
    train = ["train", "--out", str(tmp_path), "--name", "r", *small_args]
    assert main([*train, "--set", f"data.path={store}"]) == 0
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({"text": f"Other {i}: lorem ipsum " * 9}) + "\n"
                             for i in range(60)))  # fmt: skip
    shutil.rmtree(store)
    prepare([other], store, val_fraction=0.3)
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "r"), "--set", "train.steps=8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after the pre-flight's line
    assert err.startswith(
        f"gpt: error: --resume {tmp_path / 'r'}: the token store data.path = {store} is not the "
        "one this run trained on: its manifest changed since checkpoint step 6 (sha256 "
    )
    assert err.rstrip().endswith(
        "Put the run's store back at that path, or train on the new one as a new run from this "
        f"one's weights: gpt train --init-from {tmp_path / 'r'} --name NEW."
    )
    kept = sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir() if p.name.isdigit())
    assert kept == ["3", "6"]  # the run is as it was


def test_init_from_uses_the_finetune_schedule_says_it_and_logs_a_baseline(tmp_path, capsys, small_args):  # fmt: skip
    assert main(["train", "--out", str(tmp_path), "--name", "src", *small_args]) == 0
    capsys.readouterr()
    ft = ["train", "--init-from", str(tmp_path / "src"), "--out", str(tmp_path), "--name", "ft"]
    assert main([*ft, *FINETUNE]) == 0
    err = capsys.readouterr().err
    # No --config: the finetune preset's schedule (lr 3e-4), said before the first step.
    assert "Schedule: lr 0.0003 after 0 warmup steps, cosine to 3e-05 at step 4" in err
    assert "Baseline before the first step: val loss " in err
    assert load_config(str(tmp_path / "ft" / "config.toml")).train.lr == 3e-4
    metrics = pd.read_csv(tmp_path / "ft" / "metrics.csv")
    baseline = metrics[metrics.step == -1]
    assert len(baseline) == 1 and baseline.val_loss.notna().all()
    # The baseline is the source's own loss on the same validation windows (same data, weights).
    assert main(["eval", "--run", str(tmp_path / "src"), "--set", "train.eval_batches=1"]) == 0
    source_loss = float(capsys.readouterr().out.split()[1])
    assert baseline.val_loss.iloc[0] == pytest.approx(source_loss, rel=1e-5)


def test_init_from_a_run_with_a_trained_bpe_keeps_its_ids(tmp_path, capsys, small_args):
    # The trained tokenizer ends in <|endoftext|> and counts it, so the run's tokenizer.json, read
    # back as data.tokenizer, has the ids the source model has (it was one more: 301 for 300).
    bpe = ["--set", "data.tokenizer=bpe", "--set", "data.bpe_vocab_size=300"]
    assert main(["train", "--out", str(tmp_path), "--name", "src", *small_args, *bpe]) == 0
    ft = ["train", "--init-from", str(tmp_path / "src"), "--out", str(tmp_path), "--name", "ft"]
    assert main([*ft, *FINETUNE]) == 0, capsys.readouterr().err
    cfg = load_config(str(tmp_path / "ft" / "config.toml"))
    assert cfg.data.tokenizer == str(tmp_path / "src" / "tokenizer.json")
    assert (cfg.model.vocab_size, cfg.model.vocab_real) == (320, 300)
