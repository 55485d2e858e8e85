"""Small configs and runs for the gpt tests (the environment is the root conftest's).

The fault-injection seams live here too, and only here: each fixture below that patches an internal
of gpt_models (``fail_train_step``, ``before_run_lock``, ``kill_prepare``) takes it from
``gpt_models.internal``, the one declared home of what tests may reach; each one that patches the
OS (``read_only_below``) patches it where every caller looks it up. Each says in its docstring
which one and why no public route reaches that moment, so the test files import public names only.
"""

import dataclasses
import errno
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpt_models import PRESETS, Config, main

# `gpt train` flags for the same small run as small_config(), with checkpoints at steps 3 and 6.
SMALL_ARGS = [
    "--set", "model.seq_len=32", "--set", "model.d_model=32", "--set", "model.n_layers=2",
    "--set", "model.n_heads=2", "--set", "train.steps=6", "--set", "train.batch_size=8",
    "--set", "train.warmup_steps=1", "--set", "train.eval_every=3", "--set", "train.eval_batches=2",
    "--set", "train.checkpoint_every=3", "--set", "sample.max_new_tokens=8", "--set", "mesh.data=-1",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _absl_log_level():
    """Each test starts with absl's log level as it found it.

    `gpt train` silences absl after a full disk (orbax's writers wind down while the process exits);
    called in-process by one test, that would hide orbax's log lines from every later test.
    """
    absl = logging.getLogger("absl")
    level = absl.level
    yield
    absl.setLevel(level)


def small_config(**sections) -> Config:
    """A model and run small enough to compile and train in seconds on a shared 2-core CPU.

    ``small_config(train={"steps": 20})`` changes keys of a section. Tests take it through the
    ``make_config`` fixture; test_train.py and test_muon.py still load it from this file by path.
    """
    base = PRESETS["tiny"]
    cfg = dataclasses.replace(
        base,
        model=dataclasses.replace(base.model, seq_len=32, d_model=32, n_layers=2, n_heads=2),
        train=dataclasses.replace(
            base.train,
            steps=6,
            batch_size=8,
            warmup_steps=1,
            eval_every=3,
            eval_batches=2,
            checkpoint_every=3,
            lr=3e-3,
        ),
        mesh=dataclasses.replace(base.mesh, data=1),
        sample=dataclasses.replace(base.sample, max_new_tokens=8),
    )
    for name, changes in sections.items():
        cfg = dataclasses.replace(cfg, **{name: dataclasses.replace(getattr(cfg, name), **changes)})
    return cfg


@pytest.fixture
def error_line():
    """``error_line(stderr)``: the one ``gpt: error: ...`` line a failed command ends with.

    Progress lines (the pre-flight's, say) may come before it; nothing may come after it.
    """

    def last(err: str) -> str:
        lines = err.strip().splitlines()
        assert lines and lines[-1].startswith("gpt: error: "), err
        assert sum(line.startswith("gpt: error:") for line in lines) == 1, err
        return lines[-1]

    return last


@pytest.fixture
def small() -> Config:
    return small_config()


@pytest.fixture
def make_config():
    """``make_config(train={...}, mesh={...})``: the small config with some keys changed."""
    return small_config


@pytest.fixture
def gpt_train(tmp_path):
    """``gpt_train(*flags)``: ``gpt train`` of the small run into ``tmp_path/run``; the exit status."""

    def run(*flags: str) -> int:
        return main(["train", "--out", str(tmp_path), "--name", "run", *SMALL_ARGS, *flags])

    return run


@pytest.fixture(scope="session")
def small_args() -> tuple[str, ...]:
    """The ``--set`` flags of the small run, for ``gpt train`` calls that choose their own folder."""
    return tuple(SMALL_ARGS)


@pytest.fixture(scope="session")
def tiny_llama_folder(tmp_path_factory) -> Path:
    """A tiny Llama-shaped Hugging Face folder with random weights (no training), for runs that
    must start from a model (``--init-from``): preference tuning's tests. Window 32, byte ids."""
    import jax

    from gpt_models import export_hf, init_params

    shape = {"seq_len": 32, "d_model": 32, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1,
             "d_ff": 64, "vocab_size": 256}  # fmt: skip
    model = dataclasses.replace(PRESETS["llama-tiny"].model, **shape)
    folder = tmp_path_factory.mktemp("tiny-llama") / "hf"
    return export_hf(model, init_params(model, jax.random.key(3)), folder)


@pytest.fixture(scope="session")
def sharded_mesh() -> tuple[dict[str, int], list]:
    """`mesh` config sizes over up to 8 devices (tensor, then fsdp, then data get 2) and those devices.

    8 fake CPU devices (the default) give data=fsdp=tensor=2; 4 TPU chips 1 x 2 x 2; 2 GPUs 1 x 1 x 2.
    """
    import jax

    n = jax.device_count()
    sizes = {"data": 2 if n >= 8 else 1, "fsdp": 2 if n >= 4 else 1, "tensor": 2 if n >= 2 else 1}
    used = sizes["data"] * sizes["fsdp"] * sizes["tensor"]
    return sizes, jax.devices()[:used]


@pytest.fixture
def fail_train_step(monkeypatch):
    """``fail_train_step(err, at_call=1)``: the next ``train`` runs the real compiled step, but its
    ``at_call``-th call (and any later one) raises ``err`` instead.

    Patches ``plan_step`` in ``gpt_models.internal.training_plans``, the pre-flight that compiles the
    step ``train`` then runs, so that the plan's step is wrapped (in a function named ``crashing``:
    a logged traceback shows it). XLA running out of memory mid-step, a full disk under a write and
    a device failing at a chosen step cannot be caused on demand; tests of how ``train`` reports
    them (typed errors, exit codes, the run's errors.log) need them at an exact step. Calling it
    again replaces the earlier failure.
    """
    from gpt_models.internal import training_plans as plans  # the seam (see above)

    real = plans.plan_step

    def arm(err: BaseException, at_call: int = 1) -> None:
        def plan_then_fail(*args, **kwargs):
            plan = real(*args, **kwargs)
            step, calls = plan.compiled, []

            def crashing(*a):
                calls.append(1)
                if len(calls) >= at_call:
                    raise err
                return step(*a)

            plan.compiled = crashing
            return plan

        monkeypatch.setattr(plans, "plan_step", plan_then_fail)

    return arm


@pytest.fixture
def before_run_lock(monkeypatch):
    """``before_run_lock(fn)``: the next ``train`` calls ``fn(run_folder)`` just before it takes the
    run's lock, after it has created the run folder and before it writes anything in it.

    Patches ``run_lock`` in ``gpt_models.internal.training_loop`` (the lock ``train`` holds while it
    runs). A test that plants something in the run folder ``train`` itself creates (a link where
    errors.log goes) has no other moment to do it: before ``train`` the folder does not exist, after
    it is too late.
    """
    from gpt_models.internal import training_loop as loop  # the seam (see above)

    real = loop.run_lock

    def arm(fn) -> None:
        def call_then_lock(folder, **kwargs):
            fn(folder)
            return real(folder, **kwargs)

        monkeypatch.setattr(loop, "run_lock", call_then_lock)

    return arm


@pytest.fixture
def kill_prepare(monkeypatch):
    """``kill_prepare(n)``: the next ``prepare`` reads its input in chunks of about 400 bytes of text
    and raises ``KeyboardInterrupt`` at its ``n``-th JSON write; ``kill_prepare(None)`` lets the
    writes through again (the chunks stay small until the test ends).

    Patches two names in ``gpt_models.internal.data_prepare``: ``_CHUNK_BYTES`` (text per chunk, ~2
    MB, so a test-sized file would be one chunk) and ``write_json_atomic`` (its resume state is
    written after each chunk's ids, its manifest last). A test that ``prepare`` resumes after a kill
    -9 needs to stop it between a chunk's ids and that chunk's state, which no timed signal can hit.
    """
    from gpt_models.internal import data_prepare as prep  # the seam (see above)

    real = prep.write_json_atomic

    def arm(at_write: int | None) -> None:
        if at_write is None:
            monkeypatch.setattr(prep, "write_json_atomic", real)
            return
        monkeypatch.setattr(prep, "_CHUNK_BYTES", 400)
        calls = []

        def dies(path, obj):  # like kill -9 after a chunk's ids are written, before its state
            calls.append(path)
            if len(calls) == at_write:
                raise KeyboardInterrupt
            real(path, obj)

        monkeypatch.setattr(prep, "write_json_atomic", dies)

    return arm


@pytest.fixture
def read_only_below(monkeypatch):
    """``read_only_below(folder)``: making a folder below ``folder`` fails with ``EROFS``, as on a
    read-only mount.

    Patches ``os.mkdir`` (where every new folder of ``gpt import``/``gpt export`` starts): a test
    cannot mount a read-only file system, and as root ``chmod 0555`` stops nothing.
    """
    real = os.mkdir

    def read_only(folder: Path) -> None:
        def mkdir(path, *args, **kwargs):
            if Path(path).is_relative_to(folder):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, "mkdir", mkdir)

    return read_only


# A ChatML-style chat template (BOS, <|im_start|>role\n content <|im_end|>\n) and a Llama-2-style
# one (a system prompt folded into the first [INST], roles checked with raise_exception, EOS after
# each answer), written here; with `trim_blocks` and `lstrip_blocks` their block tags leave no
# whitespace behind.
CHATML_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}\n"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] | trim + '<|im_end|>\\n' }}"
    "{% endfor %}\n"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
INST_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}\n"
    "  {% set system = messages[0]['content'] %}{% set turns = messages[1:] %}\n"
    "{% else %}\n"
    "  {% set system = '' %}{% set turns = messages %}\n"
    "{% endif %}\n"
    "{% for message in turns %}\n"
    "  {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "    {{ raise_exception('Conversation roles must alternate user/assistant/user/...') }}\n"
    "  {% endif %}\n"
    "  {% if message['role'] == 'user' %}\n"
    "{{ bos_token + '[INST] ' + (system + ' | ' if loop.first and system else '') + "
    "message['content'] + ' [/INST]' }}{% else %}\n"
    "{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}\n"
    "{% endfor %}"
)
CHAT_SPECIALS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
CHAT_WORDS = [
    "user", "assistant", "system", "hi", "hello", "there", "how", "are", "you", "fine", "thanks",
    "bye", "what", "is", "two", "plus", "four", "be", "brief", "[INST]", "[/INST]", "|", "!", "?",
    ".", ",",
]  # fmt: skip
CHAT_VOCAB = {w: i for i, w in enumerate([*CHAT_SPECIALS, "\n", " ", *CHAT_WORDS])}


def _write_chat_tokenizer(folder: Path, template: str | None) -> Path:
    """A word-level ``tokenizer.json`` in ``folder`` with ``template`` in its tokenizer_config.json
    (see ``chat_tokenizer``)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(CHAT_VOCAB, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(
        Regex(r"\[/?INST\]|\w+|\s|[^\w\s]"), behavior="isolated"
    )
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(CHAT_SPECIALS)
    folder.mkdir(parents=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
              "eos_token": {"__type": "AddedToken", "content": "</s>", "special": True},
              "unk_token": "<unk>"}  # fmt: skip
    if template is not None:
        config["chat_template"] = template
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder / "tokenizer.json"


@pytest.fixture
def chat_tokenizer(tmp_path):
    """``chat_tokenizer(template, name="tok")``: the path of a hand-made ``tokenizer.json`` with a
    ``tokenizer_config.json`` beside it holding ``template`` (None: no chat template; the
    templates above are ``chat_tokenizer.CHATML`` and ``chat_tokenizer.INST``).

    The tokenizer is word-level, so test ids can be written by hand (``chat_tokenizer.vocab``):
    ids 0-4 are ``<unk>``, ``<s>``, ``</s>``, ``<|im_start|>``, ``<|im_end|>`` (special), 5 is
    ``"\\n"``, 6 is ``" "``, then :data:`CHAT_WORDS` in order. Spaces and newlines are tokens of
    their own.
    """

    def make(template: str | None, name: str = "tok") -> Path:
        return _write_chat_tokenizer(tmp_path / name, template)

    make.CHATML, make.INST, make.vocab = CHATML_TEMPLATE, INST_TEMPLATE, CHAT_VOCAB  # type: ignore[attr-defined]
    return make


# Conversations in the words of the chat tokenizer (no <unk>), for a run trained on chat data.
CHAT_RUN_CHATS = [
    [{"role": "user", "content": "what is two plus two ?"}, {"role": "assistant", "content": "four !"}],
    [{"role": "user", "content": "how are you ?"}, {"role": "assistant", "content": "fine , thanks !"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
     {"role": "assistant", "content": "hello there !"}],
] * 20  # fmt: skip


@pytest.fixture(scope="module")
def chat_run(tmp_path_factory) -> SimpleNamespace:
    """A small Llama-shaped run trained on chat data (shared by a test module: copy it before
    changing it).

    ``chat_run.run`` is the run folder, ``.store`` the chat store it trained on (prepared with
    ``.tokenizer``, the chat tokenizer with the ChatML template), ``.wrap(text)`` the text of
    ``text`` as one user turn and the assistant's header in that template.
    """
    root = tmp_path_factory.mktemp("chat-run")
    tokenizer = _write_chat_tokenizer(root / "tok", CHATML_TEMPLATE)
    jsonl = root / "chats.jsonl"
    jsonl.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CHAT_RUN_CHATS))
    store = root / "store"
    assert main(["prepare", str(jsonl), "--out", str(store), "--tokenizer", str(tokenizer),
                 "--val-fraction", "0.2"]) == 0  # fmt: skip
    assert main(["train", "--out", str(root), "--name", "run", *SMALL_ARGS,
                 "--set", f"data.path={store}", "--set", "data.tokenizer=bpe",
                 # Llama-shaped, so that gpt export can write it
                 "--set", "model.mlp=swiglu", "--set", "model.qk_norm=false"]) == 0  # fmt: skip

    def wrap(text: str) -> str:
        return f"<s><|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"

    return SimpleNamespace(run=root / "run", store=store, tokenizer=tokenizer, wrap=wrap)
