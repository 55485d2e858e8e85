"""``gpt eval --lm-eval`` and the ``gpt-models`` model type of EleutherAI's lm-evaluation-harness.

Offline: every task is a YAML written here over a JSONL file written here (lm-eval's `json`
dataset builder reads it; nothing comes from the hub). The harness's numbers are checked against
``gpt eval --task`` / ``evaluate_text`` / ``generate`` on the same items. Tests that run the
harness skip when lm_eval is not installed (``nox -s lm_eval`` installs it); the bad-input tests
that stop before the harness run everywhere.
"""

import dataclasses
import http.server
import importlib.util
import io
import json
import math
import os
import re
import socket
import sys
import threading
from pathlib import Path

import jax
import numpy as np
import pytest

from gpt_models import (
    PRESETS,
    ByteTokenizer,
    UsageError,
    evaluate_lm_eval,
    evaluate_text,
    generate,
    load_run,
    main,
    register_lm_eval_model,
    train,
)

needs_lm_eval = pytest.mark.skipif(
    importlib.util.find_spec("lm_eval") is None,
    reason="lm_eval is not installed: pip install 'gpt-models[lm-eval]' (nox -s lm_eval does)",
)

ITEMS = [  # hellaswag's fields; the label is a string, as in HellaSwag's own files
    ("The cat sat on the", ["mat.", "sky of it.", "and the of in is.", "door"], "0"),
    ("She opened the door and", ["left.", "the of.", "is it", "went out to the garden."], "3"),
    ("It is the name of the", ["function.", "of of of.", "module that", "class"], "1"),
    ("The value of x is", ["returned.", "in the", "a string.", "for it."], "2"),
    ("This is a list of", ["items.", "the and.", "objects in the module.", "it"], "0"),
    ("If the file is not", ["found, an error is raised.", "it.", "the", "on"], "0"),
]
# The shape of lm-eval's own hellaswag task: choices are the endings, joined with " ".
HELLASWAG_YAML = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{ctx}}}}"
doc_to_choice: "{choices}"
doc_to_target: "{{{{label}}}}"
target_delimiter: "{delimiter}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
"""


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """No hub, and the datasets cache in a temporary folder (set before lm_eval imports datasets)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HOME", str(tmp_path_factory.mktemp("hf")))
        yield


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 1-layer model trained 100 steps (~20 s) on two sentences repeated: it has learnt them, so
    its greedy continuations are words, not the spaces an undertrained byte model repeats."""
    folder = tmp_path_factory.mktemp("lm_eval")
    corpus = folder / "corpus.txt"
    corpus.write_text(
        "The name of the function is the value of the list. The value of the item is the name "
        "of a module. " * 400
    )
    tiny = PRESETS["tiny"]
    cfg = dataclasses.replace(
        tiny,
        model=dataclasses.replace(tiny.model, seq_len=64, d_model=32, n_layers=1, n_heads=2),
        train=dataclasses.replace(
            tiny.train, steps=100, batch_size=16, lr=1e-2, warmup_steps=1, eval_every=100,
            eval_batches=1, checkpoint_every=0,
        ),
        data=dataclasses.replace(tiny.data, path=str(corpus)),
        mesh=dataclasses.replace(tiny.mesh, data=-1),
    )  # fmt: skip
    train(cfg, folder / "run", stream=io.StringIO(), write_sample=False)
    return folder / "run", *load_run(folder / "run")


@pytest.fixture(scope="module")
def hellaswag(tmp_path_factory):
    """A hellaswag JSONL and, over it, two task YAMLs: ``hs`` (lm-eval's hellaswag shape) and
    ``hs_spaced`` (each choice carries its leading space, joined with "")."""
    folder = tmp_path_factory.mktemp("tasks")
    data = folder / "hs.jsonl"
    rows = [{"ctx": c, "endings": e, "label": label} for c, e, label in ITEMS]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name, choices, delimiter in (
        ("hs", "{{endings}}", " "),
        ("hs_spaced", "{{endings | map('regex_replace', '^', ' ') | list}}", ""),
    ):
        yaml = HELLASWAG_YAML.format(name=name, data=data, choices=choices, delimiter=delimiter)
        (folder / f"{name}.yaml").write_text(yaml)
    return folder, data


def _task_file(run, task, step):
    """The one result file ``gpt eval --task`` saved for ``task`` (named ``<task>-<hash>-<step>``)."""
    (found,) = (run / "evals").glob(f"{task}-*-{step}.json")
    return found


def _saved(path: Path) -> dict:
    return json.loads(path.read_text())


@needs_lm_eval
def test_harness_hellaswag_equals_gpt_eval_task(trained, hellaswag, offline, capsys):
    run, _, _, step = trained
    folder, data = hellaswag
    assert main(["eval", "--run", str(run), "--task", str(data), "--format", "hellaswag"]) == 0
    ours = _saved(_task_file(run, "hs", step))
    flags = ["--lm-eval", "hs,hs_spaced", "--include-path", str(folder), "--batch-size", "4"]
    assert main(["eval", "--run", str(run), *flags]) == 0
    out = capsys.readouterr().out
    assert "share of examples whose most likely choice (summed log-prob) is the answer" in out
    harness = _saved(run / "evals" / "lm-eval" / f"hs-{step}.json")
    spaced = _saved(run / "evals" / "lm-eval" / f"hs_spaced-{step}.json")
    assert harness["examples"] == spaced["examples"] == ours["examples"] == len(ITEMS)
    assert harness["metrics"]["acc"] == spaced["metrics"]["acc"] == ours["acc"]
    # gpt eval's hellaswag acc_norm divides by the UTF-8 bytes of " " + ending, lm-eval's by the
    # characters of the ending: equal once the choice carries its space (and is ASCII) ...
    assert spaced["metrics"]["acc_norm"] == ours["acc_norm"]
    # ... and lm-eval's own definition, recomputed from gpt eval's log-likelihoods, otherwise.
    assert _saved(_task_file(run, "hs", step)) == ours  # --task's file is left alone
    labels = np.array([int(label) for _, _, label in ITEMS])
    per_char = [np.argmax(np.array(ll) / [len(e) for e in endings])
                for ll, (_, endings, _) in zip(ours["loglik"], ITEMS, strict=True)]  # fmt: skip
    assert harness["metrics"]["acc_norm"] == np.mean(np.array(per_char) == labels)


@needs_lm_eval
def test_registered_model_type_scores_each_choice_like_gpt_eval_task(trained, hellaswag, offline):
    import lm_eval
    from lm_eval.tasks import TaskManager

    run, _, _, step = trained
    folder, data = hellaswag
    assert main(["eval", "--run", str(run), "--task", str(data), "--format", "hellaswag"]) == 0
    ours = _saved(_task_file(run, "hs", step))["loglik"]
    register_lm_eval_model()
    out = lm_eval.simple_evaluate(
        model="gpt-models", model_args=f"run={run},batch_size=3", tasks=["hs"],
        task_manager=TaskManager(include_path=str(folder), include_defaults=False),
    )  # fmt: skip
    docs = sorted(out["samples"]["hs"], key=lambda s: s["doc_id"])
    theirs = [[ll for ll, _ in doc["filtered_resps"]] for doc in docs]
    np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-6)


@needs_lm_eval
def test_dry_run_passes_the_memory_preflight_and_writes_nothing(trained, hellaswag, offline,
                                                                 capsys, monkeypatch):  # fmt: skip
    run = trained[0]
    flags = ["--lm-eval", "hs", "--include-path", str(hellaswag[0]), "--dry-run"]
    files = sorted(run.rglob("*"))
    assert main(["eval", "--run", str(run), *flags]) == 0
    out = capsys.readouterr().out
    assert "program          scorer (8 windows of 64 tokens per call)" in out
    assert out.rstrip().endswith("It fits: the same command without --dry-run runs it.")
    monkeypatch.setenv("GPT_MEMORY_BUDGET", "100kB")  # the same pre-flight as gpt eval --task
    assert main(["eval", "--run", str(run), *flags[:-1]]) == 2
    assert "gpt eval does not fit in memory: its scorer" in _one_error_line(capsys)
    assert sorted(run.rglob("*")) == files


@needs_lm_eval
def test_loglikelihood_rolling_equals_gpt_eval_text(trained, offline, tmp_path):
    run, cfg, params, _ = trained
    texts = ["The quick brown fox jumps over the lazy dog. " * 4, "A short line of text.\n"]
    files = [tmp_path / f"doc{i}.txt" for i in range(len(texts))]
    for file, text in zip(files, texts, strict=True):
        file.write_text(text)
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    (tmp_path / "roll.yaml").write_text(
        f"task: roll\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: "
        f"{tmp_path / 'docs.jsonl'}\ntest_split: test\noutput_type: loglikelihood_rolling\n"
        'doc_to_text: ""\ndoc_to_target: "{{text}}"\nmetric_list:\n'
        "  - metric: bits_per_byte\n    aggregation: bits_per_byte\n    higher_is_better: false\n"
    )
    ours = evaluate_text(params, cfg, files, stride=16)
    (score,) = evaluate_lm_eval(params, cfg, "roll", include_path=tmp_path, stride=16)
    # The same log-likelihood; lm-eval counts every byte of a text, gpt eval --text all but the
    # first token's (it has no context and is not scored).
    nats = ours.nats_per_token * ours.tokens
    all_bytes = sum(len(t.encode()) for t in texts)
    assert ours.bytes == all_bytes - len(texts)
    assert score.metrics["bits_per_byte"] == pytest.approx(
        nats / (math.log(2) * all_bytes), rel=1e-9
    )
    assert score.examples == 2


@needs_lm_eval
def test_generate_until_stops_at_its_until_strings(trained, offline, tmp_path):
    import lm_eval
    from lm_eval.tasks import TaskManager

    run, cfg, params, _ = trained
    tok, n = ByteTokenizer(), 12
    prompts = ["The name of the", "The value of th"]  # one length: generated as one batch

    def greedy(prompt):
        ids = generate(params, tok.encode(prompt), cfg.model, max_new_tokens=n, temperature=0.0,
                       key=jax.random.key(0))  # fmt: skip
        return tok.decode(np.asarray(ids)[len(prompt) :])

    full = [greedy(p) for p in prompts]
    # Two tasks over both prompts, each stopping at two strings of one prompt's continuation:
    # the later-listed one first, so the cut is at the earliest string, not the first listed.
    until = [[full[0][5], full[0][2]], [full[1][6:8], full[1][3]]]
    (tmp_path / "gen.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    for i, stops in enumerate(until):
        (tmp_path / f"gen{i}.yaml").write_text(
            f"task: gen{i}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: "
            f"{tmp_path / 'gen.jsonl'}\ntest_split: test\noutput_type: generate_until\n"
            'doc_to_text: "{{prompt}}"\ndoc_to_target: ""\n'
            f"generation_kwargs:\n  until: {json.dumps(stops)}\n  max_gen_toks: {n}\n"
            "  do_sample: false\n"
        )
    register_lm_eval_model()
    out = lm_eval.simple_evaluate(
        model="gpt-models", model_args=f"run={run}", tasks=["gen0", "gen1"],
        task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False),
    )  # fmt: skip
    got = {(t, s["doc"]["prompt"]): s["resps"][0][0] for t in out["samples"] for s in out["samples"][t]}  # fmt: skip
    for task, stops in zip(("gen0", "gen1"), until, strict=True):
        for prompt, text in zip(prompts, full, strict=True):
            cut = min((text.find(s) for s in stops if s in text), default=len(text))
            assert got[task, prompt] == text[:cut]
            assert not any(s in got[task, prompt] for s in stops)
    assert len(got["gen0", prompts[0]]) <= 2 < n  # stopped at the later-listed string


@needs_lm_eval
def test_lm_evals_own_output_goes_to_the_runs_log_not_the_terminal(trained, hellaswag, offline,
                                                                   tmp_path, monkeypatch, capfd):  # fmt: skip
    """lm-eval's warnings (a metric without its aggregation), its progress bars and the
    ``fatal: not a git repository`` of the ``git describe`` it runs outside a checkout: into
    RUN/evals/lm-eval/lm-eval.log, named in one note; the terminal keeps the results."""
    run, _, _, step = trained
    yaml = HELLASWAG_YAML.format(name="hs_bare", data=hellaswag[1], choices="{{endings}}",
                                 delimiter=" ").partition("metric_list:")[0]  # fmt: skip
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "hs_bare.yaml").write_text(yaml + "metric_list:\n  - metric: acc\n")
    # Not a git checkout, as for most users, so lm-eval's git describe fails: also where pytest's
    # temporary folder lies inside one (nox puts it under .nox/ of this repository).
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.delenv("GIT_DIR", raising=False)
    log = run / "evals" / "lm-eval" / "lm-eval.log"
    log.unlink(missing_ok=True)
    flags = ["--lm-eval", "hs_bare", "--include-path", str(tmp_path / "tasks")]
    assert main(["eval", "--run", str(run), *flags]) == 0
    out, err = capfd.readouterr()
    assert f"saved {run / 'evals' / 'lm-eval' / f'hs_bare-{step}.json'}" in out
    kept = log.read_text()
    for chatter in ("metric acc is defined, but aggregation is not", "fatal: not a git repository"):
        assert chatter in kept and chatter not in err + out, (kept, err)
    lines = log.read_bytes().count(b"\n")  # (read_text() reads the progress bars' \r as lines)
    assert err.strip().splitlines()[-2:] == [
        "lm-eval loglikelihood: 24/24 windows",  # our own progress stays
        f"note: lm-eval's own output ({lines - 1} lines: its warnings and progress) is in {log}",
    ], (err, kept)
    assert all(line.startswith("lm-eval loglikelihood: ") for line in err.splitlines()[:-1])


# --- bad inputs: one line, exit 2 ------------------------------------------------------------


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpt: error: ") and "\n" not in err and "Traceback" not in err, err
    return err


@needs_lm_eval
def test_unknown_task_lists_near_matches(trained, hellaswag, offline, capsys):
    run = trained[0]
    flags = ["--lm-eval", "hs_spaced,hellaswg", "--include-path", str(hellaswag[0])]
    assert main(["eval", "--run", str(run), *flags]) == 2
    err = _one_error_line(capsys)
    assert "lm-eval does not know the task 'hellaswg' (near matches: " in err
    assert "'hellaswag'" in err and "--include-path FOLDER" in err and "lm-eval ls tasks" in err


def _task_yaml(folder: Path, source: str, name: str = "gone", text: str = "{{ctx}}") -> Path:
    (folder / f"{name}.yaml").write_text(
        f"task: {name}\n{source}\ntest_split: test\noutput_type: multiple_choice\n"
        f'doc_to_text: "{text}"\ndoc_to_choice: "{{{{endings}}}}"\ndoc_to_target: 0\n'
    )
    return folder


@needs_lm_eval
def test_task_data_that_cannot_be_loaded(trained, offline, tmp_path, capsys):
    source = "dataset_path: json\ndataset_kwargs: {data_files: {test: /no/such/file.jsonl}}"
    flags = ["--lm-eval", "gone", "--include-path", str(_task_yaml(tmp_path, source))]
    assert main(["eval", "--run", str(trained[0]), *flags]) == 2
    err = _one_error_line(capsys)
    assert err.startswith("gpt: error: lm-eval could not load the data of gone: ")
    assert "/no/such/file.jsonl" in err and "pass its folder with --include-path" in err


class _NotFound(http.server.BaseHTTPRequestHandler):
    def do_HEAD(self) -> None:
        self.send_response(404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_lm_eval
@pytest.mark.parametrize("hub", ["offline", "refused", "404"])
def test_a_hub_data_set_out_of_reach_is_one_line_before_lm_eval_loads_it(
    trained, offline, tmp_path, capsys, monkeypatch, hub
):
    """`--lm-eval hellaswag` offline ended in a clear line only after 78-358 s of retries: the
    data set's place is checked first (HF_HUB_OFFLINE, or the hub not answering for it)."""
    run = trained[0]
    names, flags, url = "hellaswag", [], "http://127.0.0.1:{port}"
    if hub != "offline":  # a local YAML over a hub name: the built-in index is not needed
        monkeypatch.delenv("HF_HUB_OFFLINE")
        monkeypatch.delenv("HF_DATASETS_OFFLINE")
        names, flags = "gone", ["--include-path", str(_task_yaml(tmp_path, "dataset_path: org/x"))]
    server = None
    if hub == "404":
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        monkeypatch.setenv("HF_ENDPOINT", url.format(port=server.server_address[1]))
    elif hub == "refused":
        monkeypatch.setenv("HF_ENDPOINT", url.format(port=_closed_port()))
    written = sorted((run / "evals").rglob("*"))
    try:
        assert main(["eval", "--run", str(run), "--lm-eval", names, *flags]) == 2
    finally:
        if server is not None:
            server.shutdown()
    err = _one_error_line(capsys)
    why, where = {
        "offline": ("HF_HUB_OFFLINE is set", "Rowan/hellaswag (task hellaswag)"),
        "refused": (f"{os.environ.get('HF_ENDPOINT')} cannot be reached: [Errno 111] Connection "
                    "refused", "org/x (task gone)"),
        "404": (f"{os.environ.get('HF_ENDPOINT')}/api/datasets/org/x answered 404 Not Found",
                "org/x (task gone)"),
    }[hub]  # fmt: skip
    assert err == (
        "gpt: error: lm-eval needs data sets of the Hugging Face hub that are not in this "
        f"machine's cache ({os.environ['HF_HOME']}/datasets) and cannot be downloaded ({why}): "
        f"{where}. Run once with network access (the data is then cached under HF_HOME), or copy "
        "the data here and write a task YAML over the local files (dataset_path: json, "
        "dataset_kwargs: {data_files: {test: FILE.jsonl}}), passed with --include-path."
    )
    assert sorted((run / "evals").rglob("*")) == written  # nothing new in the run


@needs_lm_eval
def test_a_task_template_naming_a_missing_field_is_one_line(trained, offline, tmp_path, capsys):
    """Jinja's UndefinedError with its 53-line traceback, as one line naming the field."""
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"ctx": "The cat", "endings": ["sat.", "sky"]}) + "\n")
    source = f"dataset_path: json\ndataset_kwargs: {{data_files: {{test: {data}}}}}"
    _task_yaml(tmp_path, source, name="typo", text="{{context}}")
    flags = ["--lm-eval", "typo", "--include-path", str(tmp_path)]
    assert main(["eval", "--run", str(trained[0]), *flags]) == 2
    assert _one_error_line(capsys) == (
        "gpt: error: lm-eval could not write the prompts of typo: a template of the task YAML "
        "failed (UndefinedError: 'context' is undefined). Its templates (doc_to_text, "
        "doc_to_choice, doc_to_target) may name only fields the task's documents have, in valid "
        "Jinja; fix the YAML."
    )


def test_lm_eval_not_installed_names_the_extra(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval` now raises ImportError
    assert main(["eval", "--run", str(tmp_path), "--lm-eval", "hellaswag"]) == 2
    err = _one_error_line(capsys)
    assert "lm_eval package), which is not installed" in err
    assert "Install the extra: pip install 'gpt-models[lm-eval]'." in err
    with pytest.raises(UsageError, match=r"pip install 'gpt-models\[lm-eval\]'"):
        register_lm_eval_model()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--lm-eval", "hs", "--include-path", "{missing}"],
         "--include-path {missing}: it does not exist, but it must be a folder of lm-eval task "
         "YAML files"),
        (["--include-path", "{tmp}"],
         "gpt eval --include-path {tmp} adds task YAMLs to --lm-eval; pass --lm-eval"),
        (["--lm-eval", "hs", "--task", "a.jsonl"],
         "gpt eval --lm-eval runs the harness's tasks alone, but --task was given too"),
        (["--lm-eval", "hs,,arc_easy"],
         "lm-eval tasks 'hs,,arc_easy': expected task names separated by commas"),
        # `--lm-eval "$TASKS"` with TASKS unset
        (["--lm-eval", ""],
         "gpt eval --lm-eval '' is empty. Pass a value (e.g. --lm-eval hellaswag,arc_easy), or "
         "leave the flag out."),
        (["--lm-eval", "hs", "--include-path", " "],
         "gpt eval --include-path ' ' is empty. Pass a value (e.g. --include-path my_tasks/)"),
    ],
)  # fmt: skip
def test_bad_lm_eval_flags(flags, message, tmp_path, capsys):
    where = {"missing": str(tmp_path / "no-such-dir"), "tmp": str(tmp_path)}
    args = [f.format(**where) for f in flags]
    assert main(["eval", "--run", str(tmp_path), *args]) == 2
    assert message.format(**where) in _one_error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written in the run folder


@needs_lm_eval
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ("batch_size=auto", "batch_size = 'auto'; expected a whole number >= 1, e.g. 8 ('auto' "
                            "is not supported"),
        ("stride=0", "stride = 0 is out of range; it must be 1..model.seq_len (64)"),
        ("", "The gpt-models model of lm-eval needs a run folder: model_args='run=RUN'"),
    ],
)  # fmt: skip
def test_bad_model_args(trained, args, message):
    model_args = f"run={trained[0]},{args}" if args else ""
    with pytest.raises(UsageError, match=re.escape(message)):
        register_lm_eval_model().create_from_arg_string(model_args)
