"""Every ``gpt`` command of the docs' ``bash`` blocks runs, at a tiny size.

The commands of each page (docs/**/*.md and the README) run in order, as a reader would type
them, in a copy of one folder made once for this module: the example files docs/gpt_models.md
lists, a trained ``runs/demo`` and two Hugging Face folders. A command is a line of a fenced
``bash`` block whose first word (after ``NAME=value`` environment assignments) is ``gpt``; a line
ending in ``\\`` continues on the next. The block may be preceded by a marker comment:

- ``<!-- docs-test: skip (REASON) -->``: its commands need what the test machine lacks (a GPU, a
  cluster, the network, an optional extra); they are counted as exempt, not run;
- ``<!-- docs-test: exit N -->``: its commands are examples of a refusal and must exit with N.

A command runs in-process through ``gpt_models.main``: one JAX runtime for all, and a persistent
compilation cache in the module's temporary folder, so runs whose configs differ only in what
the compiled programs do not hold (a data path, a prompt, a run name) compile once. Shell
features other than environment assignments, ``*``/``?`` globs and one ``> FILE`` at the end are
refused, so that what the docs show is what runs.

Every run is shrunk by ``--set`` flags the test adds after the command's own (``SHAPE`` and
``RUN``): one small size for all. A resumed run or a fine-tune keeps its source's architecture,
so only ``RUN`` is added there.
"""

from __future__ import annotations

import contextlib
import glob
import gzip
import io
import json
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import jax
import pytest

from gpt_models import (
    PRESETS,
    BPETokenizer,
    apply_overrides,
    default_corpus,
    export_hf,
    init_params,
    main,
)
from gpt_models.internal import cli_parser

ROOT = Path(__file__).resolve().parents[3]
# The size of every new run's model (a resumed run or a fine-tune keeps its source's).
SHAPE = {"model.n_layers": "1", "model.d_model": "32", "model.n_heads": "2", "model.d_ff": "64",
         "model.seq_len": "64", "data.bpe_vocab_size": "320"}  # fmt: skip
# The size of every run: seconds on a shared 2-core CPU.
RUN = {"train.batch_size": "8", "train.grad_accum": "1", "train.eval_batches": "1",
       "train.warmup_steps": "0", "sample.max_new_tokens": "8"}  # fmt: skip
STEPS = 2
MARKER = re.compile(r"^<!--\s*docs-test:\s*(?P<what>.*?)\s*-->$")
FENCE = re.compile(r"^\s*```\s*(?P<lang>[\w-]*)")
ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class DocsCommandError(ValueError):
    """A docs page whose command or marker the runner cannot take as written."""


@dataclass
class Command:
    """One ``gpt`` line of a page: where it is, its words, its environment and its expectation."""

    page: Path
    line: int
    text: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdout_to: str | None = None
    skip: str | None = None  # the reason it is exempt
    exit: int = 0

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """The pages whose commands are run: every Markdown page of the docs, and the README."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _marker(line: str, page: Path, number: int) -> tuple[str | None, int] | None:
    """``(skip reason, expected exit)`` of a marker line, ``None`` for any other line."""
    found = MARKER.match(line.strip())
    if not found:
        return None
    what = found["what"]
    skip = re.fullmatch(r"skip \((.+)\)", what)
    status = re.fullmatch(r"exit (\d+)", what)
    if skip:
        return skip[1], 0
    if status:
        return None, int(status[1])
    raise DocsCommandError(
        f"{page.relative_to(ROOT)}:{number}: unknown docs-test marker {line.strip()!r}; "
        "expected <!-- docs-test: skip (REASON) --> or <!-- docs-test: exit N -->"
    )


def commands(page: Path) -> list[Command]:
    """The ``gpt`` commands of ``page``'s bash blocks, in page order."""
    found: list[Command] = []
    lang: str | None = None  # inside a fence: its language
    mark: tuple[str | None, int] | None = None
    pending = ""
    start = 0
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if fence and lang is None:
            lang = fence["lang"]
            block_mark, mark = (mark if lang == "bash" else None), None
            continue
        if fence:
            lang = None
            continue
        if lang is None:
            if line.strip():
                mark = _marker(line, page, number)
            continue
        if lang != "bash":
            continue
        pending, start = (pending + " " + line.rstrip("\\").strip(), start or number)
        if line.rstrip().endswith("\\"):
            continue
        command = _parse(pending.strip(), page, start)
        pending, start = "", 0
        if command is not None:
            command.skip, command.exit = block_mark or (None, 0)
            found.append(command)
    return found


def _parse(text: str, page: Path, number: int) -> Command | None:
    try:
        words = shlex.split(text, comments=True)
    except ValueError as err:
        raise DocsCommandError(f"{page.relative_to(ROOT)}:{number}: {err}: {text}") from err
    env = {}
    while words and ASSIGN.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words or words[0] != "gpt":
        return None  # a comment, pip install, ...: not ours to run
    where = f"{page.relative_to(ROOT)}:{number}"
    shell = [w for w in words if w in ("|", "||", "&&", ";", "<", "2>", ">>", "&")]
    if shell or re.search(r"\$\(|`", text.split("#")[0]):
        raise DocsCommandError(
            f"{where}: {text!r} uses shell syntax ({shell or 'a substitution'}) the docs test does "
            "not run; write one gpt command a line (`> FILE` at the end is allowed)"
        )
    stdout_to = None
    if ">" in words:
        at = words.index(">")
        if at != len(words) - 2:
            raise DocsCommandError(f"{where}: `> FILE` must end the command: {text!r}")
        stdout_to, words = words[-1], words[:at]
    return Command(page, number, text, words[1:], env, stdout_to)


# ----------------------------------------------------------------------------------------------
# Running


def _sets(values: dict[str, str]) -> list[str]:
    return [a for key, value in values.items() for a in ("--set", f"{key}={value}")]


def _newest_step(run: Path) -> int:
    steps = [int(p.name) for p in (run / "checkpoints").glob("*") if p.name.isdigit()]
    return max(steps, default=0)


def shrunk(argv: list[str], cwd: Path, refusal: bool = False) -> list[str]:
    """``argv`` with the flags that make its run tiny (the words the test adds, in place).

    They come after the command's own flags, so every run has one size and most runs of a
    page compile the same programs; in a refusal the page shows (``refusal``) they come first,
    so the page's own values are the ones refused.
    """
    try:
        args = cli_parser().parse_args(argv)
    except SystemExit:
        return argv  # a usage error the page means to show: argparse's own message
    if args.command != "train":
        return argv
    if args.resume:  # its architecture is fixed; one more step than it has
        added = {**RUN, "train.steps": str(_newest_step(cwd / args.resume) + 1)}
    else:
        steps = max(STEPS, args.profile[1] if args.profile else 0)
        added = {**RUN, "train.steps": str(steps), **({} if args.init_from else SHAPE)}
    if refusal:
        return [argv[0], *_sets(added), *argv[1:]]
    return [*argv, *_sets(added)]


def target(argv: list[str]) -> str | None:
    """The folder a command creates (``None`` when it creates none or continues one)."""
    try:
        args = cli_parser().parse_args(argv)
    except SystemExit:
        return None
    if args.command == "train" and not (args.resume or args.auto_resume) and args.name:
        return os.path.normpath(os.path.join(args.out, args.name))
    if args.command == "import":
        return os.path.normpath(os.path.join(args.out, args.name))
    if args.command in ("export", "prepare"):
        return os.path.normpath(args.out)
    return None


def _globbed(argv: list[str], cwd: Path) -> list[str]:
    out = []
    for word in argv:
        matches = sorted(glob.glob(word, root_dir=cwd)) if re.search(r"[*?]", word) else []
        out += matches or [word]
    return out


@dataclass
class Result:
    status: int
    out: str
    err: str
    argv: list[str]


def run(command: Command, cwd: Path, fixtures: set[str]) -> Result:
    """Run ``command`` in ``cwd``; a folder it creates that a fixture made is removed first."""
    argv = shrunk(_globbed(command.argv, cwd), cwd, refusal=command.exit != 0)
    made = target(argv)
    if made in fixtures and command.exit == 0:  # the page makes its own
        shutil.rmtree(cwd / made)
        fixtures.discard(made)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_chdir(cwd))
        stack.enter_context(mock.patch.dict(os.environ, command.env))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            status = main(argv)
        except SystemExit as exit_:  # argparse: --help, --version, a usage error
            status = exit_.code if isinstance(exit_.code, int) else 1
    if command.stdout_to:
        (cwd / command.stdout_to).write_text(out.getvalue(), encoding="utf-8")
    return Result(status, out.getvalue(), err.getvalue(), argv)


@contextlib.contextmanager
def _chdir(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def failure(command: Command, result: Result) -> str:
    """What a failed docs command prints: where, what ran, what it said."""
    added = [w for w in result.argv if w not in command.argv]
    tail = "\n".join((result.err.strip() or result.out.strip()).splitlines()[-15:])
    return (
        f"{command.where}: `{command.text}` exited with {result.status}, expected "
        f"{command.exit}\n  ran: gpt {shlex.join(result.argv)}\n  (the test added: "
        f"{' '.join(added) or 'nothing'})\n{tail}"
    )


# ----------------------------------------------------------------------------------------------
# The folder every page starts from


def _lines(text: str, size: int) -> list[str]:
    """``text`` cut into pieces of about ``size`` characters, at spaces."""
    words, pieces, piece = text.split(), [], ""
    for word in words:
        piece += " " + word
        if len(piece) > size:
            pieces.append(piece.strip())
            piece = ""
    return pieces


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _chat_tokenizer(folder: Path, texts: list[str]) -> None:
    """A byte-level BPE with ChatML's special tokens and template: a chat model's tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])  # fmt: skip
    tok.train_from_iterator(texts, trainer)
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"eos_token": "<|endoftext|>", "chat_template": CHATML}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")


def _files(ws: Path) -> None:
    """The example files docs/gpt_models.md lists ("The examples on these pages")."""
    prose = _lines(default_corpus(), 300)
    (ws / "book.txt").write_text("\n".join(prose[:60]), encoding="utf-8")
    for i in range(3):
        (ws / "my_text").mkdir(exist_ok=True)
        (ws / "my_text" / f"part{i}.txt").write_text("\n".join(prose[60 + 30 * i :][:30]))
    (ws / "more_text").mkdir()
    (ws / "more_text" / "notes.txt").write_text("\n".join(prose[200:230]), encoding="utf-8")
    (ws / "more_text" / "readme.md").write_text("# Notes\n\n" + "\n".join(prose[230:260]))
    for i in range(2):
        _jsonl(
            ws / "corpus" / f"part{i}.jsonl.gz", [{"text": t} for t in prose[300 + 200 * i :][:200]]
        )
    _jsonl(ws / "web.jsonl", [{"text": t} for t in prose[700:1100]])
    code = _lines(Path(json.__file__).read_text() + Path(shlex.__file__).read_text(), 200)
    _jsonl(ws / "code.jsonl", [{"text": t} for t in code[:400]])
    sums = [(a, b) for a in range(1, 25) for b in range(1, 10)]
    chats = [[{"role": "user", "content": f"What is {a} plus {b}?"},
              {"role": "assistant", "content": f"{a} plus {b} is {a + b}."}] for a, b in sums]  # fmt: skip
    _jsonl(ws / "chats.jsonl", [{"messages": c} for c in chats])
    _jsonl(
        ws / "completions.jsonl",
        [{"prompt": f"{a} + {b} =", "completion": f" {a + b}"} for a, b in sums],
    )
    _jsonl(
        ws / "pairs.jsonl",
        [{"prompt": f"{a} + {b} =", "chosen": f" {a + b}", "rejected": f" {a + b + 1}"}
         for a, b in sums],
    )  # fmt: skip
    data = Path(__file__).parent / "data"
    (ws / "tasks").mkdir()
    for kind in ("mc", "cloze"):
        shutil.copy(data / f"synthetic_{kind}.jsonl", ws / "tasks" / f"{kind}.jsonl")
    swag = [{"ctx": t[:40], "endings": [t[40:60], t[60:80][::-1], t[80:100], t[100:120]], "label": 0}
            for t in prose[:20]]  # fmt: skip
    _jsonl(ws / "hellaswag_val.jsonl", swag)
    _chat_tokenizer(ws / "hf" / "chat", [json.dumps(c) for c in chats] + prose[:200])


def _hf_folders(ws: Path) -> None:
    """``hf/gpt2`` and ``hf/llama``: each family at the test's size, untrained, with a BPE
    tokenizer of the test's vocabulary (as a published folder brings its own)."""
    tokenizer = BPETokenizer.train(_lines(default_corpus(), 300), vocab_size=320)
    size = {k: v for k, v in SHAPE.items() if k.startswith("model.")}
    for name, preset in (("gpt2", "gpt2-small"), ("llama", "llama-tiny")):
        values = {**size, "model.vocab_size": "320", "model.vocab_real": "0"}
        cfg = apply_overrides(PRESETS[preset], values, from_text=True)
        params = init_params(cfg.model, jax.random.key(0))
        export_hf(cfg, params, ws / "hf" / name, tokenizer=tokenizer)


FIXTURES = {"runs/demo"}  # what a page may make again itself (the folder is replaced)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, request) -> Iterator[Path]:
    yield from _workspace(tmp_path_factory.mktemp("docs"), request)


def _workspace(ws: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    start = time.perf_counter()
    _files(ws)
    _hf_folders(ws)
    command = _parse("gpt train --name demo", Path(__file__), 1)  # runs/demo, as a reader makes it
    assert command is not None
    result = run(command, ws, set())
    assert result.status == 0, failure(command, result)
    TIMES["setup"] = time.perf_counter() - start
    yield ws
    exempt = sum(1 for c in ALL if c.skip)
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # shown with -q too, as the exempt list is
        print(
            f"\ndocs commands: {len(RAN)} run ({len(ALL) - exempt - len(RAN)} not selected), "
            f"{exempt} exempt by a docs-test marker, in {sum(TIMES.values()):.0f} s "
            f"({TIMES['setup']:.0f} s of it the shared folder)"
        )


ALL = [c for page in pages() for c in commands(page)]
TIMES: dict[str, float] = {}
RAN: list[Command] = []
RUN_PAGES = sorted({c.page for c in ALL if not c.skip}, key=pages().index)


@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_gpt_commands_of_a_page_run(page, workspace, tmp_path):
    """Each ``gpt`` command of the page's bash blocks, in order, in a copy of the workspace."""
    cwd = tmp_path / "ws"
    shutil.copytree(workspace, cwd, symlinks=True)
    fixtures = set(FIXTURES)
    start = time.perf_counter()
    for command in (c for c in ALL if c.page == page and not c.skip):
        result = run(command, cwd, fixtures)
        RAN.append(command)
        assert result.status == command.exit, failure(command, result)
        if command.exit:  # a refusal the page shows: one error line, no traceback
            assert "error: " in result.err and "Traceback" not in result.err, failure(
                command, result
            )
    TIMES[str(page)] = time.perf_counter() - start


def test_every_docs_command_is_run_or_exempt_with_a_reason(capsys):
    readme = [c.text for c in ALL if c.page.name == "README.md"]
    assert readme[0] == "gpt train --set train.steps=200 --name demo", readme
    exempt = [c for c in ALL if c.skip]
    assert all(c.skip.strip() for c in exempt)
    with capsys.disabled():
        print(f"\ndocs commands: {len(ALL) - len(exempt)} run, {len(exempt)} exempt:")
        for c in exempt:
            print(f"  {c.where}: {c.text}  ({c.skip})")


# ----------------------------------------------------------------------------------------------
# The runner's own rules


def test_commands_are_found_in_bash_blocks_with_their_markers(tmp_path, monkeypatch):
    text = (
        "```bash\ngpt train --name a \\\n  --set train.lr=1e-3   # a comment\npip install x\n```\n\n"
        "<!-- docs-test: skip (needs a GPU) -->\n```bash\nGPT_MEMORY_BUDGET=1GiB gpt eval --run r\n```\n"
        "<!-- docs-test: exit 2 -->\n```bash\ngpt sample --run '' > out.txt\n```\n"
        "```text\ngpt train --not-run\n```\n"
    )
    page = tmp_path / "p.md"
    page.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    found = commands(page)
    assert [(c.line, c.argv, c.env, c.skip, c.exit, c.stdout_to) for c in found] == [
        (2, ["train", "--name", "a", "--set", "train.lr=1e-3"], {}, None, 0, None),
        (9, ["eval", "--run", "r"], {"GPT_MEMORY_BUDGET": "1GiB"}, "needs a GPU", 0, None),
        (13, ["sample", "--run", ""], {}, None, 2, "out.txt"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<!-- docs-test: maybe -->\n```bash\ngpt train\n```\n", "unknown docs-test marker"),
        ("```bash\ngpt config show | head\n```\n", "uses shell syntax"),
        ("```bash\ngpt config show && gpt train\n```\n", "uses shell syntax"),
        ("```bash\ngpt config show > a.toml --set x=1\n```\n", "must end the command"),
    ],
)
def test_what_the_runner_cannot_run_as_written_is_refused(tmp_path, monkeypatch, text, message):
    page = tmp_path / "p.md"
    page.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(DocsCommandError, match=message):
        commands(page)


def test_runs_are_shrunk_and_resumed_runs_keep_their_architecture(tmp_path):
    new = shrunk(["train", "--set", "model.d_model=64", "--profile", "2:5"], tmp_path)
    assert new.index("model.d_model=32") > new.index("model.d_model=64")  # one size for all
    assert "train.steps=5" in new and "model.seq_len=64" in new  # --profile 2:5 needs 5 steps
    refused = shrunk(["train", "--set", "model.n_heads=3"], tmp_path, refusal=True)
    assert refused.index("model.n_heads=2") < refused.index("model.n_heads=3")  # the page's wins
    (tmp_path / "r" / "checkpoints" / "4").mkdir(parents=True)
    resumed = shrunk(["train", "--resume", "r"], tmp_path)
    assert "train.steps=5" in resumed and not any(w.startswith("model.") for w in resumed)
    tuned = shrunk(["train", "--init-from", "r"], tmp_path)
    assert not any(w.startswith("model.") for w in tuned)
    assert shrunk(["sample", "--run", "r"], tmp_path) == ["sample", "--run", "r"]
