"""EleutherAI's lm-evaluation-harness on trained params: its tasks, the ``gpt-models`` model type.

lm_eval is an optional extra (``pip install 'gpt-models[lm-eval]'``): nothing here imports it
before it is asked for, and asking without it installed is a :class:`UsageError` that names the
extra. The model type lives in ``lm_eval_model.py`` (it subclasses lm_eval's ``LM`` on import).

Task names are looked up in lm_eval's index of its own task YAMLs plus those under
``include_path``. Indexing lm_eval's ~15,000 built-in names takes seconds, so names that are all
plain tasks under ``include_path`` are looked up there alone. Tasks whose data sets are on the
hub, not cached and out of reach are refused before anything loads (:func:`check_task_data`).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import importlib
import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import jinja2

from core_primitives import list_alternatives

from .._config.schema import Config
from .._data.corpus import Tokenizer
from .._data.store import write_json_atomic
from .._errors import DataError, UsageError

EXTRA = "pip install 'gpt-models[lm-eval]'"


@dataclasses.dataclass(frozen=True)
class HarnessScore:
    """One lm-eval task's (or group's) results, as the harness aggregated them.

    ``metrics`` maps a metric to its value (``acc``; a metric measured after a filter other than
    lm-eval's ``none`` is named ``metric,filter``, e.g. ``exact_match,strict-match``); ``stderr``
    the same names to their standard error (``None`` where lm-eval gives none); ``examples`` the
    documents evaluated (``None`` for a group); ``num_fewshot`` the examples shown in each prompt.
    """

    task: str
    metrics: dict[str, float]
    stderr: dict[str, float | None]
    examples: int | None
    num_fewshot: int | None
    higher_is_better: dict[str, bool]
    version: Any
    config: dict[str, Any]


def require_lm_eval() -> Any:
    """The ``lm_eval`` module; :class:`UsageError` naming the extra when it is not installed."""
    try:
        return importlib.import_module("lm_eval")
    except ImportError as err:
        raise UsageError(
            "lm-eval tasks need EleutherAI's lm-evaluation-harness (the lm_eval package), which "
            f"is not installed ({err}). Install the extra: {EXTRA}."
        ) from err


def register_lm_eval_model() -> type:
    """Register the ``gpt-models`` model type in lm_eval's registry and return its class.

    After this, ``lm_eval.simple_evaluate(model="gpt-models", model_args="run=RUN", tasks=[...])``
    evaluates a run folder (model args: ``run``, ``batch_size``, ``stride``, ``seed``,
    ``max_gen_toks``), through the memory pre-flight of ``gpt eval``.

    Raises:
        UsageError: lm_eval is not installed (the message names the extra).

    Example:
        >>> from lm_eval.api.registry import get_model
        >>> from gpt_models import register_lm_eval_model
        >>> register_lm_eval_model() is get_model("gpt-models")
        True
    """
    require_lm_eval()
    from .lm_eval_model import RunLM

    return RunLM


def task_names(text: str | Sequence[str]) -> list[str]:
    """``"a,b"`` (or a list of such strings) as task names, in order, each once.

    Raises:
        UsageError: no name at all, or an empty one (``"a,,b"``).
    """
    given = [text] if isinstance(text, str) else list(text)
    names = [n.strip() for part in given for n in part.split(",")]
    if not names or not all(names):
        raise UsageError(
            f"lm-eval tasks {','.join(given)!r}: expected task names separated by commas, e.g. "
            "hellaswag,arc_easy (an empty name is not a task)."
        )
    return list(dict.fromkeys(names))


def check_include_path(include_path: str | Path | None) -> Path | None:
    """``include_path`` as a folder that exists; :class:`DataError` otherwise."""
    if include_path is None:
        return None
    path = Path(include_path)
    if not path.is_dir():
        what = "is a file" if path.is_file() else "does not exist"
        raise DataError(
            f"--include-path {path}: it {what}, but it must be a folder of lm-eval task YAML "
            "files (each with `task: NAME`); the harness adds them to its own tasks. Pass an "
            "existing folder."
        )
    return path


def task_manager(names: Sequence[str], include_path: str | Path | None = None) -> Any:
    """lm_eval's ``TaskManager`` that knows every one of ``names``.

    Raises:
        UsageError: lm_eval is missing, or a name is neither a task, a group nor a tag of the
            harness (nor of a YAML under ``include_path``); the message lists near matches.
        DataError: ``include_path`` is not a folder.
    """
    folder = check_include_path(include_path)
    require_lm_eval()
    from lm_eval.tasks import TaskManager

    extra = None if folder is None else str(folder)
    if extra is not None:
        local = TaskManager(include_path=extra, include_defaults=False)
        if all(n in local.all_subtasks for n in names):
            return local
    manager = TaskManager(include_path=extra)
    known = set(manager.all_tasks)
    unknown = [n for n in names if n not in known]
    if unknown:
        where = "" if folder is None else f" and the task YAMLs under {folder}"
        lines = [f"{n!r} ({_near(n, manager.all_tasks)})" for n in unknown]
        raise UsageError(
            f"lm-eval does not know the task{'s' if len(unknown) > 1 else ''} "
            f"{'; '.join(lines)}. It looked in its "
            f"{len(known):,} tasks, groups and tags{where}; `lm-eval ls tasks` lists them. For "
            "a task of your own, put its YAML (`task: NAME`) in a folder and pass --include-path "
            "FOLDER."
        )
    return manager


def check_task_data(manager: Any, names: Sequence[str]) -> None:
    """Refuse, in seconds, tasks whose data sets are on the Hugging Face hub, not cached here,
    and cannot be downloaded (``HF_HUB_OFFLINE``/``HF_DATASETS_OFFLINE``, or the hub does not
    answer for them within 5 s); offline, ``datasets`` otherwise retries for minutes first.

    Raises:
        DataError: one line naming each such data set and its tasks, and the two fixes.
    """
    missing: dict[str, list[str]] = {}
    for task, path in _hub_datasets(manager, names).items():
        if not _cached(path):
            missing.setdefault(path, []).append(task)
    why = _unreachable(list(missing)) if missing else None
    if why is None:
        return
    shown = "; ".join(
        f"{path} (task {tasks[0]}{f' and {len(tasks) - 1} more' if len(tasks) > 1 else ''})"
        for path, tasks in list(missing.items())[:4]
    ) + (f"; and {len(missing) - 4} more data sets" if len(missing) > 4 else "")
    raise DataError(
        f"lm-eval needs data sets of the Hugging Face hub that are not in this machine's cache "
        f"({_datasets_cache()}) and cannot be downloaded ({why}): {shown}. Run once with network "
        "access (the data is then cached under HF_HOME), or copy the data here and write a task "
        "YAML over the local files (dataset_path: json, dataset_kwargs: {data_files: {test: "
        "FILE.jsonl}}), passed with --include-path."
    )


# `datasets` builders that read local files (data_files), not a data set of the hub.
_LOCAL_BUILDERS = ("json", "csv", "parquet", "text", "arrow", "pandas")


def _hub_datasets(manager: Any, names: Sequence[str]) -> dict[str, str]:
    """``{task: dataset_path}`` of the tasks ``names`` stand for (groups and tags expanded) whose
    data set is a hub name. Best effort over lm-eval's index: what it cannot read is left to
    lm-eval, which reports it as it loads."""
    index, seen = manager.task_index, set()
    found: dict[str, str] = {}
    todo: list[Any] = list(names)
    while todo:
        item = todo.pop(0)
        name = item.get("task") if isinstance(item, dict) else item
        entry = index.get(name) if isinstance(name, str) else None
        if entry is None or not isinstance(name, str) or name in seen:
            continue
        seen.add(name)
        cfg, kind = entry.cfg or {}, getattr(entry.kind, "name", "")
        if kind == "GROUP":
            todo += [t for t in cfg.get("task") or [] if isinstance(t, str | dict)]
        elif kind == "TAG":
            todo += [n for n, e in index.items() if name in (e.tags or ())]
        elif isinstance(path := cfg.get("dataset_path"), str) and _on_the_hub(path):
            found[name] = path
    return found


def _on_the_hub(path: str) -> bool:
    return path not in _LOCAL_BUILDERS and not Path(path).exists()


def _datasets_cache() -> Path:
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    return Path(os.environ.get("HF_DATASETS_CACHE") or home / "datasets")


def _cached(path: str) -> bool:
    """Whether ``datasets`` (``org___name``) or the hub's cache (``datasets--org--name``) holds a
    copy of the hub data set ``path``."""
    home = Path(os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface")
    hub = Path(os.environ.get("HF_HUB_CACHE") or home / "hub")
    return (_datasets_cache() / path.replace("/", "___")).is_dir() or (
        hub / f"datasets--{path.replace('/', '--')}"
    ).is_dir()


def _unreachable(paths: list[str]) -> str | None:
    """Why the hub cannot give the data sets ``paths`` (None: it answered for them)."""
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return f"{var} is set"
    endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    for path in paths[:3]:  # each asked once, 5 s at most
        url = f"{endpoint}/api/datasets/{path}"
        try:
            urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=5).close()
        except urllib.error.HTTPError as err:
            if err.code not in (401, 403):  # gated or private: the hub client's token decides
                return f"{url} answered {err.code} {err.reason}"
        except urllib.error.URLError as err:
            if not isinstance(err.reason, ssl.SSLError):  # TLS: the hub client's certificates
                return f"{endpoint} cannot be reached: {err.reason}"
        except (OSError, ValueError) as err:  # a timeout; a malformed HF_ENDPOINT
            return f"{endpoint} cannot be reached: {type(err).__name__}: {err}"
    return None


def _near(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.6)
    return f"near matches: {list_alternatives(close)}" if close else "no near match"


def evaluate_lm_eval(
    params: Any,
    config: Config,
    tasks: str | Sequence[str],
    *,
    include_path: str | Path | None = None,
    tokenizer: Tokenizer | None = None,
    batch_size: int = 8,
    stride: int | None = None,
    limit: int | None = None,
    seed: int = 0,
    stream: TextIO | None = None,
) -> list[HarnessScore]:
    """lm-evaluation-harness tasks on ``params``, with the ``gpt-models`` model type.

    Args:
        params: the model parameters (``load_run``).
        config: the run's config.
        tasks: task, group or tag names of the harness (``"a,b"`` or a list).
        include_path: a folder of task YAML files to add to the harness's own.
        tokenizer: the run's tokenizer (default bytes).
        batch_size: rows per model call.
        stride: tokens between the windows of rolling log-likelihoods (default
            ``model.seq_len // 2``, as ``gpt eval --text``).
        limit: evaluate at most this many documents of each task (lm-eval's ``limit``).
        seed: random seed of sampled generations (``do_sample``); the harness's own seeds
            (few-shot examples, its sampling of documents) keep lm-eval's defaults, so the
            numbers compare with other lm-eval runs.
        stream: where progress lines go (e.g. ``sys.stderr``); default none.

    Returns:
        One :class:`HarnessScore` per task and group, in lm-eval's order.

    Raises:
        UsageError: lm_eval is not installed, an unknown task, a bad ``batch_size``/``stride``.
        DataError: ``include_path`` is not a folder, a task's data set is on the hub and out of
            reach, a template of a task YAML fails, or a request that cannot be scored.

    Example:
        >>> import dataclasses, jax, json, tempfile, pathlib
        >>> from gpt_models import PRESETS, evaluate_lm_eval, init_params
        >>> tiny = PRESETS["tiny"]
        >>> cfg = dataclasses.replace(tiny, model=dataclasses.replace(
        ...     tiny.model, seq_len=16, d_model=32, n_layers=1, n_heads=2))
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> row = {"context": "The sky is", "choices": [" blue", " loud"], "label": 0}
        >>> _ = (folder / "sky.jsonl").write_text(json.dumps(row) + "\\n")
        >>> task = {  # a task YAML (JSON is YAML too) over that file
        ...     "task": "sky", "dataset_path": "json", "test_split": "test",
        ...     "dataset_kwargs": {"data_files": {"test": str(folder / "sky.jsonl")}},
        ...     "output_type": "multiple_choice", "doc_to_text": "{{context}}",
        ...     "doc_to_choice": "{{choices}}", "doc_to_target": "{{label}}",
        ...     "target_delimiter": ""}
        >>> _ = (folder / "sky.yaml").write_text(json.dumps(task))
        >>> params = init_params(cfg.model, jax.random.key(0))
        >>> (score,) = evaluate_lm_eval(params, cfg, "sky", include_path=folder)
        >>> score.task, score.examples, sorted(score.metrics)
        ('sky', 1, ['acc', 'acc_norm'])
    """
    names = task_names(tasks)
    options = {"tokenizer": tokenizer, "batch_size": batch_size, "stride": stride, "seed": seed}
    manager = task_manager(names, include_path)
    check_task_data(manager, names)
    return run_tasks(manager, names, params, config, limit=limit, stream=stream, **options)


def run_tasks(
    manager: Any,
    names: list[str],
    params: Any,
    config: Config,
    *,
    limit: int | None = None,
    stream: TextIO | None = None,
    **options: Any,
) -> list[HarnessScore]:
    """:func:`evaluate_lm_eval` with the task index already made (by :func:`task_manager`).

    ``options`` go to the model type (``tokenizer``, ``batch_size``, ``stride``, ``seed``).
    """
    from .lm_eval_model import LoadedRun

    loaded = LoadedRun(config, params, options.pop("tokenizer", None))
    model = register_lm_eval_model()(loaded=loaded, progress=stream, **options)
    try:
        raw = require_lm_eval().simple_evaluate(
            model=model, tasks=names, task_manager=manager, limit=limit, log_samples=False
        )
    except jinja2.TemplateError as err:  # a template of a task YAML: its 50-line traceback
        raise DataError(
            f"lm-eval could not write the prompts of {', '.join(names)}: a template of the task "
            f"YAML failed ({type(err).__name__}: {err}). Its templates (doc_to_text, "
            "doc_to_choice, doc_to_target) may name only fields the task's documents have, in "
            "valid Jinja; fix the YAML."
        ) from err
    except (ConnectionError, FileNotFoundError) as err:  # what `datasets` raises for its data
        raise DataError(
            f"lm-eval could not load the data of {', '.join(names)}: {err}. Built-in tasks "
            "download their data sets from the Hugging Face hub: run once with network access "
            "(they are cached under HF_HOME) and without HF_HUB_OFFLINE/HF_DATASETS_OFFLINE, or "
            "write a task YAML over local files (dataset_path: json, dataset_kwargs: "
            "{data_files: {test: FILE.jsonl}}) and pass its folder with --include-path."
        ) from err
    return [_score(task, raw) for task in raw["results"]]


def _score(task: str, raw: dict[str, Any]) -> HarnessScore:
    metrics: dict[str, float] = {}
    stderr: dict[str, float | None] = {}
    for key, value in raw["results"][task].items():
        metric, sep, filt = key.partition(",")
        if not sep:  # alias, name, sample_len: not measurements
            continue
        base = metric.removesuffix("_stderr")
        name = base if filt == "none" else f"{base},{filt}"
        if metric.endswith("_stderr"):
            stderr[name] = float(value) if isinstance(value, int | float) else None
        elif isinstance(value, int | float):
            metrics[name] = float(value)
    counts = raw.get("n-samples", {}).get(task)
    return HarnessScore(
        task=task,
        metrics=metrics,
        stderr={m: stderr.get(m) for m in metrics},
        examples=None if counts is None else int(counts["effective"]),
        num_fewshot=raw.get("n-shot", {}).get(task),
        higher_is_better=dict(raw.get("higher_is_better", {}).get(task, {})),
        version=raw.get("versions", {}).get(task),
        config=raw.get("configs", {}).get(task, {}),
    )


def save_harness_score(score: HarnessScore, run: str | Path, step: int) -> Path:
    """Write ``score`` as ``RUN/evals/lm-eval/<task>-<step>.json`` (atomically).

    Characters a file name cannot hold become ``_``; a name that changed that way gets a short
    hash of the real one, so two tasks never share a file (``a/b`` and ``a_b`` stay apart).
    """
    folder = Path(run) / "evals" / "lm-eval"
    folder.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in score.task).lstrip(".")
    if safe != score.task:
        safe = f"{safe or 'task'}-{hashlib.sha256(score.task.encode()).hexdigest()[:8]}"
    target = folder / f"{safe}-{step}.json"
    version = require_lm_eval().__version__
    record = dataclasses.asdict(score) | {"step": step, "lm_eval_version": version}
    # Task configs may hold what JSON cannot (a Python function named by `!function`): as text.
    write_json_atomic(target, json.loads(json.dumps(record, default=str)))
    return target
