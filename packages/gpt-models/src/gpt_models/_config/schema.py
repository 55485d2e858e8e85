"""Config dataclasses, their checks and the presets.

A config is plain data (frozen dataclasses of ints, floats, bools and strings) so that it is
hashable
(a static argument of ``jax.jit``), round-trips through TOML, and every key can be set from the CLI.
A ``Config`` checks itself when it is built (``validate``), so every way of making one (a preset,
a TOML file, ``--set``, ``dataclasses.replace``) goes through the same checks, once. TOML and
``--set`` are ``toml.py``.

Each section's ``Attributes:`` list is also what ``gpt config show`` prints as the key's meaning:
one line per key, in the section's docstring.
"""

from __future__ import annotations

import dataclasses
import math

from core_primitives import did_you_mean, format_problems, list_alternatives

from .._errors import ConfigError
from .lora import LoRAConfig, lora_problems
from .model import ModelConfig, heads_divide, model_problems, with_lora
from .preference import LOSSES, PreferenceConfig, preference_problems
from .sources import DataSource, source_problems

# String-valued keys that only accept a few values: checked by validate(), for every config.
CHOICES: dict[str, tuple[str, ...]] = {
    "model.mlp": ("gelu", "relu2", "swiglu", "geglu"),
    "model.qk_norm_scope": ("head", "all"),
    "model.norm_placement": ("pre", "post", "sandwich"),
    "model.norm": ("rmsnorm", "layernorm"),
    "model.pos": ("rope", "learned"),
    "model.rope_scaling": ("none", "linear", "llama3"),
    "model.dtype": ("auto", "float32", "bfloat16", "float16"),
    "model.param_dtype": ("float32", "bfloat16"),
    "model.remat": ("none", "full", "dots"),
    "model.attention": ("auto", "blocked", "xla", "cudnn"),
    "train.optimizer": ("adamw", "muon"),
    "preference.loss": LOSSES,
    "data.kind": ("", "embedded", "text", "bin", "store", "mixture"),
    "log.wandb": ("disabled", "offline", "online"),
}
# data.tokenizer: one of these, or the path of a tokenizers JSON file (tokenizer_kind: "bpe").
BUILTIN_TOKENIZERS = ("byte", "bpe")


def tokenizer_kind(value: str) -> str:
    """``"byte"`` or ``"bpe"``: the kind of ``data.tokenizer`` (a tokenizer.json path is ``"bpe"``).

    Example:
        >>> tokenizer_kind("byte"), tokenizer_kind("hf/gpt2/tokenizer.json")
        ('byte', 'bpe')
    """
    return value if value in BUILTIN_TOKENIZERS else "bpe"


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation and bookkeeping.

    Attributes:
        steps: optimizer steps of the whole run.
        batch_size: sequences per optimizer step (global, over all devices and micro-batches).
        lr: peak learning rate, reached at the end of the warmup.
        min_lr_ratio: the cosine decay ends at lr * min_lr_ratio.
        warmup_steps: steps of linear warmup from 0 to lr (cut to 10% of the run if >= steps).
        weight_decay: AdamW/Muon decoupled weight decay, on weight matrices only.
        beta1: first-moment decay of Adam (momentum of Muon).
        beta2: second-moment decay of Adam.
        grad_clip: clip the gradient to this global norm (0 = off).
        grad_accum: micro-batches per step (batch_size must be divisible by it); saves memory.
        optimizer: adamw, or muon (Muon on hidden matrices, AdamW on the rest).
        eval_every: steps between validation-loss evaluations.
        eval_batches: validation batches per evaluation (always the same windows).
        checkpoint_every: steps between checkpoints (0 = only at the end).
        keep_checkpoints: how many newest checkpoints to keep.
        seed: seed of the initial parameters and of the batch order.
    """

    steps: int = 600
    batch_size: int = 32
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    grad_accum: int = 1
    optimizer: str = "adamw"
    eval_every: int = 200
    eval_batches: int = 8
    checkpoint_every: int = 200
    keep_checkpoints: int = 3
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """Where the tokens come from; the last ``val_fraction`` of them is the validation split.

    A folder holding nanoGPT's ``train.bin`` and ``val.bin`` uses those two files as the split; a
    token store (``gpt prepare --out DIR``) keeps the split ``gpt prepare`` made.

    Attributes:
        path: "" = the embedded corpus; else a text file, a folder of text, a nanoGPT .bin file
            (or a folder with train.bin and val.bin) or a token store made by gpt prepare; a run's
            config.toml records it as an absolute path.
        kind: what data.path holds, recorded when a run starts: embedded, text, bin, store, or
            mixture for data.sources ("" = find out); a resumed run whose data.path now holds
            another kind is refused.
        val_fraction: share of the tokens (the tail) held out for validation (not for a token
            store or train.bin/val.bin, which keep their own split).
        tokenizer: byte (UTF-8, 256 ids), bpe (trained on the train split) or the path of a
            tokenizers JSON file such as a Hugging Face model's tokenizer.json (GPT-2's, Llama's);
            the run folder keeps it as tokenizer.json; model.vocab_size follows the tokenizer.
        bpe_vocab_size: ids of the BPE tokenizer (with data.tokenizer = bpe), 257..65536.
        sources: a weighted mixture instead of data.path: [[data.sources]] tables with path and
            weight (> 0), optional name (of its metrics) and kind (recorded); each row of a batch
            comes from one source drawn by weight, and each source keeps its own validation split.
        seq_len: tokens of each training and validation window (a packed row holds this many
            plus one), 1..model.seq_len (0 = model.seq_len); a fine-tune trains at a shorter
            length than its base and keeps the base's positions for sampling and export.
    """

    path: str = ""
    kind: str = ""
    val_fraction: float = 0.1
    tokenizer: str = "byte"
    bpe_vocab_size: int = 2048
    sources: tuple[DataSource, ...] = ()
    seq_len: int = 0


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """Device mesh axes; ``-1`` on one axis means "all devices not used by the others".

    Attributes:
        data: data-parallel ways (the batch is split, parameters are replicated); -1 = the rest.
        fsdp: fully-sharded data-parallel ways (batch and parameters are split).
        tensor: tensor-parallel ways (heads, MLP and vocab are split).
    """

    data: int = -1
    fsdp: int = 1
    tensor: int = 1


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Console and metrics logging.

    Attributes:
        every: steps between console and metric updates.
        wandb: disabled, offline (files in the run folder) or online; needs gpt-models[wandb].
        wandb_project: the wandb project of the run.
        tensorboard: also write TensorBoard event files to the run's tensorboard/ folder;
            needs gpt-models[tensorboard].
        peak_flops: peak FLOP/s per device for MFU (0 = look the device kind up; no MFU on CPU).
    """

    every: int = 10
    wandb: str = "disabled"
    wandb_project: str = "gpt-models"
    tensorboard: bool = False
    peak_flops: float = 0.0


@dataclasses.dataclass(frozen=True)
class InitConfig:
    """The weights a run starts from (``gpt train --init-from``).

    Attributes:
        source: a run folder or a Hugging Face folder whose weights start this run (fresh
            optimizer, step 0; its architecture and tokenizer are kept); "" = random weights.
    """

    source: str = ""


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """What the periodic evaluation scores besides the validation loss (``train.eval_every``).

    Attributes:
        tasks: JSONL task files (comma-separated) scored at every evaluation, logged as
            eval/<task>/acc and acc_norm; formats as `gpt eval --task` ("" = none).
    """

    tasks: str = ""


@dataclasses.dataclass(frozen=True)
class SampleConfig:
    """The sample written to ``sample.txt`` at the end of training, and ``gpt sample``'s defaults.

    Attributes:
        prompt: text the sample continues.
        max_new_tokens: tokens to generate (capped by model.seq_len).
        temperature: sampling temperature (0 = greedy).
        top_k: sample among the k most likely tokens (0 = all).
        top_p: sample among the most likely tokens holding this probability (1 = all).
    """

    prompt: str = "The "
    max_new_tokens: int = 200
    temperature: float = 0.8
    top_k: int = 0
    top_p: float = 1.0


@dataclasses.dataclass(frozen=True)
class Config:
    """The whole config of a run; ``config.toml`` in a run folder is this, resolved.

    Building one checks that its values fit together and raises one ``ConfigError`` listing every
    problem, so a ``Config`` that exists is valid.

    Example:
        >>> import dataclasses
        >>> from gpt_models import PRESETS, ConfigError
        >>> cfg = PRESETS["tiny"]
        >>> cfg.model.vocab_size, cfg.data.path
        (256, '')
        >>> try:
        ...     dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, n_heads=3))
        ... except ConfigError as err:
        ...     print(err)
        Invalid config (1 problem):
          - model.d_model = 128 must be divisible by model.n_heads = 3
    """

    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    train: TrainConfig = TrainConfig()
    data: DataConfig = DataConfig()
    mesh: MeshConfig = MeshConfig()
    log: LogConfig = LogConfig()
    sample: SampleConfig = SampleConfig()
    init: InitConfig = InitConfig()
    eval: EvalConfig = EvalConfig()
    lora: LoRAConfig = dataclasses.field(default_factory=LoRAConfig)
    preference: PreferenceConfig = dataclasses.field(default_factory=PreferenceConfig)

    def __post_init__(self) -> None:
        # The LoRA settings folded into the model section (see LoRAModel): one value says which
        # model a run computes, wherever a model section travels alone.
        object.__setattr__(self, "model", with_lora(self.model, self.lora))
        validate(self)

    @property
    def window(self) -> int:
        """Tokens of a training or validation window: ``data.seq_len``, else ``model.seq_len``.

        Example:
            >>> import dataclasses
            >>> from gpt_models import PRESETS
            >>> tiny = PRESETS["tiny"]
            >>> short = dataclasses.replace(tiny.data, seq_len=64)
            >>> tiny.window, dataclasses.replace(tiny, data=short).window
            (128, 64)
        """
        return self.data.seq_len or self.model.seq_len


# ------------------------------------------------------------------------------------------------
# Checks


def validate(cfg: Config) -> Config:
    """Check that the values fit together; raise one ConfigError listing every problem.

    ``Config`` calls this when it is built; nothing else needs to.
    """
    m, t = cfg.model, cfg.train
    problems = [f"{k} = {v!r} must be > 0" for k, v in _positives(cfg).items() if not v > 0]
    problems += model_problems(m)
    if t.batch_size % max(t.grad_accum, 1):
        problems.append(
            f"train.batch_size = {t.batch_size} must be divisible by train.grad_accum = "
            f"{t.grad_accum}"
        )
    if not 0.0 < cfg.data.val_fraction < 1.0:
        problems.append(f"data.val_fraction = {cfg.data.val_fraction} must be between 0 and 1")
    if t.warmup_steps < 0:
        problems.append(f"train.warmup_steps = {t.warmup_steps} must be >= 0")
    if not 0 <= cfg.data.seq_len <= m.seq_len:
        problems.append(
            f"data.seq_len = {cfg.data.seq_len} must be in 0..model.seq_len = {m.seq_len}: a "
            "training window cannot be longer than the model's positions (0 = model.seq_len)"
        )
    if not 257 <= cfg.data.bpe_vocab_size <= 65536:
        problems.append(f"data.bpe_vocab_size = {cfg.data.bpe_vocab_size} must be in 257..65536")
    problems += _range_problems(cfg)
    s = cfg.sample
    problems += sampling_problems("sample.", s.max_new_tokens, s.temperature, s.top_k, s.top_p)
    if heads_divide(m):  # the LoRA checks read the heads' sizes
        problems += lora_problems(cfg)
    problems += source_problems(cfg.data.sources, cfg.data.path)
    problems += preference_problems(cfg)
    tok = cfg.data.tokenizer
    if tok not in BUILTIN_TOKENIZERS and not tok.endswith(".json"):
        problems.append(
            f"data.tokenizer = {tok!r} must be 'byte', 'bpe' or the path of a tokenizers JSON file "
            "(ending in .json, e.g. a Hugging Face model's tokenizer.json)."
            + did_you_mean(tok, BUILTIN_TOKENIZERS, n=1)
        )
    for key, values in CHOICES.items():
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value not in values:
            problems.append(
                f"{key} = {value!r} must be one of {list_alternatives(values)}."
                + did_you_mean(str(value), values, n=1)
            )
    if problems:
        raise ConfigError(format_problems("Invalid config", problems))
    return cfg


def _range_problems(cfg: Config) -> list[str]:
    # Values that build a config but train nonsense: an infinite lr runs and then diverges, a
    # beta of 1.5 runs to the end with an optimizer that amplifies instead of averaging.
    t, m = cfg.train, cfg.model
    problems = []
    if not (math.isfinite(t.lr) and t.lr > 0):  # one line for 0, < 0, inf and nan
        problems.append(f"train.lr = {t.lr} must be a finite number > 0, e.g. 3e-4")
    for key, value in (("train.beta1", t.beta1), ("train.beta2", t.beta2)):
        if not 0.0 <= value < 1.0:
            problems.append(f"{key} = {value} must be in [0, 1), e.g. 0.9 or 0.95")
    bounded = {"train.min_lr_ratio": (t.min_lr_ratio, 1.0)}
    for key, (value, top) in bounded.items():
        if not 0.0 <= value <= top:
            problems.append(f"{key} = {value} must be in [0, {top:g}]")
    at_least_zero = {
        "train.weight_decay": t.weight_decay,
        "train.grad_clip": t.grad_clip,
        "log.peak_flops": cfg.log.peak_flops,
        "train.checkpoint_every": t.checkpoint_every,
    }
    for key, value in at_least_zero.items():
        if not (math.isfinite(value) and value >= 0):
            problems.append(f"{key} = {value} must be a finite number >= 0")
    if not (math.isfinite(m.rope_theta) and m.rope_theta > 0):
        problems.append(f"model.rope_theta = {m.rope_theta} must be a finite number > 0")
    if not 0.0 <= m.dropout < 1.0:
        problems.append(
            f"model.dropout = {m.dropout} must be in [0, 1): the probability of zeroing an "
            "activation in training, e.g. 0.1 (0 = off; 1 would zero everything)"
        )
    elif m.dropout > 0 and m.attention in ("xla", "cudnn"):
        problems.append(
            f"model.dropout = {m.dropout} needs the blocked attention core, but model.attention "
            f"= {m.attention!r} runs jax.nn.dot_product_attention, which has no dropout. Fix: "
            "--set model.attention=auto (blocked while training, the backend's best otherwise) "
            "or --set model.attention=blocked, or --set model.dropout=0"
        )
    return problems


def sampling_problems(
    prefix: str, max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None
) -> list[str]:
    """What is wrong with sampling options (``[sample]`` or ``generate``'s arguments), if anything.

    A negative temperature would silently invert the distribution (the least likely token first),
    so it is refused rather than sampled from.

    Example:
        >>> sampling_problems("sample.", 10, -1.0, 0, 1.0)
        ['sample.temperature = -1.0 must be a finite number >= 0 (0 is greedy)']
    """
    problems = []
    if max_new_tokens < 0:
        problems.append(f"{prefix}max_new_tokens = {max_new_tokens} must be >= 0")
    if not (math.isfinite(temperature) and temperature >= 0):
        problems.append(
            f"{prefix}temperature = {temperature} must be a finite number >= 0 (0 is greedy)"
        )
    if top_k is not None and top_k < 0:
        problems.append(f"{prefix}top_k = {top_k} must be >= 0 (0 keeps every token)")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        problems.append(f"{prefix}top_p = {top_p} must be in (0, 1] (1 keeps every token)")
    return problems


def _positives(cfg: Config) -> dict[str, float]:
    m, t = cfg.model, cfg.train
    names: dict[str, float] = {
        "model.vocab_size": m.vocab_size,
        "model.seq_len": m.seq_len,
        "model.d_model": m.d_model,
        "model.n_layers": m.n_layers,
        "model.n_heads": m.n_heads,
        "train.steps": t.steps,
        "train.batch_size": t.batch_size,
        "train.grad_accum": t.grad_accum,
        "train.eval_batches": t.eval_batches,
        "train.keep_checkpoints": t.keep_checkpoints,
        "train.eval_every": t.eval_every,
        "log.every": cfg.log.every,
    }
    return names


def fit_warmup(cfg: Config) -> tuple[Config, str | None]:
    """``cfg`` with a warmup that fits in the run, and a one-line note when it had to be cut.

    A run shorter than its warmup (``--set train.steps=5`` on a preset with 30 warmup steps) would
    never reach its learning rate; such a warmup is cut to 10% of the run, the tiny preset's ratio.

    Example:
        >>> import dataclasses
        >>> from gpt_models import PRESETS
        >>> tiny = PRESETS["tiny"]
        >>> train = dataclasses.replace(tiny.train, steps=20)
        >>> cfg, note = fit_warmup(dataclasses.replace(tiny, train=train))
        >>> cfg.train.warmup_steps
        2
        >>> print(note)  # doctest: +NORMALIZE_WHITESPACE
        train.warmup_steps = 30 does not fit in train.steps = 20; this run warms up for 2 steps
        (10% of the run). Choose another with --set train.warmup_steps=N, N from 0 to 19.
    """
    t = cfg.train
    if t.warmup_steps < t.steps:
        return cfg, None
    warmup = t.steps // 10
    # Every suggestion is a value the config accepts: a 1-step run has only warmup 0.
    choose = (
        f"Choose another with --set train.warmup_steps=N, N from 0 to {t.steps - 1}."
        if t.steps > 1
        else "A 1-step run cannot warm up: --set train.warmup_steps=0 says so."
    )
    note = (
        f"train.warmup_steps = {t.warmup_steps} does not fit in train.steps = {t.steps}; this run "
        f"warms up for {warmup} steps (10% of the run). {choose}"
    )
    return dataclasses.replace(cfg, train=dataclasses.replace(t, warmup_steps=warmup)), note
