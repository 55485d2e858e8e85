"""``evaluate_task`` and ``gpt eval --task``: multiple-choice and cloze accuracy from JSONL files."""

import csv
import dataclasses
import io
import json
import re
from pathlib import Path

import jax
import numpy as np
import pytest

from gpt_models import (
    PRESETS,
    DataError,
    evaluate_task,
    forward,
    import_hf,
    load_run,
    main,
    train,
)

DATA = Path(__file__).parent / "data"
MC, CLOZE = DATA / "synthetic_mc.jsonl", DATA / "synthetic_cloze.jsonl"
STEPS = 60


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 1-layer model trained 60 steps on the default corpus (~10 s): it has learnt which letters
    follow which, which is what the synthetic multiple-choice task asks."""
    tiny = PRESETS["tiny"]
    cfg = dataclasses.replace(
        tiny,
        model=dataclasses.replace(tiny.model, seq_len=32, d_model=32, n_layers=1, n_heads=2),
        train=dataclasses.replace(
            tiny.train, steps=STEPS, batch_size=16, warmup_steps=1, eval_every=STEPS // 2,
            eval_batches=1, checkpoint_every=0,
        ),
        eval=dataclasses.replace(tiny.eval, tasks=f"{MC}, {CLOZE}"),
        mesh=dataclasses.replace(tiny.mesh, data=-1),
    )  # fmt: skip
    run = tmp_path_factory.mktemp("tasks") / "run"
    train(cfg, run, stream=io.StringIO(), write_sample=False)
    return run, *load_run(run)[:2]


_forward = jax.jit(forward, static_argnums=2)


def _hand_loglik(params, model, context, choice):
    """log p(choice | context): one forward of the (left-truncated) window, log-softmax in numpy."""
    ids = np.frombuffer((context + choice).encode(), np.uint8).astype(np.int32)
    ids = ids[-(model.seq_len + 1) :]
    logits = np.asarray(_forward(params, ids[None, :-1], model)[0], np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    n = len(choice.encode())
    return float(logp[np.arange(len(ids) - 1), ids[1:]][-n:].sum())


def test_trained_model_beats_chance_and_matches_a_hand_scorer(trained):
    _, cfg, params = trained
    score = evaluate_task(params, cfg, MC, batch_size=32)
    assert (score.task, score.format, score.examples, score.chance) == (
        "synthetic_mc",
        "mc",
        40,
        0.25,
    )
    assert score.acc >= 0.45 and score.acc_norm >= 0.45  # chance is 0.25; 60 steps give ~0.6
    assert score.truncated == 40  # 24 + 12 characters > 33: every context lost its first bytes
    rows = [json.loads(line) for line in MC.read_text().splitlines()[:5]]
    for row, ll in zip(rows, score.loglik, strict=False):
        hand = [_hand_loglik(params, cfg.model, row["context"], c) for c in row["choices"]]
        np.testing.assert_allclose(ll, hand, atol=1e-5, rtol=0)


def test_choice_logliks_of_an_imported_gpt2_equal_transformers(tmp_path):
    """The HF interop golden file holds transformers' logits on two token rows: the log-likelihood
    of each row's tail after each cut, from those logits, is what evaluate_task gives the import."""
    gold = np.load(DATA / "hf_gpt2.npz")
    cfg, params = import_hf(DATA / "hf_gpt2")  # byte tokenizer: ids < 100 are ASCII bytes
    tokens, logits = gold["tokens"], gold["logits"].astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    rows, want = [], []
    for r, cut in [(r, cut) for r in range(len(tokens)) for cut in (4, 8, 12)]:
        text = [bytes(ids.astype(np.uint8)).decode() for ids in (tokens[r, :cut], tokens[r, cut:])]
        rows.append({"context": text[0], "choices": [text[1], text[1][::-1]], "label": 0})
        want.append(logp[r, np.arange(cut - 1, tokens.shape[1] - 1), tokens[r, cut:]].sum())
    task = tmp_path / "gold.jsonl"
    task.write_text("".join(json.dumps(row) + "\n" for row in rows))
    score = evaluate_task(params, cfg, task)
    np.testing.assert_allclose([ll[0] for ll in score.loglik], want, atol=1e-5, rtol=0)


def test_cloze_and_hellaswag_fields(trained, tmp_path):
    _, cfg, params = trained
    cloze = evaluate_task(params, cfg, CLOZE)
    assert (cloze.format, cloze.examples, cloze.chance, cloze.truncated) == ("cloze", 20, 0.0, 20)
    assert 0 <= cloze.acc == cloze.acc_norm <= 1
    # HellaSwag's own fields: ctx_a + " " + ctx_b, endings after a space, the label as a string.
    hs = tmp_path / "hs.jsonl"
    row = {
        "ctx_a": "A man is",
        "ctx_b": "sitting on a",
        "endings": ["roof.", "xq zv."],
        "label": "0",
    }
    hs.write_text(json.dumps(row) + "\n")
    mc = tmp_path / "mc.jsonl"
    mc.write_text(
        json.dumps(
            {"context": "A man is sitting on a", "choices": [" roof.", " xq zv."], "label": 0}
        )
    )
    assert evaluate_task(params, cfg, hs).loglik == evaluate_task(params, cfg, mc).loglik


def test_cli_prints_a_table_and_saves_json_in_the_run(trained, capsys):
    run = trained[0]
    assert main(["eval", str(run), "--task", str(MC), str(CLOZE), "--batch-size", "16"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[0].split() == [
        "task", "format", "examples", "acc", "acc_norm", "chance", "truncated", "examples_per_s",
    ]  # fmt: skip
    assert out.out.splitlines()[1].split()[:3] == ["synthetic_mc", "mc", "40"]
    assert "eval synthetic_mc: 160/160 windows" in out.err
    assert "\r" not in out.err  # not a terminal: separate lines, a few of them
    assert 2 <= sum(line.startswith("eval synthetic_mc:") for line in out.err.splitlines()) <= 20
    mc, cloze = sorted((run / "evals").iterdir(), key=lambda p: p.name, reverse=True)
    assert re.fullmatch(rf"synthetic_mc-[0-9a-f]{{8}}-{STEPS}\.json", mc.name)
    assert re.fullmatch(rf"synthetic_cloze-[0-9a-f]{{8}}-{STEPS}\.json", cloze.name)
    saved = json.loads(mc.read_text())
    assert saved["step"] == STEPS and saved["examples"] == 40 and len(saved["loglik"]) == 40
    assert saved["path"] == str(MC.resolve()) and f"saved {mc} ({MC})" in out.out


BAD = [
    ('{"context": "a", "choices": ["b"], "label": 0}\n{"context": "a", choices}\n', r"bad.jsonl:2: not valid JSON \(Expecting property name enclosed in double quotes at column 18\)"),
    ('{"context": "a b", "choices": [], "label": 0}\n', r"bad.jsonl:1: the choice list is empty"),
    ('{"context": "a b", "choices": ["c", "d"], "label": 2}\n', r"bad.jsonl:1: label = 2 is out of range for 2 choices; labels are 0-based indices into the choices \(0..1\)"),
    ('{"context": "a b", "choices": ["c"], "label": null}\n', r"bad.jsonl:1: label = None; a mc example needs an integer label"),
    ('{"context": "a", "choices": ["' + "x" * 40 + '"], "label": 0}\n', r"bad.jsonl:1: choice 0 is 40 tokens, longer than the model's context window \(model.seq_len = 32\)"),
    ('{"question": "a"}\n', r"bad.jsonl:1: cannot tell the task format from the fields \['question'\]"),
    ('{"context": 3, "target": "x"}\n', r"bad.jsonl:1: field 'context' is int 3; a cloze example needs it as a str"),
    ('{"context": "", "target": "x"}\n', r"bad.jsonl:1: the context is empty"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), BAD)
def test_bad_task_files(trained, tmp_path, text, message):
    _, cfg, params = trained
    (tmp_path / "bad.jsonl").write_text(text)
    with pytest.raises(DataError, match=message):
        evaluate_task(params, cfg, tmp_path / "bad.jsonl")


def test_bad_task_file_at_the_cli_exits_2_without_a_traceback(trained, tmp_path, capsys,
                                                              error_line):  # fmt: skip
    (tmp_path / "bad.jsonl").write_text('{"context": "a b", "choices": ["c", "d"], "label": 5}\n')
    assert main(["eval", str(trained[0]), "--task", str(tmp_path / "bad.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:1: label = 5 is out of range" in error_line(err)
    assert "Traceback" not in err
    assert main(["eval", str(trained[0]), "--task", str(tmp_path / "none.jsonl")]) == 2
    assert "none.jsonl does not exist" in capsys.readouterr().err


def test_train_eval_tasks_are_logged_at_each_evaluation(trained):
    run, _, params = trained
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    logged = [r for r in rows if r["eval/synthetic_mc/acc"]]
    assert [int(r["step"]) for r in logged] == [STEPS // 2 - 1, STEPS - 1]  # with val_loss
    assert all(r["val_loss"] for r in logged) and all(r["eval/synthetic_cloze/acc"] for r in logged)
    final = evaluate_task(params, trained[1], MC)
    assert float(logged[-1]["eval/synthetic_mc/acc"]) == pytest.approx(final.acc)
    assert float(logged[-1]["eval/synthetic_mc/acc_norm"]) == pytest.approx(final.acc_norm)


def test_a_bad_train_eval_tasks_file_fails_before_the_run_folder(trained, tmp_path):
    cfg = trained[1]
    cfg = dataclasses.replace(
        cfg,
        eval=dataclasses.replace(cfg.eval, tasks=f"{MC},{tmp_path}/no.jsonl"),
        mesh=dataclasses.replace(cfg.mesh, data=-1),
    )
    with pytest.raises(DataError, match=r"eval.tasks: Task file .*no.jsonl does not exist"):
        train(cfg, tmp_path / "run", stream=io.StringIO())
    assert not (tmp_path / "run").exists()


def test_two_train_eval_tasks_with_one_name_are_refused(trained, tmp_path):
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / MC.name).write_text(MC.read_text())
    cfg = trained[1]
    cfg = dataclasses.replace(
        cfg,
        eval=dataclasses.replace(cfg.eval, tasks=f"{MC},{tmp_path}/x/{MC.name}"),
        mesh=dataclasses.replace(cfg.mesh, data=-1),
    )
    with pytest.raises(DataError, match="names two files called 'synthetic_mc'; their metrics"):
        train(cfg, tmp_path / "run", stream=io.StringIO())
    assert not (tmp_path / "run").exists()
