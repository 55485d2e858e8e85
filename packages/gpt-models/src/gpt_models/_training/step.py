"""The train state, the optimizer and the jitted train/eval steps (pure; the loop is in
``loop.py``).

Metrics are not returned by hand: the step calls ``lox.log`` where a value is computed (inside the
micro-batch scan too) and ``lox.spool`` turns those sites into a second output of the jitted step.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

import lox
import paramspec as ps
from core_primitives import keypath_to_path, pytree_dataclass

from .._config.schema import Config, TrainConfig
from .._distributed.mesh import (
    MESH_AXES,
    MICRO_BATCH_AXES,
    RULES,
    activation_constraint,
    batch_sharding,
    compiler_options,
    replicated,
)
from .._errors import ConfigError
from .._model.gpt import abstract_params, drops, init_params
from .._model.lora import is_adapter
from .._model.loss import is_packed, loss_weights, losses_and_stats, sums_of, with_aux
from .._model.preference import means
from .._runs.preference_run import needs_reference_weights
from .moe_metrics import moe_metrics
from .muon import make_muon
from .preference_step import preference_objective, total_pairs


@pytree_dataclass
class TrainState:
    """Everything a resumed run needs besides the config: params, optimizer state, step and RNG.

    ``params`` are all the model's weights; the optimizer state is kept for the trainable ones
    only (``params.split()``: with LoRA the adapters, the frozen base weights have none).

    ``rng`` is raw key data (``uint32[2]``) so that orbax can store it; the data position is the
    step
    itself, because batches are a pure function of ``(train.seed, step)``. Dropout keys are
    ``fold_in(fold_in(rng, step), micro_batch)`` (:func:`dropout_key`), so a resumed run draws
    the masks the uninterrupted one would have.
    """

    params: Any
    opt_state: Any
    step: Any
    rng: Any


def make_schedule(t: TrainConfig) -> optax.Schedule:
    """Linear warmup from 0 to ``lr`` over ``warmup_steps``, then cosine decay to ``lr *
    min_lr_ratio``.

    Example:
        >>> from gpt_models import TrainConfig
        >>> s = make_schedule(TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1))
        >>> [round(float(s(i)), 3) for i in (0, 5, 10, 100)]
        [0.0, 0.5, 1.0, 0.1]
    """
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=t.lr,
        warmup_steps=t.warmup_steps,
        decay_steps=t.steps,
        end_value=t.lr * t.min_lr_ratio,
    )


def _global_norm(tree: Any) -> jax.Array:
    # Written out: optax renamed its helper twice (global_norm -> tree_l2_norm -> tree_norm) within
    # the
    # versions we support, each rename with a DeprecationWarning.
    return jnp.sqrt(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree)))


def _decay_mask(params: Any) -> Any:
    # Weight decay on weight matrices only, chosen by logical axes (not by rank, which stacking
    # under "layers" changes): a matrix maps the residual stream ("embed") to or from another axis,
    # so the projections, the token and position embeddings and the output head are decayed, and
    # biases ((heads, head_dim) of a query bias included) and norm scales are not: decaying those
    # towards 0 fights the normalisation or shifts the activations. Params without logical axes
    # fall back to rank >= 2. LoRA adapters are matrices too (both factors): decaying them pulls
    # the learnt update a @ b towards zero, i.e. towards the frozen model, as decay pulls a fully
    # trained weight towards zero; train.weight_decay = 0 turns it off.
    def is_matrix(path: tuple[str, ...], p: Any) -> bool:
        if is_adapter(path):
            return True
        if not p.logical_axes:
            return len(p.shape) >= 2
        axes = [a for a in p.logical_axes if a != "layers"]
        return "embed" in axes and len(axes) >= 2

    flags = iter([is_matrix(path, p) for path, p in params.items()])
    return params.map(lambda _: next(flags))


def _adamw(t: TrainConfig) -> optax.GradientTransformation:
    return optax.adamw(
        make_schedule(t), b1=t.beta1, b2=t.beta2, weight_decay=t.weight_decay, mask=_decay_mask
    )


def _muon(t: TrainConfig) -> optax.GradientTransformation:
    return make_muon(make_schedule(t), b1=t.beta1, b2=t.beta2, weight_decay=t.weight_decay)


# train.optimizer -> builder; a new optimizer is one entry here and one in _config.CHOICES.
OPTIMIZERS = {"adamw": _adamw, "muon": _muon}


def make_optimizer(t: TrainConfig) -> optax.GradientTransformation:
    """Global-norm clipping, then ``train.optimizer`` with the warmup-cosine schedule.

    ``adamw``: AdamW, weight decay on matrices only. ``muon``: Muon on the hidden matrices and AdamW
    on embeddings and norms (see ``muon.py``).

    Raises:
        ConfigError: ``muon`` with an optax that lacks it (the message names the version needed).

    Example:
        >>> import jax
        >>> from gpt_models import PRESETS, init_params
        >>> cfg = PRESETS["tiny"]
        >>> params = init_params(cfg.model, jax.random.key(0))
        >>> opt = make_optimizer(cfg.train)
        >>> updates, _ = opt.update(params, opt.init(params), params)
        >>> updates.keys() == params.keys()
        True
    """
    return optax.chain(
        optax.clip_by_global_norm(t.grad_clip) if t.grad_clip > 0 else optax.identity(),
        OPTIMIZERS[t.optimizer](t),
    )


# ------------------------------------------------------------------------------------------------
# Shardings of the state


def _match_param_shardings(tree: Any, params: Any, param_shardings: Any, mesh: Mesh) -> Any:
    """Shardings for an optimizer state: a leaf whose path ends with a parameter's path (Adam's
    ``mu``/``nu`` mirror the params) and has its shape gets that parameter's sharding; scalars and
    anything else are replicated."""
    by_path = {}
    for (kp, p), s in zip(
        jax.tree_util.tree_leaves_with_path(params), jax.tree.leaves(param_shardings), strict=True
    ):
        by_path[keypath_to_path(kp)] = (p.shape, s)

    def pick(kp: Any, leaf: Any) -> Any:
        path = keypath_to_path(kp)
        for n in range(len(path)):
            hit = by_path.get(path[n:])
            if hit is not None and tuple(hit[0]) == tuple(leaf.shape):
                return hit[1]
        return replicated(mesh)

    return jax.tree_util.tree_map_with_path(pick, tree)


def abstract_state(cfg: Config, optimizer: optax.GradientTransformation, mesh: Mesh) -> TrainState:
    """``ShapeDtypeStruct`` s with shardings for the whole state: the orbax restore target.

    Example:
        >>> import jax
        >>> from gpt_models import PRESETS, MeshConfig, make_mesh
        >>> cfg = PRESETS["tiny"]
        >>> mesh = make_mesh(MeshConfig(data=-1), jax.devices()[:1])
        >>> state = abstract_state(cfg, make_optimizer(cfg.train), mesh)
        >>> state.step.shape, state.rng.dtype.name
        ((), 'uint32')
    """
    params = abstract_params(cfg, mesh)
    opt = jax.eval_shape(optimizer.init, params.split()[0])
    param_shardings = jax.tree.map(lambda a: a.sharding, params)
    opt_sh = _match_param_shardings(opt, params, param_shardings, mesh)
    opt = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), opt, opt_sh)
    rep = replicated(mesh)
    return TrainState(
        params=params,
        opt_state=opt,
        step=jax.ShapeDtypeStruct((), jnp.int32, sharding=rep),
        rng=jax.ShapeDtypeStruct((2,), jnp.uint32, sharding=rep),
    )


def sharded_state(cfg: Config, optimizer: optax.GradientTransformation, mesh: Mesh) -> TrainState:
    """:func:`abstract_state`, with a mesh that cannot shard the model refused as a config error
    (one line: the first parameter that does not divide, and meshes of as many devices that fit).
    A resumed run meets it here too, before its checkpoint is read: orbax restores into these
    shardings whatever mesh wrote it."""
    try:
        return abstract_state(cfg, optimizer, mesh)
    except ps.ShardingError as err:  # e.g. heads not divisible by mesh.tensor
        raise ConfigError(_unshardable(cfg, mesh, err)) from err


def _unshardable(cfg: Config, mesh: Mesh, err: ps.ShardingError) -> str:
    problems = [line[4:] for line in str(err).splitlines() if line.startswith("  - ")]
    first = (problems or [str(err)])[0].split(". ")[0]
    shape = ",".join(f"{axis}={size}" for axis, size in mesh.shape.items())
    fits = "; ".join(f"--mesh {f}" for f in _meshes_that_fit(cfg, mesh)) or "none"
    return (
        f"Impossible mesh for this model: --mesh {shape} cannot shard {len(problems) or 1} of its "
        f"parameters (first: {first}). Choose sizes that divide the sharded dimensions (heads, "
        f"kv_heads, mlp and vocab by mesh.tensor; d_model by mesh.fsdp); shapes that fit these "
        f"{mesh.devices.size} devices: {fits}."
    )


def _meshes_that_fit(cfg: Config, mesh: Mesh, most: int = 3) -> list[str]:
    n, devices = mesh.devices.size, list(mesh.devices.flat)
    shapes = [
        (n // (f * t), f, t)
        for t in range(1, n + 1)
        for f in range(1, n // t + 1)
        if n % (f * t) == 0
    ]
    want = mesh.shape
    shapes.sort(key=lambda s: (abs(s[2] - want["tensor"]), abs(s[1] - want["fsdp"])))
    fits = []
    for d, f, t in shapes:
        candidate = ps.make_mesh((d, f, t), MESH_AXES, devices=devices)
        try:
            abstract_params(cfg, candidate)
        except ps.ShardingError:
            continue
        fits.append(f"data={d},fsdp={f},tensor={t}")
        if len(fits) == most:
            break
    return fits


def to_items(state: TrainState) -> dict[str, Any]:
    """The state as checkpoint items: ``params`` alone, so it can be restored without the rest.

    Example:
        >>> sorted(to_items(TrainState(params=1, opt_state=2, step=3, rng=4))["train"])
        ['opt_state', 'rng', 'step']
    """
    rest = {"opt_state": state.opt_state, "step": state.step, "rng": state.rng}
    return {"params": state.params, "train": rest}


def from_items(items: dict[str, Any]) -> TrainState:
    """The inverse of :func:`to_items`.

    Example:
        >>> state = TrainState(params=1, opt_state=2, step=3, rng=4)
        >>> from_items(to_items(state)) == state
        True
    """
    return TrainState(params=items["params"], **items["train"])


def state_shardings(abstract: TrainState) -> TrainState:
    """The sharding of every leaf of an abstract (or concrete) state."""
    return jax.tree.map(lambda a: a.sharding, abstract)


def init_state(cfg: Config, optimizer: optax.GradientTransformation, mesh: Mesh) -> TrainState:
    """A fresh state, every array created directly in its sharded layout.

    Example:
        >>> import jax
        >>> from gpt_models import PRESETS, MeshConfig, make_mesh
        >>> cfg = PRESETS["tiny"]
        >>> mesh = make_mesh(MeshConfig(data=-1), jax.devices()[:1])
        >>> state = init_state(cfg, make_optimizer(cfg.train), mesh)
        >>> embedding = state.params["gpt", "model", "embed", "embedding"].value
        >>> int(state.step), embedding.sharding.mesh == mesh
        (0, True)
    """
    key = jax.random.key(cfg.train.seed)
    params = init_params(cfg, key, mesh, RULES)
    shardings = state_shardings(abstract_state(cfg, optimizer, mesh))
    opt_state = init_opt_state(optimizer, params, shardings)
    rep = replicated(mesh)
    step = jax.device_put(jnp.zeros((), jnp.int32), rep)
    rng = jax.device_put(jax.random.key_data(jax.random.fold_in(key, 1)), rep)
    return TrainState(params=params, opt_state=opt_state, step=step, rng=rng)


def init_opt_state(
    optimizer: optax.GradientTransformation, params: Any, shardings: TrainState
) -> Any:
    """The optimizer's fresh state for the trainable part of ``params``, placed by ``shardings``."""
    return jax.jit(optimizer.init, out_shardings=shardings.opt_state)(params.split()[0])


# ------------------------------------------------------------------------------------------------
# Steps


def dropout_key(rng: jax.Array, step: jax.Array, micro_batch: Any) -> jax.Array:
    """The dropout key of one micro-batch of one step: a function of the state's ``rng`` and step.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> rng = jax.random.key_data(jax.random.key(0))
        >>> a, b = dropout_key(rng, jnp.int32(3), 0), dropout_key(rng, jnp.int32(3), 0)
        >>> bool((jax.random.key_data(a) == jax.random.key_data(b)).all())
        True
    """
    key = jax.random.fold_in(jax.random.wrap_key_data(rng), step)
    return jax.random.fold_in(key, micro_batch)


def _loss_and_rows(
    params: Any,
    batch: jax.Array,
    *,
    config: Any,
    constrain: Any,
    rows: bool,
    micro_batches: int,
    dropout_key: jax.Array | None = None,
) -> tuple[jax.Array, Any]:
    """What is differentiated (the mean loss, plus a mixture of experts' load-balancing term),
    and ``(mean loss, each row's mean with rows (else None), the experts' stats)``."""
    losses, moe = losses_and_stats(params, batch, config, constrain, dropout_key=dropout_key)
    loss = losses.mean()
    return with_aux(loss, config, moe), (loss, losses.mean(axis=-1) if rows else None, moe)


def _packed_objective(
    params: Any,
    batch: Any,
    *,
    config: Any,
    constrain: Any,
    rows: bool,
    total: jax.Array,
    micro_batches: int,
    dropout_key: jax.Array | None = None,
) -> tuple[jax.Array, Any]:
    """This micro-batch's share of the global batch's masked loss (its sum over the global
    ``total`` weight: the shares' gradients add up to the whole loss's), with its sums; a
    mixture of experts adds its share of the load-balancing term (the mean over micro-batches)."""
    losses, moe = losses_and_stats(params, batch, config, constrain, dropout_key=dropout_key)
    sums, row_loss = sums_of(losses, batch)
    share = with_aux(sums["answers"] / total, config, moe, 1.0 / micro_batches)
    return share, (sums, row_loss if rows else None, moe)


def _ratio(num: jax.Array, den: jax.Array) -> jax.Array:
    return num / jnp.maximum(den, 1.0)  # nothing to count (no answer token): 0, not NaN


def train_step(
    state: TrainState,
    batch: Any,
    ref: Any = None,
    *,
    cfg: Config,
    optimizer: optax.GradientTransformation,
    constrain: Any,
) -> TrainState:
    """One optimizer step on ``batch: (grad_accum, micro_batch, seq_len + 1)``.

    ``batch`` is token ids, or a packed batch (a dict of such arrays: ``tokens``, ``mask``,
    ``segments``; the dataset of a chat or prompt/completion store): its loss is
    ``sum(loss * mask) / sum(mask)`` over the whole global batch, every micro-batch together.
    Gradients are taken with respect to the trainable params only (``params.split()``: with
    LoRA the adapters; the frozen weights get no gradient buffer and no optimizer update), and
    summed over the micro-batches by a ``lax.scan`` (memory of one micro-batch).
    With ``model.dropout > 0`` each micro-batch's loss drops with :func:`dropout_key`; at 0 the
    step draws no key (the computation is the one without dropout).
    A mixture of experts adds ``model.router_aux_loss_coef`` times its load-balancing loss
    (averaged over the micro-batches) to what is differentiated; ``loss`` stays the
    cross-entropy, and ``moe/aux_loss`` and the experts' token shares are logged beside it
    (:func:`moe_metrics`).
    Logs (through ``lox.log``): ``micro_loss`` per micro-batch; ``loss``, ``grad_norm`` and ``lr``
    once per step, with ``step=`` metadata; for a packed batch ``loss`` is the masked loss and
    ``loss/all_tokens`` the loss of every token of the examples (prompts too); for a mixture
    (``data.sources``) also ``row_loss``, each row's mean loss in the global batch's order,
    which the loop turns into ``loss/<source>``.

    A preference run (``[preference]``) takes a batch of packed pairs and, with its reference in
    a copy of the init weights, those weights as ``ref``; ``loss`` is the mean preference loss
    over the global batch's pairs, logged with TRL's reward metrics (``preference.py``).
    """
    rows_too = bool(cfg.data.sources)  # a mixture's per-source losses need each row's loss
    pref = cfg.preference.enabled
    packed = is_packed(batch) and not pref
    n = jax.tree.leaves(batch)[0].shape[0]
    options = {"config": cfg.model, "constrain": constrain, "rows": rows_too, "micro_batches": n}
    if packed:  # the global batch's weight: known before any forward pass (it is data)
        flat = jax.tree.map(lambda a: a.reshape(-1, a.shape[-1]), batch)
        options["total"] = jnp.maximum(jnp.sum(loss_weights(flat)[0]), 1.0)
    objective = functools.partial(_packed_objective if packed else _loss_and_rows, **options)
    if pref:
        options = {"cfg": cfg, "constrain": constrain, "total": total_pairs(batch), "ref": ref}
        objective = functools.partial(preference_objective, rows=rows_too, **options)
    trainable, frozen = state.params.split()
    grad_fn = jax.value_and_grad(
        lambda trainable, mb, key: objective(trainable.merge(frozen), mb, dropout_key=key),
        has_aux=True,
    )
    dropping = drops(cfg.model)

    def micro(acc: Any, mb_and_index: tuple[Any, Any]) -> tuple[Any, Any]:
        mb, index = mb_and_index
        key = dropout_key(state.rng, state.step, index) if dropping else None
        (_, aux), grads = grad_fn(trainable, mb, key)
        if packed:
            loss = _ratio(aux[0]["answers"], aux[0]["answer_tokens"])
        elif pref:
            loss = _ratio(aux[0]["loss"], aux[0]["pairs"])
        else:
            loss = aux[0]  # the cross-entropy, without the experts' balance term
        lox.log({"micro_loss": loss})
        return jax.tree.map(jnp.add, acc, grads), (loss, aux)

    zeros = jax.tree.map(jnp.zeros_like, trainable)
    if n == 1:  # no scan for the common case: one less loop for XLA to see through
        grads, (losses, aux) = micro(zeros, (jax.tree.map(lambda a: a[0], batch), 0))
        moe = aux[2]
    else:
        indices = jnp.arange(n) if dropping else None  # None: the scan without dropout's input
        grads, (losses, aux) = jax.lax.scan(micro, zeros, (batch, indices))
        moe = jax.tree.map(lambda a: a.mean(0), aux[2])  # over the micro-batches
    if packed or pref:  # each micro-batch's gradient was already its share of the whole
        sums, rows = jax.tree.map(jnp.sum, aux[0]), aux[1]
        loss = sums["loss" if pref else "answers"] / options["total"]
    else:
        grads = jax.tree.map(lambda g: g / n, grads)
        loss, rows = jnp.mean(losses), aux[1]
    updates, opt_state = optimizer.update(grads, state.opt_state, trainable)
    params = optax.apply_updates(trainable, updates).merge(frozen)
    lr = make_schedule(cfg.train)(state.step)
    metrics = {"loss": loss, "grad_norm": _global_norm(grads), "lr": lr}
    if packed:
        metrics["loss/all_tokens"] = _ratio(sums["all_tokens"], sums["example_tokens"])
    if pref:
        metrics |= {k: v for k, v in means(sums).items() if k != "loss"}
    if rows_too:  # in the global batch's row order: micro-batch by micro-batch
        metrics["row_loss"] = rows.reshape(-1)
    metrics |= moe_metrics(moe)
    lox.log(metrics, step=state.step)
    return TrainState(params=params, opt_state=opt_state, step=state.step + 1, rng=state.rng)


def compile_train_step(
    cfg: Config, optimizer: optax.GradientTransformation, mesh: Mesh, abstract: TrainState
) -> Any:
    """``step(state, batch) -> (state, logdict)``, jitted, the state donated and kept in place.

    Example:
        >>> import dataclasses, jax, jax.numpy as jnp
        >>> from gpt_models import PRESETS, MeshConfig, make_mesh
        >>> tiny = PRESETS["tiny"]
        >>> cfg = dataclasses.replace(
        ...     tiny, model=dataclasses.replace(tiny.model, seq_len=16, d_model=32, n_layers=1)
        ... )
        >>> mesh = make_mesh(MeshConfig(data=-1), jax.devices()[:1])
        >>> opt = make_optimizer(cfg.train)
        >>> step = compile_train_step(cfg, opt, mesh, abstract_state(cfg, opt, mesh))
        >>> batch = jnp.ones((1, 32, 17), jnp.int32)  # (grad_accum, batch_size, seq_len + 1)
        >>> state, logs = step(init_state(cfg, opt, mesh), batch)
        >>> int(state.step), "loss" in logs
        (1, True)
    """
    shardings = state_shardings(abstract)
    constrain, batch = activation_constraint(mesh), batch_sharding(mesh, MICRO_BATCH_AXES)
    fn = functools.partial(train_step, cfg=cfg, optimizer=optimizer, constrain=constrain)
    # A preference run with its reference in a copy of the init weights takes them as a third
    # argument, laid out as the params (not donated: every step reads them).
    ref = (shardings.params,) if needs_reference_weights(cfg) else ()
    return jax.jit(
        lox.spool(fn),
        in_shardings=(shardings, batch, *ref),
        out_shardings=(shardings, replicated(mesh)),
        donate_argnums=0,
        compiler_options=compiler_options(mesh),
    )
