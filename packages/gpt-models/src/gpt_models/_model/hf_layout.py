"""What a Hugging Face model family is in this model's terms: the shared parts of a layout.

A family (``hf_gpt2.py``: ``GPT2LMHeadModel``; ``hf_llama.py``: ``LlamaForCausalLM``) is a
:class:`Layout` that knows its ``config.json`` both ways (read through a :class:`ConfigReader`, so
a value of the wrong type is named instead of failing later in a cast), the settings a model needs
to be exported as it, and its tensors: one :class:`Entry` per module of our model (embedding,
norms, attention, MLP), with the HF names, the HF shapes and the conversions of one layer.
:func:`layouts` lists the families; :func:`export_layout` picks the one a model exports as.
Reading and writing the folders themselves is ``_runs/hf_import.py`` and ``_runs/hf_export.py``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from .._config.schema import ModelConfig
from .._errors import CheckpointFormatError

PREFIX = ("gpt", "model")
BLOCK = ("blocks", "block")
_REQUIRED = object()


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
        return self._read(key, default, lambda v: isinstance(v, bool), "true or false")  # type: ignore[no-any-return]

    def text(self, key: str, default: str) -> str:
        """A string."""
        return self._read(key, default, lambda v: isinstance(v, str), "a string")  # type: ignore[no-any-return]

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
        needs: the model settings a model must have to be exported as this family.
        prefixes: prefixes a saved folder may put before the tensor names (first: what export writes).
        ignored: name endings of tensors transformers saves that hold no weights of ours.
    """

    architecture: str
    model_type: str
    name: str
    summary: str
    needs: ClassVar[dict[str, object]]
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
        """The settings ``m`` lacks to be exported as this family: its own, then those all share."""
        needs = {**self.needs, "qk_norm": False, "logit_softcap": 0.0}
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


def layouts() -> dict[str, Layout]:
    """The families by transformers class."""
    # Imported here, not at the top: the families subclass Layout, so they import this module.
    from .hf_gpt2 import GPT2
    from .hf_llama import LLAMA

    return {layout.architecture: layout for layout in (GPT2, LLAMA)}


def layout_of(raw: dict[str, Any], source: Path) -> Layout:
    """The family config.json names (``architectures``, else ``model_type``), or a refusal."""
    found = layouts()
    archs = raw.get("architectures")
    if isinstance(archs, list) and archs and isinstance(archs[0], str):
        arch: Any = archs[0]
    else:
        kind = raw.get("model_type")
        by_type = {layout.model_type: layout for layout in found.values()}
        if isinstance(kind, str) and kind in by_type:
            return by_type[kind]
        arch = archs if archs is not None else kind
    if arch not in found:
        raise CheckpointFormatError(
            f"{source}: architecture {arch!r} cannot be imported; supported: "
            f"{', '.join(found)} (config.json 'architectures')."
        )
    return found[arch]


def export_layout(m: ModelConfig) -> Layout:
    """The family ``m`` exports as, or a :class:`CheckpointFormatError` that names every
    ``--set`` flag a run needs to train an exportable model of each family."""
    found = list(layouts().values())
    lacks = {layout.architecture: layout.lacking(m) for layout in found}
    hints = [
        " ".join(f"--set model.{k}={str(v).lower()}" for k, v in lacks[layout.architecture].items())
        + f" ({layout.name})"
        for layout in found
    ]
    fix = (
        f"The architecture is fixed when a run starts: train one with {' or '.join(hints)}; "
        "this run stays readable by gpt sample and gpt eval."
    )
    for layout in found:
        if all(getattr(m, k) == v for k, v in layout.needs.items()):
            if lacks[layout.architecture]:
                key, value = next(iter(lacks[layout.architecture].items()))
                raise CheckpointFormatError(
                    f"model.{key} = {getattr(m, key)!r} has no {layout.architecture} equivalent; "
                    f"only models with model.{key} = {value!r} can be exported. {fix}"
                )
            return layout
    kinds = " nor ".join(f"{layout.name} ({layout.summary})" for layout in found)
    raise CheckpointFormatError(
        f"This model (model.norm = {m.norm!r}, pos = {m.pos!r}, mlp = {m.mlp!r}, tie_embeddings = "
        f"{m.tie_embeddings}, bias = {m.bias}) is neither {kinds}; only those two can be exported. "
        f"{fix}"
    )
