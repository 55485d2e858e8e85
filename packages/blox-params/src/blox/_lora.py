"""``LoRA``: low-rank adapters beside the kernels of ``Linear``, ``MLP`` and ``MultiHeadAttention``.

A ``LoRA`` is configuration, like an initializer: layers built with ``lora=`` read two more
parameters next to each kernel it targets and add their low-rank product to the output. The
adapters live in ``Params`` like every other weight, so freezing, splitting, sharding, saving
and merging them are operations on ``Params``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from core_primitives import format_path

from ._checks import static_flag
from ._dense import dense
from ._dropout import _is_rate
from ._dtypes import promote
from ._errors import RngError
from ._module import Module
from ._params import Params
from ._rng import Rng

Path = tuple[str, ...]
Targets = Callable[[Path], bool]

# The adapters of a kernel named "kernel" (Linear's) are "lora_a"/"lora_b"; those of a kernel
# with a name of its own ("query") carry it, like its bias does ("query_lora_a", "query_bias").
_A, _B = "lora_a", "lora_b"


def adapter_names(kernel: str) -> tuple[str, str]:
    """The parameter names of the adapters of the kernel parameter named ``kernel``."""
    prefix = "" if kernel == "kernel" else f"{kernel}_"
    return prefix + _A, prefix + _B


def _kernel_name(adapter_a: str) -> str | None:
    """The kernel an ``*lora_a`` parameter adapts (the inverse of ``adapter_names``)."""
    if adapter_a == _A:
        return "kernel"
    if adapter_a.endswith("_" + _A) and len(adapter_a) > len(_A) + 1:
        return adapter_a[: -len(_A) - 1]
    return None


class LoRA:
    """Low-rank adapters (LoRA) for the kernels of the layers built with ``lora=`` this object.

    A targeted kernel ``W`` (``Linear``'s ``kernel``, ``MultiHeadAttention``'s ``query``,
    ``key``, ``value``, ``out``; every ``Linear`` of an ``MLP``) gets two parameters next to it,
    ``lora_a`` ``(in, rank)`` and ``lora_b`` ``(rank, out)`` (``query_lora_a``,
    ``query_lora_b``, ... for the attention kernels), and the layer computes
    ``x @ W + (alpha / rank) * dropout(x) @ lora_a @ lora_b``. ``lora_b`` starts at zero, so a
    freshly adapted layer equals its base; ``lora_a`` starts uniform in ``±1/sqrt(in)``. A
    kernel with several input or output axes (attention's ``(D, heads, head_dim)``) keeps them:
    ``lora_a`` is ``(*in, rank)`` and ``lora_b`` ``(rank, *out)``. Adapters inherit the
    kernel's ``logical_axes`` (the rank axis replicated), so paramspec shards them too.

    Targeting by name: ``targets(path) -> bool`` is asked with each kernel's parameter path,
    e.g. ``('net', 'block', 'attn', 'query')`` or ``('net', 'mlp', 'linear_0', 'kernel')``;
    ``None`` adapts every kernel of the layers given this ``LoRA``.

    For PEFT: ``rank`` is ``r`` and ``alpha`` is ``lora_alpha`` (scaling ``alpha / rank``, not
    rsLoRA); peft stores ``<module>.lora_A.weight`` ``(r, in)`` and ``<module>.lora_B.weight``
    ``(out, r)`` in torch layout, which are ``lora_a.reshape(-1, rank).T`` and
    ``lora_b.reshape(rank, -1).T``.

    Args:
        rank: the adapters' inner size ``r``, a positive int no larger than a targeted kernel's
            input or output size (checked at the first call).
        alpha: the scaling numerator, a number > 0; the LoRA path is scaled by
            ``alpha / rank``. Default ``rank`` (scale 1).
        dropout: the probability of zeroing each input feature on the LoRA path (only), in
            ``[0, 1)``, in calls with ``is_training=True``. Needs an ``Rng`` (``rng``, else
            the layer's); each such call draws one key per adapted kernel.
        targets: which kernels to adapt, by parameter path (see above).
        rng: draws the ``lora_a`` init keys and dropout keys; default the layer's ``rng``
            (one of the two is required).

    Raises:
        ValueError: ``rank``, ``alpha`` or ``dropout`` out of range.
        TypeError: ``targets`` is not callable or ``rng`` is not an ``Rng``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> import blox as bx
        >>> graph = bx.Graph('net')
        >>> rng = bx.Rng(graph / 'rng')
        >>> lora = bx.LoRA(rank=2, alpha=4.0)
        >>> lin = bx.Linear(graph / 'lin', 8, rng=rng, lora=lora)
        >>> y, params = lin(rng.seed(bx.Params(), seed=0), jnp.ones((3, 5)))
        >>> params[('net', 'lin', 'lora_a')].shape, params[('net', 'lin', 'lora_b')].shape
        ((5, 2), (2, 8))
        >>> trainable, rest = lora.freeze_base(params).split()
        >>> sorted(p[-1] for p in trainable)
        ['lora_a', 'lora_b']
    """

    def __init__(
        self,
        rank: int,
        *,
        alpha: float | None = None,
        dropout: float = 0.0,
        targets: Targets | None = None,
        rng: Rng | None = None,
    ) -> None:
        if isinstance(rank, bool) or not hasattr(rank, "__index__") or int(rank) <= 0:
            raise ValueError(
                f"LoRA: rank must be a positive int, got {rank!r}. It is the adapters' inner "
                "size; 4 to 64 are common, e.g. bx.LoRA(rank=8, alpha=16)."
            )
        self.rank = int(rank)
        self.alpha = float(self.rank) if alpha is None else _positive_number(alpha)
        if isinstance(dropout, (bool, str)) or not _is_rate(dropout):
            raise ValueError(
                f"LoRA: dropout must be in [0, 1), got {dropout!r}. It is the probability of "
                "zeroing an input feature on the LoRA path; 0 turns it off."
            )
        self.dropout = float(dropout)
        if targets is not None and not callable(targets):
            raise TypeError(
                f"LoRA: targets must be a predicate on a kernel's parameter path or None (every "
                f"kernel), got {targets!r:.60} ({type(targets).__name__}). Example: "
                "targets=lambda path: path[-1] in ('query', 'value')."
            )
        self.targets = targets
        if rng is not None and not isinstance(rng, Rng):
            raise TypeError(
                f"LoRA: rng must be a bx.Rng (or None: the layer's), got {type(rng).__name__}."
            )
        self.rng = rng

    @property
    def scale(self) -> float:
        """``alpha / rank``, the factor of the LoRA path."""
        return self.alpha / self.rank

    def __repr__(self) -> str:
        return (
            f"LoRA(rank={self.rank}, alpha={self.alpha}, dropout={self.dropout}, "
            f"targets={'all' if self.targets is None else self.targets!r})"
        )

    def adapts(self, path: Path) -> bool:
        """Whether this ``LoRA`` adapts the kernel at parameter path ``path``."""
        return self.targets is None or bool(self.targets(path))

    def adapters(self, params: Params) -> dict[Path, tuple[Path, Path]]:
        """Each adapted kernel's path -> the paths of its ``(lora_a, lora_b)``, in ``params``.

        Only kernels this ``LoRA`` targets and whose two adapters are both present count.
        """
        found = {}
        for path in params:
            kernel = _kernel_name(path[-1])
            if kernel is None:
                continue
            kernel_path = (*path[:-1], kernel)
            b = (*path[:-1], adapter_names(kernel)[1])
            if kernel_path in params and b in params and self.adapts(kernel_path):
                found[kernel_path] = (path, b)
        return found

    def freeze_base(self, params: Params) -> Params:
        """``params`` with everything but this ``LoRA``'s adapters marked ``trainable=False``.

        Then ``params.split()`` gives the adapters as the trainable part, so an optimizer
        built on it keeps state for the adapters only. State that was not trainable (RNG
        counters, caches, batch statistics) stays as it is.
        """
        adapters = {p for pair in self.adapters(params).values() for p in pair}
        frozen = {
            path: param.replace(trainable=False)
            for path, param in params.items()
            if param.trainable and path not in adapters
        }
        return params.merge(Params(frozen)) if frozen else params

    def merge(self, params: Params) -> Params:
        """``params`` with each adapted kernel replaced by ``W + (alpha / rank) * a @ b``.

        The adapters are removed, so the result is a plain model's params: run it through the
        same model built without ``lora=``, and it gives the adapted model's outputs (without
        LoRA dropout). Each kernel keeps its dtype, flags and metadata; stacked kernels (in a
        ``Repeat``) merge copy by copy.
        """
        adapters = self.adapters(params)
        updates = {}
        for kernel_path, (a_path, b_path) in adapters.items():
            kernel = params[kernel_path]
            a, b = params[a_path].value, params[b_path].value
            delta = _product(a, b, kernel.shape)
            merged = (kernel.value.astype(jnp.float32) + self.scale * delta).astype(kernel.dtype)
            updates[kernel_path] = kernel.replace(value=merged)
        dropped = {p for pair in adapters.values() for p in pair}
        kept, _ = params.split(lambda path, _: path not in dropped)
        return kept.merge(Params(updates)) if updates else kept


def _product(a: jax.Array, b: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """``a @ b`` in float32 as a kernel of ``shape``, per copy for stacked adapters.

    ``a`` is ``(*lead, *in, rank)`` and ``b`` ``(*lead, rank, *out)``, where ``lead`` are the
    axes a ``Repeat`` stacks in front (none outside one).
    """
    lead = shape[: a.ndim + b.ndim - len(shape) - 2]
    copies = math.prod(lead)
    a = a.astype(jnp.float32).reshape(copies, -1, a.shape[-1])
    b = b.astype(jnp.float32).reshape(copies, b.shape[len(lead)], -1)
    return (a @ b).reshape(shape)


def _positive_number(alpha: Any) -> float:
    try:
        value = float(alpha) if not isinstance(alpha, (bool, str)) else math.nan
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"LoRA: alpha must be a finite number > 0, got {alpha!r}. The LoRA path is scaled "
            "by alpha / rank; alpha = rank (the default) scales it by 1."
        )
    return value


def check_lora(lora: Any, module: Module) -> LoRA | None:
    """``lora`` if it is ``None`` or a ``LoRA`` usable by ``module``; refused by name otherwise."""
    if lora is None:
        return None
    if not isinstance(lora, LoRA):
        raise TypeError(
            f"{module.name}: lora= takes a bx.LoRA (or None), got {type(lora).__name__} "
            f"({lora!r:.60}). Example: lora=bx.LoRA(rank=8, alpha=16)."
        )
    if lora.rng is None and getattr(module, "rng", None) is None:
        why = "lora_a starts random" + (
            f", dropout={lora.dropout} draws masks" if lora.dropout else ""
        )
        raise RngError(
            f"{module.name}: its LoRA needs an Rng ({why}), but neither the layer nor the LoRA "
            "has one. Pass one to the layer (rng=rng) or to the LoRA: bx.LoRA(rank, ..., rng=rng)."
        )
    return lora


def lora_delta(
    lora: LoRA | None,
    module: Any,
    params: Params,
    kernel: str,
    x: jax.Array,
    in_axes: int,
    out_shape: tuple[int, ...],
    is_training: bool | None,
) -> tuple[jax.Array | None, Params]:
    """The LoRA path ``scale * dropout(x) @ a @ b`` of ``module``'s kernel ``kernel``.

    ``None`` when ``lora`` is ``None`` or does not target this kernel. ``x`` is
    ``(..., *in)`` with ``in_axes`` input axes; ``out_shape`` the kernel's output axes.
    """
    kernel_path = (*module.path, kernel)
    if lora is None or not lora.adapts(kernel_path):
        return None, params
    in_shape = tuple(x.shape[x.ndim - in_axes :])
    _check_rank(lora, module, kernel_path, in_shape, out_shape)
    a, params = _adapter(lora, module, params, kernel, 0, (*in_shape, lora.rank), in_axes)
    b, params = _adapter(lora, module, params, kernel, 1, (lora.rank, *out_shape), in_axes)
    x, params = _dropped(lora, module, params, x, is_training)
    x, a, b = promote(module.dtype, x, a, b)
    h = dense(x, a, in_axes=in_axes)  # (..., rank)
    return dense(h, b) * jnp.asarray(lora.scale, h.dtype), params


def _check_rank(
    lora: LoRA, module: Any, path: Path, in_shape: tuple[int, ...], out_shape: tuple[int, ...]
) -> None:
    fan_in, fan_out = math.prod(in_shape), math.prod(out_shape)
    if lora.rank > min(fan_in, fan_out):
        raise ValueError(
            f"{module.name}: LoRA rank {lora.rank} is larger than the kernel {format_path(path)} "
            f"allows: it maps {fan_in} input to {fan_out} output features, so the rank must be "
            f"at most min({fan_in}, {fan_out}) = {min(fan_in, fan_out)} (a larger rank adds "
            "parameters without adding expressiveness). Lower rank, or leave this kernel out "
            "with targets=."
        )


def _adapter(
    lora: LoRA, module: Any, params: Params, kernel: str, which: int, shape: Any, in_axes: int
) -> tuple[jax.Array, Params]:
    """``lora_a`` (``which=0``) or ``lora_b`` (``1``) of ``kernel``, created on first use."""
    base = params.get((*module.path, kernel))
    axes = None if base is None else base.logical_axes
    meta = None
    if axes is not None:  # the rank axis replicated, the others as the kernel's
        # Inside a Repeat the kernel is one copy of a stack whose axes lead with the layer axis:
        # the copy's own axes are the trailing ones.
        axes = axes[len(axes) - len(base.shape) :]
        meta = {"logical_axes": (*axes[:in_axes], None) if which == 0 else (None, *axes[in_axes:])}
    init = (
        jax.nn.initializers.variance_scaling(
            1 / 3, "fan_in", "uniform", in_axis=tuple(range(in_axes)), out_axis=-1
        )  # uniform in ±1/sqrt(fan_in), PEFT's default for lora_A
        if which == 0
        else jax.nn.initializers.zeros
    )
    name = adapter_names(kernel)[which]
    return module.get_param(
        params, name, shape, init, module.param_dtype, metadata=meta, rng=lora.rng
    )


def _dropped(
    lora: LoRA, module: Any, params: Params, x: jax.Array, is_training: bool | None
) -> tuple[jax.Array, Params]:
    """``x`` with LoRA dropout applied when the call trains."""
    if lora.dropout == 0.0:
        return x, params
    if is_training is None:
        raise TypeError(
            f"{module.name} has a LoRA with dropout={lora.dropout}, so its call needs "
            "is_training=True (training: drops) or False (evaluation: does not)."
        )
    if not static_flag(is_training, "is_training", module):
        return x, params
    rng = lora.rng if lora.rng is not None else module.rng
    key, params = rng(params)
    keep = jax.random.bernoulli(key, 1.0 - lora.dropout, x.shape)
    return jnp.where(keep, x / (1.0 - lora.dropout), 0.0).astype(x.dtype), params
