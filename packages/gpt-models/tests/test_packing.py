"""Packed rows: several short examples in one row score exactly as each does alone.

Batches are built by hand here in the form of the dataset of a chat or prompt/completion store:
a dict of ``(B, T + 1)`` arrays ``tokens``, ``mask`` (1 at answer tokens, 0 at padding and at
the first token of each example) and ``segments`` (1, 2, ... per example, 0 at padding).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpt_models import (
    PRESETS,
    MeshConfig,
    abstract_state,
    compile_eval_step,
    compile_train_step,
    forward,
    init_params,
    init_state,
    loss_fn,
    make_mesh,
    make_optimizer,
)

SEQ = 24  # tokens per row are SEQ + 1
BASE = dataclasses.replace(
    PRESETS["tiny"].model, seq_len=SEQ, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2
)
# Example lengths per row (each row sums to at most SEQ + 1; the rest is padding).
LAYOUT = [[7, 9, 5], [12, 4], [25]]


def examples(seed=0):
    """One ``(tokens, mask)`` pair per example of LAYOUT, in order: a prompt, then an answer."""
    rng = np.random.default_rng(seed)
    out = []
    for n in (n for row in LAYOUT for n in row):
        tokens = rng.integers(1, 256, n)
        mask = np.zeros(n, np.uint8)
        mask[rng.integers(1, n) :] = 1  # the answer: a tail of at least one token
        out.append((tokens, mask))
    return out


def pack(exs, layout=LAYOUT):
    """``exs`` packed into rows of SEQ + 1 tokens as the contract lays them out."""
    rows = len(layout)
    batch = {
        "tokens": np.zeros((rows, SEQ + 1), np.int32),
        "mask": np.zeros((rows, SEQ + 1), np.uint8),
        "segments": np.zeros((rows, SEQ + 1), np.int32),
    }
    it = iter(exs)
    for r, row in enumerate(layout):
        at = 0
        for s, n in enumerate(row, start=1):
            tokens, mask = next(it)
            batch["tokens"][r, at : at + n] = tokens
            batch["mask"][r, at : at + n] = mask
            batch["mask"][r, at] = 0  # the first token is predicted from no earlier one
            batch["segments"][r, at : at + n] = s
            at += n
    return batch


def alone(params, cfg, tokens, mask):
    """The example's summed masked loss and its weight, from the plain model on it alone."""
    logits = np.asarray(forward(params, jnp.asarray(tokens[None, :-1]), cfg)[0], np.float64)
    logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
    losses = logz - logits[np.arange(len(tokens) - 1), tokens[1:]]
    w = mask[1:].astype(np.float64)
    return float((losses * w).sum()), float(w.sum())


def only(batch, row, segment):
    """``batch`` with the mask kept only on one example: the loss of that example, packed."""
    keep = batch["segments"] == segment
    keep[np.arange(len(keep)) != row] = False
    return {**batch, "mask": batch["mask"] * keep}


def _config(pos, attention):
    if attention == "cudnn" and jax.default_backend() != "gpu":
        pytest.skip("cudnn is NVIDIA's fused attention kernel: it runs on a GPU only")
    dtype = "bfloat16" if attention == "cudnn" else "float32"  # cudnn takes 16-bit inputs only
    return dataclasses.replace(BASE, pos=pos, attention=attention, dtype=dtype)


@pytest.mark.parametrize("attention", ["xla", "blocked", "cudnn"])
@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_a_packed_batch_scores_each_example_as_it_scores_alone(pos, attention):
    cfg = _config(pos, attention)
    params = init_params(cfg, jax.random.key(0))
    exs = examples()
    batch = pack(exs)
    tol = 2e-2 if cfg.dtype == "bfloat16" else 1e-5
    sums, weights, it = [], [], iter(exs)
    for r, row in enumerate(LAYOUT):
        for s in range(1, len(row) + 1):
            total, w = alone(params, cfg, *next(it))
            packed = float(loss_fn(params, only(batch, r, s), cfg))
            assert packed == pytest.approx(total / w, rel=tol, abs=tol), (r, s)
            sums.append(total)
            weights.append(w)
    whole = float(loss_fn(params, batch, cfg))
    assert whole == pytest.approx(sum(sums) / sum(weights), rel=tol, abs=tol)


def test_the_gradient_of_a_packed_loss_is_the_examples_gradients_summed():
    cfg = _config("rope", "xla")
    params = init_params(cfg, jax.random.key(0))
    exs = examples(seed=1)
    grad = jax.jit(jax.grad(loss_fn), static_argnames="config")
    packed = grad(params, pack(exs), cfg)
    total = sum(float(m[1:].sum()) for _, m in exs)
    parts = []
    for ex in exs:  # each alone in a row of its own (one shape: one compile)
        share = float(ex[1][1:].sum()) / total  # the example's answer tokens' share of all
        parts.append(
            jax.tree.map(
                lambda x, share=share: x * share, grad(params, pack([ex], [[len(ex[0])]]), cfg)
            )
        )
    summed = jax.tree.map(lambda *xs: sum(xs), *parts)
    for path, value in packed.items():
        np.testing.assert_allclose(
            np.asarray(value.value), np.asarray(summed[path].value), rtol=1e-4, atol=1e-6,
            err_msg=str(path),
        )  # fmt: skip


@pytest.mark.parametrize("pos", ["rope", "learned"])
def test_an_all_ones_mask_with_one_example_per_row_is_the_plain_loss(pos):
    cfg = dataclasses.replace(BASE, pos=pos)
    params = init_params(cfg, jax.random.key(0))
    tokens = np.asarray(jax.random.randint(jax.random.key(3), (3, SEQ + 1), 0, 256), np.int32)
    batch = {"tokens": tokens, "mask": np.ones_like(tokens, np.uint8),
             "segments": np.ones_like(tokens)}  # fmt: skip
    assert float(loss_fn(params, batch, cfg)) == pytest.approx(
        float(loss_fn(params, tokens, cfg)), rel=1e-6
    )


def test_a_packed_batch_with_a_wrong_key_is_refused_by_name():
    params = init_params(BASE, jax.random.key(0))
    batch = pack(examples())
    batch["loss_mask"] = batch.pop("mask")
    with pytest.raises(ValueError) as err:
        loss_fn(params, batch, BASE)
    assert str(err.value).startswith(
        "A packed batch is a dict of three (B, T + 1) arrays, 'tokens': token ids (padding 0); "
        "'mask': 1 where the token is a target the loss counts; 'segments': 1, 2, ... per "
        "example in the row, 0 for padding; got the keys ['loss_mask', 'segments', 'tokens'] "
        "(missing ['mask'], unknown ['loss_mask'])."
    )


def test_a_packed_batch_of_mismatched_shapes_is_refused_with_them():
    params = init_params(BASE, jax.random.key(0))
    batch = pack(examples())
    batch["mask"] = batch["mask"][:, :-1]
    with pytest.raises(ValueError, match=r"must share one \(B, T \+ 1\) shape, got \{'tokens': "
                       r"\(3, 25\), 'mask': \(3, 24\), 'segments': \(3, 25\)\}"):  # fmt: skip
        loss_fn(params, batch, BASE)


def test_a_packed_batch_of_floats_is_refused_with_the_dtypes():
    params = init_params(BASE, jax.random.key(0))
    batch = pack(examples())
    batch["mask"] = batch["mask"].astype(np.float32)
    with pytest.raises(ValueError, match=r"must be integers .* got the dtypes \{'tokens': "
                       r"'int32', 'mask': 'float32', 'segments': 'int32'\}"):  # fmt: skip
        loss_fn(params, batch, BASE)


def _micro(batch, n):
    """``batch`` as ``n`` micro-batches: ``(n, rows / n, SEQ + 1)`` per key."""
    return {k: v.reshape(n, -1, v.shape[-1]) for k, v in batch.items()}


def test_the_train_step_averages_the_mask_over_the_whole_batch_not_per_micro_batch():
    tiny = PRESETS["tiny"]
    cfg = dataclasses.replace(
        tiny, model=BASE, train=dataclasses.replace(tiny.train, batch_size=4, grad_accum=2)
    )
    mesh = make_mesh(MeshConfig(data=-1), jax.devices()[:1])
    opt = make_optimizer(cfg.train)
    step = compile_train_step(cfg, opt, mesh, abstract_state(cfg, opt, mesh))
    state = init_state(cfg, opt, mesh)
    params = jax.tree.map(jnp.copy, state.params)  # the step donates the state
    # Two micro-batches with very different numbers of answer tokens.
    exs = examples(seed=2)
    batch = pack(exs + exs[:2], [*LAYOUT, [7, 9]])
    batch["mask"][:2, :] = batch["mask"][:2, :] * (np.arange(SEQ + 1) % 5 == 0)
    whole = float(loss_fn(params, batch, cfg.model))
    halves = [float(loss_fn(params, {k: v[i : i + 2] for k, v in batch.items()}, cfg.model))
              for i in (0, 2)]  # fmt: skip
    assert abs(np.mean(halves) - whole) > 1e-3  # the test tells the two apart
    _, logs = step(state, _micro(batch, 2))
    assert float(logs["loss"][-1]) == pytest.approx(whole, rel=1e-5)
    assert [float(x) for x in logs["micro_loss"]] == pytest.approx(halves, rel=1e-5)
    answers_everywhere = {**batch, "mask": (batch["segments"] > 0).astype(np.uint8)}
    for r in range(4):  # every target inside an example: not the first token of any
        starts = np.flatnonzero(np.diff(batch["segments"][r], prepend=-1) != 0)
        answers_everywhere["mask"][r, starts] = 0
    plain = float(loss_fn(params, answers_everywhere, cfg.model))
    assert float(logs["loss/all_tokens"][-1]) == pytest.approx(plain, rel=1e-5)


def test_the_eval_step_returns_the_sums_of_a_packed_batch():
    tiny = PRESETS["tiny"]
    cfg = dataclasses.replace(tiny, model=BASE)
    mesh = make_mesh(MeshConfig(data=-1), jax.devices()[:1])
    params = init_params(BASE, jax.random.key(0), mesh)
    batch = pack(examples())
    sums = compile_eval_step(cfg, mesh, params)(params, batch)
    ratio = float(sums["answers"]) / float(sums["answer_tokens"])
    assert ratio == pytest.approx(float(loss_fn(params, batch, BASE)), rel=1e-5)
    assert float(sums["answer_tokens"]) == float(batch["mask"][:, 1:].sum())
