"""LoRA adapters out: a PEFT adapter folder (``gpt export RUN OUT --adapter``).

The folder holds ``adapter_config.json`` (``peft_type`` LORA, ``r``, ``lora_alpha``, the
targeted modules by their transformers names) and ``adapter_model.safetensors``, whose tensors
are named as peft saves them: ``base_model.model.<module>.lora_A.weight`` ``(r, in)`` and
``...lora_B.weight`` ``(out, r)``, torch's layout of our ``lora_a`` ``(*in, r)`` and ``lora_b``
``(r, *out)``. ``peft.PeftModel.from_pretrained(base, OUT)`` loads it onto the base model
exported by ``gpt export`` (of the run the LoRA run started from).

The module of each adapted kernel comes from the family's layout (``_model/hf_layout.py``): the
HF tensor our kernel is written to. GPT-2 writes the query, key and value kernels into one fused
``c_attn``; their adapters are written exactly as one adapter of that module: ``lora_A`` stacks
the targeted ones' ``a`` (rank ``n * r`` for ``n`` of q, k, v targeted), ``lora_B`` places each
``b`` block-diagonally in its third of the output, and ``rank_pattern``/``alpha_pattern`` give
``c_attn`` that rank and ``n * alpha``, so its scale stays ``alpha / r``. (Only the LoRA dropout
differs while training with peft: one mask for the fused input instead of one per projection.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import jax
import numpy as np

import blox as bx

from .._config.lora import KERNELS
from .._config.schema import Config
from .._errors import UsageError
from .._model.hf_families import export_layout
from .._model.hf_layout import BLOCK, PREFIX, Entry, Layout
from .._model.lora import lora_config
from .folders import check_new_path
from .hf_export import _FIX, _to_numpy, write_folder
from .hf_folder import check_dtype
from .hf_import import imported_from
from .snapshot import committed_steps

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def export_adapter(
    config: Config,
    params: bx.Params,
    path: str | Path,
    *,
    dtype: str = "float32",
    notes: TextIO | None = None,
) -> Path:
    """Write the LoRA adapters of ``params`` as a PEFT adapter folder at ``path`` (new).

    ``config`` is the LoRA run's :class:`Config` (``lora.rank > 0``); its model must export as
    GPT-2 or Llama (``export_hf``). ``base_model_name_or_path`` is the Hugging Face folder the
    base weights came from (:func:`adapter_base`): the run's ``init.source`` when that is one, or
    the folder ``gpt import`` made that run folder from; else none, and ``notes`` gets a line
    saying why and what to load the adapters onto.

    Raises:
        UsageError: the config has no LoRA, or ``path`` exists or cannot be written.
        CheckpointFormatError: the model has no GPT-2 or Llama equivalent.
    """
    model = config.model
    lora = lora_config(model)
    if lora is None:
        raise UsageError(
            "gpt export --adapter writes LoRA adapters, but this run has none (lora.rank = 0: "
            "every weight was trained). Export the whole model without --adapter, or train "
            "adapters with --set lora.rank=8."
        )
    check_dtype(dtype)
    layout = export_layout(model)
    target = Path(path)
    check_new_path(target, what="OUT_DIR", fix=_FIX)
    prefix = "base_model.model." + layout.prefixes[0]
    tensors: dict[str, np.ndarray] = {}
    ranks: dict[str, int] = {}
    for module, kernels, entry in _modules(layout, model, lora.kernels(model.gated)):
        for i, (a, b) in enumerate(_layer_pairs(params, kernels, entry, lora.rank)):
            name = prefix + module.format(i=i)
            tensors[f"{name}.lora_A.weight"] = _to_numpy(a, dtype)
            tensors[f"{name}.lora_B.weight"] = _to_numpy(b, dtype)
        ranks[module] = a.shape[0]
    every = [
        e.hf[0].removesuffix(".weight")
        for e in layout.entries(model)
        if e.stacked and e.hf[0].endswith(".weight")
    ]
    base, why = adapter_base(config.init.source)
    files = {"adapter_config.json": _adapter_config(config, layout, lora, ranks, every, base)}
    written = write_folder(target, "adapter_model.safetensors", tensors, files)
    if notes is not None and base is None:
        print(
            f"note: {target}/adapter_config.json names no base_model_name_or_path: {why}. Load "
            "the adapters onto that run's export: gpt export BASE_RUN BASE_DIR, then "
            f"PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE_DIR), "
            f"{str(target)!r}).",
            file=notes,
        )
    return written


def adapter_base(source: str) -> tuple[str | None, str]:
    """``base_model_name_or_path`` of the adapters of a run started from ``source`` (its
    ``init.source``): the Hugging Face folder its weights are, or None and why there is none.

    A run folder counts when ``gpt import`` made it and it was not trained since (its one
    checkpoint is step 0): its weights are the folder's. peft (``AutoPeftModelForCausalLM``) loads
    the base from this name, which a run folder is not.

    Example:
        >>> adapter_base("")[0] is None, adapter_base("")[1][:40]
        (True, 'the run started from random weights (no ')
    """
    if not source:
        return None, (
            "the run started from random weights (no init.source), so no Hugging Face model is "
            "its base"
        )
    folder = Path(source)
    if (folder / "config.json").is_file():
        return source, ""
    origin = imported_from(folder)
    if origin is None:
        return None, (
            f"its base, init.source = {source}, is a run folder that gpt train made, not one "
            "imported from a Hugging Face folder"
        )
    if committed_steps(folder / "checkpoints") != [0]:
        return None, (
            f"its base, init.source = {source}, was imported from {origin} but has been trained "
            "since, so its weights are no longer that folder's"
        )
    return str(origin), ""


def _modules(layout: Layout, model: Any, kernels: tuple[str, ...]) -> list[tuple[str, list, Entry]]:
    """Each HF module an adapted kernel is written to (``{i}``: the layer), the kernels of ours
    it holds (their positions in the entry; ``None`` where not adapted), and its entry."""
    wanted = {(*BLOCK, *KERNELS[k]) for k in kernels}
    out = []
    for entry in layout.entries(model):
        hits = [ours if ours in wanted else None for ours in entry.ours]
        if any(hits):
            out.append((entry.hf[0].removesuffix(".weight"), hits, entry))
    return out


def _layer_pairs(
    params: bx.Params, kernels: list, entry: Entry, rank: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(lora_A, lora_B)`` of one module for each layer, in peft's layout, fused parts included.

    Each adapter is read from the device once (stacked over the layers), then sliced.
    """
    parts = [None if ours is None else _stacked(params, ours) for ours in kernels]
    layers = next(p[0].shape[0] for p in parts if p is not None)
    for i in range(layers):
        pairs = [
            None if p is None else (p[0][i].reshape(-1, rank).T, p[1][i].reshape(rank, -1).T)
            for p in parts
        ]  # (r, in) and (out, r) per part
        yield _fused(pairs, entry, rank)


def _stacked(params: bx.Params, ours: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The ``lora_a`` and ``lora_b`` (stacked over the layers) of our kernel at ``ours``."""
    # bx.LoRA names a Linear's adapters lora_a/lora_b, an attention kernel's query_lora_a, ...
    name, stem = ours[-1], (*PREFIX, *ours[:-1])
    own = "" if name == "kernel" else f"{name}_"
    read = lambda n: np.asarray(jax.device_get(params[(*stem, n)].value), np.float32)
    return read(f"{own}lora_a"), read(f"{own}lora_b")


def _fused(pairs: list, entry: Entry, rank: int) -> tuple[np.ndarray, np.ndarray]:
    """One module's ``(lora_A, lora_B)`` from its parts' (``None``: a part not adapted).

    A module of one kernel is its pair. A fused one (GPT-2's ``c_attn``): ``lora_A`` stacks the
    adapted parts' ``a``; ``lora_B`` puts each ``b`` in its part's rows of the output and its own
    columns of the rank, zero elsewhere, so ``B @ A`` is each part's ``b @ a`` in its place.
    """
    if len(pairs) == 1:
        return pairs[0]  # type: ignore[no-any-return]
    used = [i for i, pair in enumerate(pairs) if pair is not None]
    width = entry.shapes[0][-1] // len(pairs)  # c_attn is (D, 3D): D outputs per part
    a = np.concatenate([pairs[i][0] for i in used], axis=0)
    b = np.zeros((width * len(pairs), rank * len(used)), np.float32)
    for j, i in enumerate(used):
        b[i * width : (i + 1) * width, j * rank : (j + 1) * rank] = pairs[i][1]
    return a, b


def _adapter_config(
    config: Config,
    layout: Layout,
    lora: Any,
    ranks: dict[str, int],
    every: list[str],
    base: str | None,
) -> dict[str, Any]:
    """``adapter_config.json``: peft's LoraConfig fields; ``every`` module of a layer names them."""
    names = _short_names(every)
    fused = {names[m]: r for m, r in ranks.items() if r != lora.rank}
    alpha = lora.scale_alpha
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": lora.rank,
        "lora_alpha": alpha,
        "lora_dropout": lora.dropout,
        "target_modules": sorted(names[m] for m in ranks),
        "rank_pattern": fused,
        "alpha_pattern": {m: alpha * (r // lora.rank) for m, r in fused.items()},
        # GPT-2's Conv1D stores (in, out), transposed from nn.Linear: peft needs to be told.
        "fan_in_fan_out": layout.architecture == "GPT2LMHeadModel",
        "bias": "none",
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "modules_to_save": None,
        "layers_to_transform": None,
        "layers_pattern": None,
        "revision": None,
    }


def _short_names(modules: list[str]) -> dict[str, str]:
    """Each module's name as peft's ``target_modules`` matches it (a suffix after a dot): its last
    part, or its last two where another module of ``modules`` (all of a layer's) shares the last
    (GPT-2's ``attn.c_proj`` and ``mlp.c_proj``), so that no other module matches it.

    Example:
        >>> short = _short_names(["h.{i}.attn.c_proj", "h.{i}.mlp.c_proj", "h.{i}.attn.c_attn"])
        >>> list(short.values())
        ['attn.c_proj', 'mlp.c_proj', 'c_attn']
    """
    last = [m.rsplit(".", 1)[-1] for m in modules]
    return {
        m: ".".join(m.split(".")[-2:]) if last.count(name) > 1 else name
        for m, name in zip(modules, last, strict=True)
    }
