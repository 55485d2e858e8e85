"""Multiple-choice and cloze accuracy of trained params on JSONL task files.

A choice is scored by the sum of its tokens' log-probabilities given the context (context and
choice are tokenized separately and joined, choice appended verbatim). ``acc`` picks the choice
with the largest sum, ``acc_norm`` the largest sum per UTF-8 byte of the choice (as
lm-evaluation-harness reports them). A cloze example is right when greedy decoding after the
context gives exactly the target's tokens (LAMBADA's last-word accuracy).

When context + choice do not fit the context window (``model.seq_len + 1`` tokens), the choice is
kept whole and the context is cut from the left; such examples are counted in ``truncated``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .._config.schema import Config
from .._data.byte_tokenizer import ByteTokenizer
from .._data.corpus import Tokenizer
from .._distributed.mesh import on_one_device
from .._errors import DataError, UsageError
from .scoring import score_windows

FORMATS = ("mc", "hellaswag", "cloze")
_SCHEMAS = {
    "mc": '{"context": "The sky is", "choices": [" blue", " loud"], "label": 0}',
    "hellaswag": '{"ctx": "A man sits down. He", "endings": ["plays.", "melts."], "label": 0}',
    "cloze": '{"context": "The cat sat on the", "target": " mat"}',
}


@dataclasses.dataclass(frozen=True)
class TaskExample:
    """One example: a context, its choices (a cloze target is the only choice) and the right one."""

    context: str
    choices: tuple[str, ...]
    label: int
    where: str  # file:line, for messages


@dataclasses.dataclass(frozen=True)
class TaskScore:
    """What :func:`evaluate_task` measured on one task file.

    ``acc``: share of examples whose highest-likelihood choice is the label (cloze: whose greedy
    continuation is the target); ``acc_norm``: the same with likelihoods per byte of the choice
    (equal to ``acc`` for cloze); ``chance``: the expected ``acc`` of guessing (0 for cloze);
    ``truncated``: examples whose context was cut from the left to fit; ``loglik``: each example's
    choice log-likelihoods (nats); ``path``: the task file, absolute (two files may share a name).
    """

    task: str
    format: str
    examples: int
    acc: float
    acc_norm: float
    chance: float
    truncated: int
    examples_per_s: float
    loglik: tuple[tuple[float, ...], ...]
    path: str = ""

    def summary(self) -> dict[str, Any]:
        """The numbers without the per-example log-likelihoods (for tables and metrics)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "loglik"}


def load_task(path: str | Path, format: str | None = None) -> tuple[str, list[TaskExample]]:
    """The format (given, or told by the first example's fields) and examples of a JSONL file.

    Raises:
        DataError: a missing or empty file, a line that is not a JSON object, a missing field, an
            empty choice list or a label out of range; the message names ``file:line``.
    """
    path = Path(path)
    if format is not None and format not in FORMATS:
        raise UsageError(f"Unknown task format {format!r}; expected one of {', '.join(FORMATS)}.")
    if not path.is_file():
        what = "is not a regular file" if path.exists() else "does not exist"
        raise DataError(f"Task file {path} {what}. Pass a JSONL file, one example a line.")
    rows = []
    for n, raw in enumerate(path.read_bytes().splitlines(), 1):
        line = _utf8_line(raw, f"{path}:{n}")
        if line.strip():
            rows.append((f"{path}:{n}", _parse(line, f"{path}:{n}")))
    if not rows:
        raise DataError(f"Task file {path} holds no examples; expected one JSON object a line.")
    fmt = format or _guess(rows[0][1], rows[0][0])
    return fmt, [_example(row, where, fmt) for where, row in rows]


def _utf8_line(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(
            f"{where}: not UTF-8 text (byte 0x{raw[err.start]:02x} at column {err.start + 1}). "
            "Task files are JSON lines in UTF-8; convert the file, e.g. iconv -f latin1 -t utf-8 "
            "FILE > FILE.utf8.jsonl."
        ) from err


def _parse(line: str, where: str) -> dict[str, Any]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataError(
            f"{where}: not valid JSON ({err.msg} at column {err.colno}). A task file holds one "
            f"JSON object a line, e.g. {_SCHEMAS['mc']}"
        ) from err
    if not isinstance(row, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(row).__name__}.")
    return row


def _guess(row: dict[str, Any], where: str) -> str:
    for fmt, key in (("hellaswag", "endings"), ("mc", "choices"), ("cloze", "target")):
        if key in row:
            return fmt
    raise DataError(
        f"{where}: cannot tell the task format from the fields {sorted(row)}. Expected one of: "
        + "; ".join(f"{f}: {s}" for f, s in _SCHEMAS.items())
        + ". Or name it with --format."
    )


def _example(row: dict[str, Any], where: str, fmt: str) -> TaskExample:
    if fmt == "cloze":
        context, target = (
            _field(row, "context", str, where, fmt),
            _field(row, "target", str, where, fmt),
        )
        return _checked(TaskExample(context, (target,), 0, where))
    if fmt == "hellaswag":
        context = (
            row["ctx"]
            if "ctx" in row
            else _field(row, "ctx_a", str, where, fmt) + " " + _field(row, "ctx_b", str, where, fmt)
        )
        choices = tuple(" " + e for e in _strings(row, "endings", where, fmt))
    else:
        context = _field(row, "context", str, where, fmt)
        choices = tuple(_strings(row, "choices", where, fmt))
    label = row.get("label")
    if isinstance(label, str) and label.strip().isdigit():
        label = int(label)  # HellaSwag's files store the label as a string
    if not isinstance(label, int) or isinstance(label, bool):
        raise DataError(
            f"{where}: label = {label!r}; a {fmt} example needs an integer label, the 0-based "
            f"index of the right choice. Example: {_SCHEMAS[fmt]}"
        )
    return _checked(TaskExample(str(context), choices, label, where))


def _checked(ex: TaskExample) -> TaskExample:
    if not ex.choices:
        raise DataError(
            f"{ex.where}: the choice list is empty; a multiple-choice example needs at least one "
            "choice (and a label indexing it)."
        )
    if not 0 <= ex.label < len(ex.choices):
        raise DataError(
            f"{ex.where}: label = {ex.label} is out of range for {len(ex.choices)} choices; labels "
            f"are 0-based indices into the choices (0..{len(ex.choices) - 1})."
        )
    if not ex.context:
        raise DataError(
            f"{ex.where}: the context is empty; the first token of a choice needs a context to be "
            "scored after."
        )
    return ex


def _field(row: dict[str, Any], key: str, kind: type, where: str, fmt: str) -> Any:
    if not isinstance(row.get(key), kind):
        got = "missing" if key not in row else f"{type(row[key]).__name__} {row[key]!r}"
        raise DataError(
            f"{where}: field {key!r} is {got}; a {fmt} example needs it as a {kind.__name__}. "
            f"Example: {_SCHEMAS[fmt]}"
        )
    return row[key]


def _strings(row: dict[str, Any], key: str, where: str, fmt: str) -> list[str]:
    values = _field(row, key, list, where, fmt)
    if not all(isinstance(v, str) for v in values):
        raise DataError(f"{where}: every entry of {key!r} must be a string, got {values!r}.")
    return values


def evaluate_task(
    params: Any,
    config: Config,
    path: str | Path,
    *,
    format: str | None = None,
    tokenizer: Tokenizer | None = None,
    batch_size: int = 8,
    stream: TextIO | None = None,
) -> TaskScore:
    """Accuracy of ``params`` on a JSONL task file (formats: ``mc``, ``hellaswag``, ``cloze``).

    Args:
        params: the model parameters.
        config: the run's config (its ``model`` section is used).
        path: the JSONL file; one example a line.
        format: ``mc``, ``hellaswag`` or ``cloze``; default: told by the first example's fields.
        tokenizer: the run's tokenizer (default bytes).
        batch_size: (context, choice) rows per model call.
        stream: where a progress line goes (e.g. ``sys.stderr``); default none.

    Raises:
        DataError: a bad task file (see :func:`load_task`), or a choice longer than the context
            window (it cannot be scored whole).

    Example:
        >>> import dataclasses, jax, json, tempfile, pathlib
        >>> from gpt_models import PRESETS, evaluate_task, init_params
        >>> tiny = PRESETS["tiny"]
        >>> cfg = dataclasses.replace(tiny, model=dataclasses.replace(
        ...     tiny.model, seq_len=16, d_model=32, n_layers=1, n_heads=2))
        >>> file = pathlib.Path(tempfile.mkdtemp()) / "sky.jsonl"
        >>> _ = file.write_text(json.dumps({"context": "The sky is", "choices": [" blue", " loud"],
        ...                                 "label": 0}) + "\\n")
        >>> score = evaluate_task(init_params(cfg.model, jax.random.key(0)), cfg, file)
        >>> score.format, score.examples, score.chance, len(score.loglik[0])
        ('mc', 1, 0.5, 2)
    """
    started = time.perf_counter()
    task = prepare_task(path, config, format=format, tokenizer=tokenizer)
    return task.score(params, batch_size=batch_size, stream=stream, started=started)


@dataclasses.dataclass(frozen=True)
class PreparedTask:
    """A task file read, checked and tokenized into scoring windows: score it as often as needed."""

    name: str
    format: str
    examples: list[TaskExample]
    config: Config
    windows: list[np.ndarray]
    spans: list[int]  # how many tokens at the end of each window are the choice's
    truncated: int
    path: str = ""

    def score(
        self,
        params: Any,
        *,
        batch_size: int = 8,
        stream: TextIO | None = None,
        started: float | None = None,
    ) -> TaskScore:
        """Score the task's windows with ``params``."""
        started = time.perf_counter() if started is None else started
        scores = score_windows(
            on_one_device(params),
            self.config.model,
            self.windows,
            batch_size=batch_size,
            label=f"eval {self.name}",
            stream=stream,
        )
        it = iter(zip(scores, self.spans, strict=True))
        loglik, greedy = [], []
        for ex in self.examples:
            rows = [next(it) for _ in ex.choices]
            loglik.append(tuple(float(lp[-k:].sum()) for (lp, _), k in rows))
            (_, first_greedy), k = rows[0]
            greedy.append(bool(first_greedy[-k:].all()))
        acc, acc_norm, chance = _accuracies(self.format, self.examples, loglik, greedy)
        seconds = time.perf_counter() - started
        return TaskScore(
            task=self.name,
            format=self.format,
            examples=len(self.examples),
            acc=acc,
            acc_norm=acc_norm,
            chance=chance,
            truncated=self.truncated,
            examples_per_s=len(self.examples) / max(seconds, 1e-9),
            loglik=tuple(loglik),
            path=self.path,
        )


def prepare_task(
    path: str | Path,
    config: Config,
    *,
    format: str | None = None,
    tokenizer: Tokenizer | None = None,
) -> PreparedTask:
    """Read and check a task file and build its windows (every error of the file shows here)."""
    fmt, examples = load_task(path, format)
    windows, spans, truncated = _windows(
        examples, tokenizer or ByteTokenizer(), config.model.seq_len
    )
    return PreparedTask(
        Path(path).stem, fmt, examples, config, windows, spans, truncated, str(Path(path).resolve())
    )


def _accuracies(
    fmt: str, examples: list[TaskExample], loglik: list[tuple[float, ...]], greedy: list[bool]
) -> tuple[float, float, float]:
    if fmt == "cloze":
        return float(np.mean(greedy)), float(np.mean(greedy)), 0.0
    labels = np.array([ex.label for ex in examples])
    picked = np.array([np.argmax(ll) for ll in loglik])
    per_byte = [
        np.argmax(np.array(ll) / [max(len(c.encode()), 1) for c in ex.choices])
        for ll, ex in zip(loglik, examples, strict=True)
    ]
    chance = float(np.mean([1 / len(ex.choices) for ex in examples]))
    return float(np.mean(picked == labels)), float(np.mean(np.array(per_byte) == labels)), chance


class TaskEvals:
    """The in-loop evals of ``eval.tasks``: read and checked once, scored at each evaluation.

    Returns ``{"eval/<task>/acc": x, "eval/<task>/acc_norm": y}`` for every task file.
    """

    def __init__(self, cfg: Config, tokenizer: Tokenizer | None = None) -> None:
        self.tasks = []
        for path in task_paths(cfg):
            try:
                self.tasks.append(prepare_task(path, cfg, tokenizer=tokenizer))
            except DataError as err:
                raise DataError(f"eval.tasks: {err}") from err
        names = [t.name for t in self.tasks]
        if twice := sorted({n for n in names if names.count(n) > 1}):
            raise DataError(
                f"eval.tasks = {cfg.eval.tasks!r} names two files called {twice[0]!r}; "
                f"their metrics (eval/{twice[0]}/acc) would be mixed. Rename one of them."
            )

    def __call__(self, params: Any) -> dict[str, float]:
        out: dict[str, float] = {}
        for task in self.tasks:
            s = task.score(params, batch_size=8)
            out |= {f"eval/{s.task}/acc": s.acc, f"eval/{s.task}/acc_norm": s.acc_norm}
        return out


def task_paths(cfg: Config) -> list[str]:
    """The files ``eval.tasks`` names (comma-separated)."""
    return [p.strip() for p in cfg.eval.tasks.split(",") if p.strip()]


def _windows(
    examples: list[TaskExample], tok: Tokenizer, seq_len: int
) -> tuple[list[np.ndarray], list[int], int]:
    windows, spans, truncated = [], [], 0
    for ex in examples:
        ctx = np.asarray(tok.encode(ex.context), np.int32)
        cut = False
        for j, choice in enumerate(ex.choices):
            cont = np.asarray(tok.encode(choice), np.int32)
            if len(cont) > seq_len:
                raise DataError(
                    f"{ex.where}: choice {j} is {len(cont)} tokens, longer than the model's "
                    f"context "
                    f"window (model.seq_len = {seq_len}), so it cannot be scored whole (the "
                    "context is cut from the left to fit, never the choice). Shorten the choice "
                    "or evaluate a model with a longer context."
                )
            if len(cont) == 0:
                raise DataError(f"{ex.where}: choice {j} is empty; every choice needs some text.")
            full = np.concatenate([ctx, cont])
            cut |= len(full) > seq_len + 1
            windows.append(full[-(seq_len + 1) :])
            spans.append(len(cont))
        truncated += cut
    return windows, spans, truncated


def save_task_score(score: TaskScore, run: str | Path, step: int) -> Path:
    """Write ``score`` as ``RUN/evals/<task>-<key>-<step>.json`` (atomically: a temp file, then a
    rename), where ``<key>`` is 8 hex digits of the sha256 of the task file's absolute path: two
    files of one name (``a/val.jsonl``, ``b/val.jsonl``) never share a result file, and the same
    file evaluated again at the same step replaces its own."""
    folder = Path(run) / "evals"
    folder.mkdir(exist_ok=True)
    name = (
        "".join(c if c.isalnum() or c in "-_." else "_" for c in score.task).lstrip(".") or "task"
    )
    key = hashlib.sha256((score.path or score.task).encode()).hexdigest()[:8]
    target = folder / f"{name}-{key}-{step}.json"
    tmp = folder / f".{target.name}.tmp"
    tmp.write_text(json.dumps(dataclasses.asdict(score) | {"step": step}, indent=1) + "\n")
    tmp.replace(target)
    return target
