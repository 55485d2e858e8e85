"""What a Hugging Face model family is in this model's terms: the shared parts of a layout.

A family (``hf_gpt2.py``: ``GPT2LMHeadModel``; ``hf_llama.py``: ``LlamaForCausalLM`` and the
layout the Llama-like families share; ``hf_dense.py``: Qwen2, Qwen3, Mistral, OLMo 2;
``hf_gemma.py``: Gemma 2 and 3) is a
:class:`Layout` that knows its ``config.json`` both ways (read through a :class:`ConfigReader`, so
a value of the wrong type is named instead of failing later in a cast), the settings a model needs
to be exported as it, and its tensors: one :class:`Entry` per module of our model (embedding,
norms, attention, MLP), with the HF names, the HF shapes and the conversions of one layer.
``hf_families.py`` lists the families and picks the one a folder imports as and a model exports
as; it imports this module and every family's, none of which imports it.
Reading and writing the folders themselves is ``_runs/hf_import.py`` and ``_runs/hf_export.py``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .._config.model import ModelConfig
from .._errors import CheckpointFormatError

PREFIX = ("gpt", "model")
BLOCK = ("blocks", "block")
_REQUIRED = object()
# The model options that only some families have, at the values a family without them needs.
FEATURES: dict[str, object] = {
    "qk_norm": False, "qk_norm_scope": "head", "logit_softcap": 0.0, "qkv_bias": False,
    "sliding_window": 0, "global_every": 0, "rope_local_theta": 0.0, "attn_softcap": 0.0,
    "attn_scalar": 0.0, "norm_placement": "pre", "norm_plus_one": False, "embed_scale": False,
    "n_experts": 0, "experts_per_token": 2, "moe_d_ff": 0, "moe_norm_topk": True,
    "rope_scaling": "none",
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Entry:
    """Some of our params and the HF tensors they are made of, for one layer when ``stacked``.

    ``ours`` are param paths under ``gpt/model``; ``hf`` the HF tensor names (``{i}`` = layer) and
    ``shapes`` their shapes, checked before any data is read. ``load(*hf_arrays)`` gives our
    arrays, ``save(*our_arrays)`` the HF ones. ``vocab_rows``: the HF tensor holds the real
    vocabulary and ours has this many rows (padded with zeros to a multiple of 64).
    """

    ours: tuple[tuple[str, ...], ...]
    hf: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    load: Callable[..., tuple[np.ndarray, ...]]
    save: Callable[..., tuple[np.ndarray, ...]]
    stacked: bool
    vocab_rows: int = 0


def _same(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    return arrays


def one(
    ours: tuple[str, ...],
    hf: str,
    shape: tuple[int, ...],
    load: Callable[[np.ndarray], np.ndarray] | None = None,
    save: Callable[[np.ndarray], np.ndarray] | None = None,
    *,
    stacked: bool = True,
    vocab_rows: int = 0,
) -> Entry:
    """An :class:`Entry` of one param made of one HF tensor (the usual case)."""
    return Entry(
        (ours,),
        (hf,),
        (shape,),
        (lambda a: (load(a),)) if load else _same,
        (lambda a: (save(a),)) if save else _same,
        stacked,
        vocab_rows,
    )


def padded_vocab(vocab: int) -> int:
    """A vocabulary rounded up to a multiple of 64 (the model pads it; ``vocab_real`` masks it)."""
    return -(-vocab // 64) * 64


class ConfigReader:
    """Typed reads of one ``config.json`` that collect every wrong value before refusing them."""

    def __init__(self, raw: dict[str, Any], source: Path, arch: str) -> None:
        self.raw, self.source, self.arch = raw, source, arch
        self.problems: list[str] = []

    def _read(self, key: str, default: Any, ok: Callable[[Any], bool], want: str) -> Any:
        value = self.raw.get(key)
        if value is None:
            if default is _REQUIRED:
                self.problems.append(f"{key} is missing (expected {want})")
                return None
            return default
        if not ok(value):
            self.problems.append(f"{key} = {json_text(value)} (expected {want})")
            return None
        return value

    def int(self, key: str, default: Any = _REQUIRED) -> int:
        """A positive integer (a JSON number without a fraction; ``true`` is not one)."""
        ok = lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0
        return self._read(key, default, ok, "a positive integer")  # type: ignore[no-any-return]

    def float(self, key: str, default: Any = _REQUIRED) -> float:
        """A positive number."""
        ok = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
        value = self._read(key, default, ok, "a positive number")
        return None if value is None else float(value)  # type: ignore[return-value]

    def flag(self, key: str, default: bool) -> bool:
        """``true`` or ``false``."""
        value: bool = self._read(key, default, lambda v: isinstance(v, bool), "true or false")
        return value

    def text(self, key: str, default: str) -> str:
        """A string."""
        value: str = self._read(key, default, lambda v: isinstance(v, str), "a string")
        return value

    def check(self) -> None:
        """Refuse the file if any read found a missing or mistyped value; name them all."""
        if self.problems:
            raise CheckpointFormatError(
                f"{self.source} cannot describe a {self.arch}: {'; '.join(self.problems)}. "
                "The file was edited or belongs to another model; re-save the model with "
                "save_pretrained or fix those values."
            )

    def refuse(self, key: str, value: Any, expected: str) -> None:
        """A valid value our model cannot reproduce exactly."""
        raise CheckpointFormatError(
            f"{self.source}: {key} = {value!r} is not supported (expected {expected}); gpt_models "
            "models cannot represent it exactly, so the import would not reproduce the model."
        )


def json_text(value: Any) -> str:
    """A config.json value as it reads in the file (``"big"``, ``true``), cut to 40 characters."""
    import json

    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Layout(abc.ABC):
    """One Hugging Face family. Subclasses set the class attributes and the four methods.

    Attributes:
        architecture: the transformers class (config.json ``architectures``).
        model_type: config.json ``model_type``.
        name: the family as people say it (``GPT-2``).
        summary: what makes a model this family, for messages.
        needs: the model settings a model must have to be exported as this family; the
            family options it does not name (:data:`FEATURES`) must be at their defaults,
            except those in ``free``.
        free: family options this family represents at any value (Mistral's sliding_window).
        prefixes: prefixes a saved folder may put before the tensor names (first: what export
            writes).
        ignored: name endings of tensors transformers saves that hold no weights of ours.
    """

    architecture: str
    model_type: str
    name: str
    summary: str
    needs: ClassVar[dict[str, object]]
    free: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ("",)
    ignored: tuple[str, ...] = ()

    @abc.abstractmethod
    def model_config(self, read: ConfigReader, dtype: str) -> ModelConfig:
        """The model section that reproduces this config.json (read with ``read``)."""

    @abc.abstractmethod
    def hf_config(self, m: ModelConfig, dtype: str) -> dict[str, Any]:
        """config.json of ``m`` (special-token ids are added by the export)."""

    @abc.abstractmethod
    def entries(self, m: ModelConfig) -> list[Entry]:
        """Every param of ``m`` and the HF tensors it is made of."""

    def lacking(self, m: ModelConfig) -> dict[str, object]:
        """The settings ``m`` lacks to be exported as this family: its own, then the family
        options it has no equivalent of, at their defaults."""
        unused = {k: v for k, v in FEATURES.items() if k not in self.free}
        moot = [] if m.qk_norm else ["qk_norm_scope"]
        if not m.sliding_window:  # no windowed layer: their pattern and RoPE base are moot
            moot += ["global_every", "rope_local_theta"]
        if not m.n_experts:  # no experts: how they would be picked is moot
            moot += ["experts_per_token", "moe_d_ff", "moe_norm_topk"]
        unused = {k: v for k, v in unused.items() if k not in moot}
        needs = {**self.needs, **{k: v for k, v in unused.items() if k not in self.needs}}
        return {k: v for k, v in needs.items() if getattr(m, k) != v}

    def expected(self, m: ModelConfig, prefix: str) -> dict[str, tuple[int, ...]]:
        """Every HF tensor name of a model ``m`` and its shape, in the folder's order."""
        out: dict[str, tuple[int, ...]] = {}
        for entry in self.entries(m):
            for i in range(m.n_layers if entry.stacked else 1):
                for name, shape in zip(entry.hf, entry.shapes, strict=True):
                    out[prefix + name.format(i=i)] = shape
        return out

    def skipped(self, name: str, m: ModelConfig) -> bool:
        """A tensor transformers saves that holds nothing of ours (buffers, a tied head)."""
        return name.endswith(self.ignored) or (m.tie_embeddings and name == "lm_head.weight")
