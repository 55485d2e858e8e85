"""Data mixtures (``data.sources``): the config, the sampler, the per-source metrics, the refusals."""

import csv
import json
import math
import shutil

import numpy as np
import pytest

from gpt_models import (
    PRESETS,
    DataConfig,
    DataSource,
    apply_overrides,
    load_config,
    load_dataset,
    main,
    prepare,
    train_batch,
)

WEIGHTS = (0.8, 0.2)


@pytest.fixture
def two_texts(tmp_path):
    """Two text files whose bytes do not overlap: lower-case prose and digits."""
    (tmp_path / "prose.txt").write_text("the quick brown fox jumps over the lazy dog. " * 300)
    (tmp_path / "digits.txt").write_text("0123456789 " * 600)
    return tmp_path / "prose.txt", tmp_path / "digits.txt"


def _sources_flag(*pairs) -> str:
    tables = ", ".join(f'{{path = "{p}", weight = {w}}}' for p, w in pairs)
    return f"data.sources=[{tables}]"


def _mixture(two_texts, weights=WEIGHTS, **data) -> DataConfig:
    sources = tuple(DataSource(str(p), w) for p, w in zip(two_texts, weights, strict=True))
    return DataConfig(sources=sources, **data)


def _refused(capsys, argv, *needles):
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("gpt: error: "), err
    for needle in needles:
        assert needle in err, err
    return err


# --- the config: [[data.sources]] tables, --set data.sources=[...], config.toml ----------------------


def test_toml_tables_and_the_inline_set_give_one_config_that_round_trips(tmp_path, two_texts):
    prose, digits = two_texts
    (tmp_path / "mix.toml").write_text(
        f'[[data.sources]]\npath = "{prose}"\nweight = 0.8\n\n'
        f'[[data.sources]]\npath = "{digits}"\nweight = 0.2\nname = "num"\n'
    )
    from_file = load_config(str(tmp_path / "mix.toml"))
    flag = _sources_flag((prose, 0.8), (digits, 0.2)).replace("0.2}", '0.2, name = "num"}')
    from_set = apply_overrides(PRESETS["tiny"], {"data.sources": flag.partition("=")[2]},
                               from_text=True)  # fmt: skip
    assert from_file == from_set
    assert [s.label for s in from_file.data.sources] == ["prose", "num"]
    assert hash(from_file) == hash(from_set)  # configs stay hashable: a static argument of jit


def test_config_show_writes_the_sources_back_as_tables(tmp_path, two_texts, capsys):
    (tmp_path / "mix.toml").write_text(
        "".join(
            f'[[data.sources]]\npath = "{p}"\nweight = {w}\n' for p, w in zip(two_texts, WEIGHTS)
        )
    )
    assert main(["config", "show", "--config", str(tmp_path / "mix.toml")]) == 0
    shown = capsys.readouterr().out
    assert shown.splitlines().count("[[data.sources]]") == 2
    (tmp_path / "shown.toml").write_text(shown)
    assert load_config(str(tmp_path / "shown.toml")) == load_config(str(tmp_path / "mix.toml"))


# --- the sampler: shares, determinism, processes, one source = data.path ---------------------------


def test_rows_follow_the_weights_and_each_row_reads_its_own_source(two_texts):
    ds = load_dataset(_mixture(two_texts), seq_len=16, vocab_size=256)
    digit_bytes = set(b"0123456789 ")
    counts = np.zeros(2)
    for step in range(1000):
        batch = train_batch(ds.train, step, seed=3, batch_size=32, grad_accum=1, seq_len=16)[0]
        is_digits = np.array([set(row.tolist()) <= digit_bytes for row in batch])
        counts += [(~is_digits).sum(), is_digits.sum()]
    shares = counts / counts.sum()
    # 32,000 rows drawn at 0.8/0.2: one standard deviation of the share is 0.0022.
    assert abs(shares[0] - 0.8) < 0.01 and abs(shares[1] - 0.2) < 0.01, shares


def test_batches_depend_only_on_seed_and_step_and_split_over_processes(two_texts):
    ds = load_dataset(_mixture(two_texts), seq_len=16, vocab_size=256)
    kw = {"seed": 0, "batch_size": 8, "grad_accum": 2, "seq_len": 16}
    later = train_batch(ds.train, 9, **kw)
    for step in (3, 0, 9):  # out of order, as a resumed run asks
        train_batch(ds.train, step, **kw)
    np.testing.assert_array_equal(train_batch(ds.train, 9, **kw), later)
    assert not np.array_equal(train_batch(ds.train, 8, **kw), later)
    assert not np.array_equal(train_batch(ds.train, 9, **{**kw, "seed": 1}), later)
    halves = [train_batch(ds.train, 9, **kw, process_index=p, process_count=2) for p in (0, 1)]
    np.testing.assert_array_equal(np.concatenate(halves, axis=1), later)


def test_a_mixture_of_one_source_draws_the_windows_of_data_path(two_texts):
    prose = str(two_texts[0])
    one = load_dataset(DataConfig(sources=(DataSource(prose, 3.0),)), seq_len=16, vocab_size=256)
    plain = load_dataset(DataConfig(path=prose), seq_len=16, vocab_size=256)
    for step in range(20):
        kw = {"seed": 5, "batch_size": 8, "grad_accum": 2, "seq_len": 16}
        np.testing.assert_array_equal(train_batch(one.train, step, **kw),
                                      train_batch(plain.train, step, **kw))  # fmt: skip


def test_each_source_keeps_its_own_split_and_bytes_per_token(two_texts):
    ds = load_dataset(_mixture(two_texts, val_fraction=0.2), seq_len=16, vocab_size=256)
    prose, digits = (load_dataset(DataConfig(path=str(p), val_fraction=0.2), seq_len=16,
                                  vocab_size=256) for p in two_texts)  # fmt: skip
    assert [len(p.val) for p in ds.parts] == [len(prose.val), len(digits.val)]
    assert len(ds.train) == len(prose.train) + len(digits.train)
    assert ds.bytes_per_token == 1.0 and "mixture of prose (0.8" in ds.source
    np.testing.assert_array_equal(ds.val[:], np.concatenate([prose.val, digits.val]))
    np.testing.assert_array_equal(ds.val[len(prose.val) - 2 : len(prose.val) + 2],
                                  np.concatenate([prose.val[-2:], digits.val[:2]]))  # fmt: skip
    with pytest.raises(TypeError, match=r"A mixture's split takes only a slice such as \[a:b\]"):
        ds.train[np.arange(3)]


# --- a run: config.toml, metrics.csv, gpt eval, resume ---------------------------------------------


def _csv(run) -> list[dict[str, str]]:
    with open(run / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_mixture_run_records_its_sources_and_logs_each_ones_tokens_and_losses(
    tmp_path, two_texts, gpt_train, capsys
):
    assert gpt_train("--set", _sources_flag(*zip(two_texts, WEIGHTS))) == 0
    run = tmp_path / "run"
    text = (run / "config.toml").read_text()
    assert text.splitlines().count("[[data.sources]]") == 2 and 'kind = "mixture"' in text
    cfg = load_config(str(run / "config.toml"))
    assert [(s.path, s.kind, s.name) for s in cfg.data.sources] == [
        (str(two_texts[0]), "text", "prose"), (str(two_texts[1]), "text", "digits"),
    ]  # fmt: skip
    rows = _csv(run)
    tokens = np.array([[int(r["tokens/prose"]), int(r["tokens/digits"])] for r in rows])
    np.testing.assert_array_equal(tokens.sum(1), 8 * 32 * np.arange(1, 7))  # cumulative, 8 x 32
    drawn = np.diff(np.vstack([[0, 0], tokens]), axis=0) // 32  # rows of each source per step
    for r, (n_prose, n_digits) in zip(rows, drawn, strict=True):
        # The step's loss is the mean over its rows: the per-source losses weighted by rows.
        parts = [(n_prose, r["loss/prose"]), (n_digits, r["loss/digits"])]
        assert all((n > 0) == (v != "") for n, v in parts), r
        mean = sum(n * float(v) for n, v in parts if n) / 8
        assert math.isclose(mean, float(r["loss"]), rel_tol=1e-5), r
    evals = [r for r in rows if r["val_loss"]]
    assert len(evals) == 2
    for r in evals:
        weighted = 0.8 * float(r["val_loss/prose"]) + 0.2 * float(r["val_loss/digits"])
        assert math.isclose(weighted, float(r["val_loss"]), rel_tol=1e-5), r
    capsys.readouterr()
    assert main(["eval", "--run", str(run)]) == 0
    out = capsys.readouterr().out
    assert "the weighted mean of its sources on the validation split of mixture of prose" in out
    shown = float(out.split("val_loss/digits ")[1].split()[0])
    assert math.isclose(shown, float(evals[-1]["val_loss/digits"]), rel_tol=1e-5), out
    assert main(["eval", "--run", str(run), "--text", "@val"]) == 0
    out = capsys.readouterr().out  # each source's validation split, as one document each
    assert f"the validation split of {two_texts[0]}, the validation split of {two_texts[1]}" in out


def test_a_resumed_mixture_run_continues_its_batches_counts_and_losses(
    tmp_path, two_texts, gpt_train, small_args
):
    sources = ("--set", _sources_flag(*zip(two_texts, WEIGHTS)))
    assert gpt_train(*sources) == 0  # saves steps 3 and 6
    whole, cut = tmp_path / "run", tmp_path / "cut"
    shutil.copytree(whole, cut)
    # What a run killed after its step-3 checkpoint leaves, without the metrics it logged: the
    # resumed steps' batches, token counts and losses come from the step alone.
    for gone in ("checkpoints/6", "metrics", "metrics.csv"):
        shutil.rmtree(cut / gone) if (cut / gone).is_dir() else (cut / gone).unlink()
    # The command that started it: --auto-resume finds the same resolved sources and continues.
    again = ["train", "--out", str(tmp_path), "--name", "cut", "--auto-resume", *small_args]
    assert main([*again, *sources]) == 0
    keys = ["step", "loss", "loss/prose", "loss/digits", "tokens/prose", "tokens/digits"]
    resumed = [[r[k] for k in keys] for r in _csv(cut)]
    assert resumed == [[r[k] for k in keys] for r in _csv(whole)][3:]


def test_a_resume_with_new_weights_keeps_the_counts_and_says_so(
    tmp_path, two_texts, gpt_train, capsys
):
    # The counts were drawn again under the new weights: source A fell from 184,384 to 30,336.
    assert gpt_train("--set", _sources_flag(*zip(two_texts, WEIGHTS))) == 0  # steps 3 and 6
    run = tmp_path / "run"
    before = {int(r["step"]): r for r in _csv(run)}
    shutil.rmtree(run / "checkpoints" / "6")
    capsys.readouterr()
    resume = ["train", "--resume", str(run), "--set", _sources_flag(*zip(two_texts, (0.2, 0.8)))]
    assert main(resume) == 0
    assert (
        "note: the data mixture changed since checkpoint step 3 (weights {'prose': 0.8, "
        "'digits': 0.2} then, {'prose': 0.2, 'digits': 0.8} now): tokens/<source> go on from "
        "the counts so far, the steps from here on drawn with the new weights."
    ) in capsys.readouterr().err
    after = {int(r["step"]): r for r in _csv(run)}
    for name in ("prose", "digits"):  # cumulative: never below the count at the checkpoint
        at_checkpoint = int(float(before[2][f"tokens/{name}"]))
        assert int(float(after[3][f"tokens/{name}"])) >= at_checkpoint
    grown = sum(int(float(after[3][f"tokens/{n}"])) for n in ("prose", "digits"))
    assert grown == sum(int(float(before[2][f"tokens/{n}"])) for n in ("prose", "digits")) + 8 * 32


# --- refusals: one line each, exit 2 ---------------------------------------------------------------


@pytest.mark.parametrize("weight", ["0", "-0.5", "nan"])
def test_a_weight_that_is_not_a_positive_number_is_refused(tmp_path, two_texts, capsys, weight):
    flag = _sources_flag((two_texts[0], 0.8), (two_texts[1], weight))
    err = _refused(capsys, ["train", "--out", str(tmp_path / "runs"), "--set", flag],
                   f"data.sources[1] ('{two_texts[1]}') has weight = {float(weight)}; a weight must "
                   "be a finite number > 0")  # fmt: skip
    assert ("Leave a source out instead of giving it weight 0." in err) == (weight == "0")
    assert not (tmp_path / "runs").exists()


def test_a_missing_source_is_refused_naming_it(tmp_path, two_texts, capsys):
    flag = _sources_flag((two_texts[0], 0.8), (tmp_path / "code", 0.2))
    _refused(capsys, ["train", "--out", str(tmp_path / "runs"), "--set", flag],
             f"data.sources[1] ('code') has path {tmp_path / 'code'}, which does not exist.",
             "fix the path, or leave the source out of data.sources.")  # fmt: skip


def test_data_path_and_data_sources_together_are_refused(tmp_path, two_texts, capsys):
    flag = _sources_flag(*zip(two_texts, WEIGHTS))
    _refused(capsys, ["train", "--set", f"data.path={two_texts[0]}", "--set", flag],
             f"data.path = '{two_texts[0]}' and data.sources are both set; a run reads one or "
             "the other. Fix: drop data.path (--set data.path=)")  # fmt: skip


def test_sources_made_by_different_tokenizers_are_refused_naming_both(tmp_path, capsys):
    docs = [
        json.dumps({"text": f"document {i}: " + "some words to learn " * 20}) for i in range(80)
    ]
    (tmp_path / "docs.jsonl").write_text("\n".join(docs) + "\n")
    prepare([tmp_path / "docs.jsonl"], tmp_path / "web", val_fraction=0.2)
    prepare([tmp_path / "docs.jsonl"], tmp_path / "code", val_fraction=0.2, tokenizer="bpe",
            bpe_vocab_size=300)  # fmt: skip
    flag = _sources_flag((tmp_path / "web", 0.5), (tmp_path / "code", 0.5))
    _refused(capsys, ["train", "--out", str(tmp_path / "runs"), "--set", flag],
             f"The sources 'web' ({tmp_path / 'web'}) and 'code' ({tmp_path / 'code'}) of "
             "data.sources were made by different tokenizers: 'web' by the byte tokenizer (256 ids",
             "'code' by the bpe tokenizer (", "Prepare 'code' again with the tokenizer of 'web' "
             "(gpt prepare ... --tokenizer byte)")  # fmt: skip
    assert not (tmp_path / "runs").exists()


def test_malformed_sources_are_refused_with_an_example(capsys):
    _refused(capsys, ["config", "show", "--set", 'data.sources=[{path="a", weight=1}'],
             "Config key data.sources got '[{path=\"a\", weight=1}', which is not an inline TOML "
             "array", "Expected e.g. --set 'data.sources=[{path=\"stores/web\", weight=0.8}")  # fmt: skip
    _refused(capsys, ["config", "show", "--set", 'data.sources=[{path="a", wieght=1}]'],
             "data.sources[0] has an unknown key 'wieght'. Did you mean 'weight'?")  # fmt: skip
    _refused(capsys, ["config", "show", "--set", 'data.sources=[{path="a"}]'],
             "data.sources[0] has no weight; each source needs path and weight")  # fmt: skip


def test_two_sources_with_one_name_are_refused(tmp_path, capsys):
    flag = _sources_flag((tmp_path / "a" / "web", 1), (tmp_path / "b" / "web.txt", 1))
    _refused(capsys, ["config", "show", "--set", flag],
             "are both named 'web', and each source's metrics need their own name. Give one a "
             "name, e.g. name = \"web_1\" in its table.")  # fmt: skip


def test_an_empty_source_name_is_refused(tmp_path, two_texts, capsys):
    prose, digits = two_texts
    (tmp_path / "mix.toml").write_text(
        f'[[data.sources]]\npath = "{prose}"\nweight = 0.8\nname = ""\n\n'
        f'[[data.sources]]\npath = "{digits}"\nweight = 0.2\n'
    )
    message = (f"data.sources[0] ('{prose}') has name = '', which is empty; a name labels the "
               "source's metrics. Give one (e.g. name = \"prose\") or leave the name key out to "
               "name the source after its path ('prose').")  # fmt: skip
    err = _refused(capsys, ["train", "--out", str(tmp_path / "runs"), "--config",
                            str(tmp_path / "mix.toml")], message)  # fmt: skip
    assert len(err.strip().splitlines()) == 1
    flag = _sources_flag((prose, 0.8), (digits, 0.2)).replace("0.8}", '0.8, name = " "}')
    _refused(capsys, ["train", "--out", str(tmp_path / "runs"), "--set", flag], "has name = ' '")
    assert not (tmp_path / "runs").exists()


def test_a_run_folder_written_with_empty_source_names_still_loads(tmp_path, two_texts, capsys):
    # config.toml leaves an unnamed source's name out; older runs wrote `name = ""` for it.
    (tmp_path / "mix.toml").write_text(
        "".join(
            f'[[data.sources]]\npath = "{p}"\nweight = {w}\n' for p, w in zip(two_texts, WEIGHTS)
        )
    )
    assert main(["config", "show", "--config", str(tmp_path / "mix.toml")]) == 0
    shown = capsys.readouterr().out
    assert "name = " not in shown.partition("[[data.sources]]")[2]
    run = tmp_path / "run"
    run.mkdir()
    old = shown.replace("weight = 0.2\n", 'weight = 0.2\nname = ""\n')
    (run / "config.toml").write_text(old)
    assert load_config(str(run / "config.toml"), run_folder=True) == load_config(
        str(tmp_path / "mix.toml")
    )
