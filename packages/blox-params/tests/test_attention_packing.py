"""Packed rows: segment_ids keep examples apart and RoPE positions restart in each of them.

A row that packs several examples must give each example the output (and the loss) it gets
alone, in every attention core.
"""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import blox as bx

D, VOCAB = 16, 11
CPU_CORES = ("blocked", "xla")
# Two rows of 8 tokens: examples of 3 and 5 tokens, and of 2, 2 and 4.
LAYOUT = [[3, 5], [2, 2, 4]]


def segment_ids(layout):
    return jnp.array([np.repeat(np.arange(len(row)), row) for row in layout], jnp.int32)


def split(packed, layout):
    """The examples of a packed ``(rows, T, ...)`` array, each ``(1, length, ...)``."""
    pieces = []
    for r, row in enumerate(layout):
        starts = np.cumsum([0, *row])
        pieces += [packed[r : r + 1, a:b] for a, b in itertools.pairwise(starts)]
    return pieces


def layer(implementation, heads=(4, 2), **kw):
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mha = bx.MultiHeadAttention(
        graph / "attn", num_heads=heads[0], head_dim=8, rng=rng, num_kv_heads=heads[1],
        use_rope=True, implementation=implementation, causal_block=3, **kw,
    )  # fmt: skip
    _, params = mha(rng.seed(bx.Params(), seed=0), jnp.ones((1, 2, D)))
    return mha, params.locked()


def packed_vs_separate(implementation, layout, causal=True, heads=(4, 2), **kw):
    """The largest difference between each example's packed output and its output alone."""
    mha, params = layer(implementation, heads, **kw)
    T = sum(layout[0])
    x = jax.random.normal(jax.random.key(1), (len(layout), T, D))
    run = jax.jit(lambda x, ids=None: mha(params, x, causal=causal, segment_ids=ids)[0])
    packed = run(x, segment_ids(layout))
    alone = [run(ex) for ex in split(x, layout)]
    return max(float(jnp.max(jnp.abs(p - a))) for p, a in zip(split(packed, layout), alone))


@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (4, 1)], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("implementation", CPU_CORES)
def test_packed_examples_equal_each_example_alone(implementation, heads):
    assert packed_vs_separate(implementation, LAYOUT, True, heads) <= 1e-5


@pytest.mark.parametrize("implementation", CPU_CORES)
def test_packed_examples_stay_apart_without_causal_masking(implementation):
    assert packed_vs_separate(implementation, LAYOUT, causal=False) <= 1e-5


@pytest.mark.parametrize("implementation", CPU_CORES)
def test_packing_holds_with_qk_norm_and_biases(implementation):
    assert packed_vs_separate(implementation, LAYOUT, qk_norm=True, use_bias=True) <= 1e-5


def test_packed_rows_do_not_see_other_examples():
    # Without segment ids the second example would attend to the first: the check above can fail.
    mha, params = layer("blocked")
    x = jax.random.normal(jax.random.key(1), (1, 8, D))
    unpacked, _ = mha(params, x, causal=True)
    alone, _ = mha(params, x[:, 3:], causal=True)
    assert float(jnp.max(jnp.abs(unpacked[:, 3:] - alone))) > 1e-2


def test_positions_restart_in_each_segment_by_default():
    mha, params = layer("blocked")
    x = jax.random.normal(jax.random.key(1), (2, 8, D))
    ids = segment_ids(LAYOUT)
    restarted = jnp.array([[0, 1, 2, 0, 1, 2, 3, 4], [0, 1, 0, 1, 0, 1, 2, 3]])
    y, _ = mha(params, x, causal=True, segment_ids=ids)
    y_explicit, _ = mha(params, x, causal=True, segment_ids=ids, positions=restarted)
    y_spread, _ = mha(params, x, causal=True, segment_ids=ids, positions=2 * restarted)
    np.testing.assert_array_equal(y, y_explicit)
    assert float(jnp.max(jnp.abs(y - y_spread))) > 1e-3  # positions= wins over the default


def test_rope_positions_count_only_through_their_differences():
    mha, params = layer("blocked")
    x = jax.random.normal(jax.random.key(1), (1, 8, D))
    y, _ = mha(params, x, causal=True)
    y_shifted, _ = mha(params, x, causal=True, positions=jnp.arange(8)[None] + 5)
    y_spread, _ = mha(params, x, causal=True, positions=2 * jnp.arange(8))
    np.testing.assert_allclose(y_shifted, y, atol=1e-5)
    assert float(jnp.max(jnp.abs(y_spread - y))) > 1e-3


def tiny_lm(implementation):
    """Embed -> causal attention (+ residual) -> MLP (+ residual) -> tied logits."""
    graph = bx.Graph("lm")
    rng = bx.Rng(graph / "rng")
    embed = bx.Embed(graph / "embed", VOCAB, D, rng=rng)
    attn = bx.MultiHeadAttention(
        graph / "attn", num_heads=4, head_dim=4, rng=rng, num_kv_heads=2, use_rope=True,
        implementation=implementation, causal_block=3,
    )  # fmt: skip
    mlp = bx.MLP(graph / "mlp", [32, D], rng=rng)

    def loss(params, tokens, ids=None):
        """Summed next-token cross-entropy over the pairs inside one segment, and their count."""
        h, params = embed(params, tokens)
        a, params = attn(params, h, causal=True, segment_ids=ids)
        h = h + a
        m, params = mlp(params, h)
        logits, params = embed.attend(params, h + m)
        logp = jax.nn.log_softmax(logits[:, :-1])
        nll = -jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1)[..., 0]
        same = jnp.ones_like(nll, bool) if ids is None else ids[:, 1:] == ids[:, :-1]
        return jnp.sum(jnp.where(same, nll, 0.0)), jnp.sum(same)

    # One call of each module on unlocked params creates its parameters.
    with_params = rng.seed(bx.Params(), seed=0)
    h, with_params = embed(with_params, jnp.zeros((1, 4), jnp.int32))
    _, with_params = attn(with_params, h, causal=True)
    _, with_params = mlp(with_params, h)
    return loss, with_params.locked()


@pytest.mark.parametrize("implementation", CPU_CORES)
def test_packed_lm_loss_equals_the_examples_one_by_one(implementation):
    loss, params = tiny_lm(implementation)
    loss = jax.jit(loss)
    tokens = jax.random.randint(jax.random.key(2), (2, 8), 0, VOCAB)
    total, count = loss(params, tokens, segment_ids(LAYOUT))
    alone = [loss(params, ex) for ex in split(tokens, LAYOUT)]
    expected = sum(float(t) for t, _ in alone) / sum(int(c) for _, c in alone)
    assert int(count) == sum(int(c) for _, c in alone) == 16 - 5  # 5 examples: 5 pairs fewer
    np.testing.assert_allclose(float(total) / int(count), expected, rtol=1e-5, atol=1e-5)


def test_packed_lm_gradients_equal_the_examples_one_by_one():
    loss, params = tiny_lm("blocked")
    layout = [[3, 5]]  # two examples: three gradients, each compiled (eager costs a minute)
    tokens = jax.random.randint(jax.random.key(2), (1, 8), 0, VOCAB)
    weights, rest = params.split()
    grad = jax.jit(jax.grad(lambda w, t, ids=None: loss(w.merge(rest), t, ids)[0]))
    packed = grad(weights, tokens, segment_ids(layout))
    alone = [grad(weights, ex) for ex in split(tokens, layout)]
    summed = jax.tree.map(lambda *g: sum(g), *alone)
    assert len(packed) == len(weights) > 0
    for path in packed:
        np.testing.assert_allclose(packed[path].value, summed[path].value, atol=1e-5, rtol=1e-4)


def test_any_segment_layout_keeps_examples_apart():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    mha, params = layer("blocked")
    # Compiled once per shape (lengths 1..5 alone, 1..20 packed), not run op by op.
    run = jax.jit(lambda x, ids=None: mha(params, x, causal=True, segment_ids=ids)[0])

    @hypothesis.settings(max_examples=8, deadline=None, derandomize=True, database=None)
    @hypothesis.given(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    def check(lengths):
        # Any id values work, not only 0, 1, 2...: here decreasing, sparse ones.
        ids = np.repeat(np.arange(len(lengths))[::-1] * 7 + 3, lengths)[None]
        x = jax.random.normal(jax.random.key(len(lengths)), (1, sum(lengths), D))
        packed = run(x, jnp.asarray(ids, jnp.int32))
        for p, ex in zip(split(packed, [lengths]), split(x, [lengths])):
            alone = run(ex)
            np.testing.assert_allclose(p, alone, atol=1e-5, rtol=1e-5)

    check()


def test_segment_positions_count_the_earlier_tokens_of_the_same_id():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies

    @hypothesis.settings(max_examples=30, deadline=None, derandomize=True, database=None)
    @hypothesis.given(st.lists(st.lists(st.integers(-2, 3), min_size=7, max_size=7), min_size=1,
                               max_size=3))  # fmt: skip
    def check(rows):
        # Any ids in any order, a segment coming back later in its row included: the position is
        # how many earlier tokens of the row share the id, which is what the segment mask shows.
        ids = np.array(rows, np.int32)
        want = [[sum(r[j] == r[i] for j in range(i)) for i in range(len(r))] for r in rows]
        got = bx.segment_positions(jnp.asarray(ids))
        assert got.dtype == jnp.int32 and got.tolist() == want
        assert jax.jit(bx.segment_positions)(jnp.asarray(ids)).tolist() == want

    check()


def test_cached_decoding_is_unchanged_by_packing_support():
    mha, params = layer("blocked")
    x = jax.random.normal(jax.random.key(3), (2, 6, D))
    full, _ = mha(params, x, causal=True)
    cached = mha.init_cache(params, (2,), max_length=6)
    y0, cached = mha(cached, x[:, :4], decode=True)
    y1, cached = mha(cached, x[:, 4:], decode=True)
    np.testing.assert_allclose(jnp.concatenate([y0, y1], axis=1), full, atol=1e-5)


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="cudnn runs on NVIDIA GPUs only")
def test_cudnn_packed_examples_stay_apart():
    # cudnn computes in bfloat16: it is held to the float32 blocked result of the examples alone,
    # no further from it than the blocked core in bfloat16.
    def error(implementation, dtype):
        mha, params = layer(implementation, dtype=dtype)
        x = jax.random.normal(jax.random.key(1), (2, 8, D))
        packed, _ = mha(params, x, causal=True, segment_ids=segment_ids(LAYOUT))
        ref, ref_params = layer("blocked")
        alone = [ref(ref_params, ex, causal=True)[0] for ex in split(x, LAYOUT)]
        pieces = split(packed.astype(jnp.float32), LAYOUT)
        return max(float(jnp.max(jnp.abs(p - a))) for p, a in zip(pieces, alone))

    blocked = error("blocked", jnp.bfloat16)
    assert error("cudnn", jnp.bfloat16) <= 2 * blocked + 1e-3


# -- bad inputs ----------------------------------------------------------------------------------


def test_float_segment_ids_are_refused_with_the_cast():
    mha, params = layer("blocked")
    with pytest.raises(TypeError, match=r"net/attn: segment_ids must be integers") as e:
        mha(params, jnp.ones((2, 8, D)), segment_ids=jnp.zeros((2, 8)))
    assert "got dtype float32. Cast them with .astype(jnp.int32)" in str(e.value)


def test_segment_ids_of_the_wrong_shape_name_both_shapes():
    mha, params = layer("blocked")
    with pytest.raises(ValueError, match=r"segment_ids of shape \(8,\) must have one id") as e:
        mha(params, jnp.ones((2, 8, D)), segment_ids=jnp.zeros(8, jnp.int32))
    assert "tokens have shape (2, 8) (*batch, T)" in str(e.value)


def test_segment_ids_with_kv_are_refused():
    mha, params = layer("blocked")
    with pytest.raises(ValueError, match=r"net/attn: segment_ids label the tokens of x") as e:
        mha(params, jnp.ones((1, 4, D)), kv=jnp.ones((1, 4, D)), segment_ids=jnp.zeros((1, 4), int))
    assert "For cross-attention pass a boolean mask" in str(e.value)


def test_segment_ids_while_decoding_are_refused():
    mha, params = layer("blocked")
    cached = mha.init_cache(params, (1,), max_length=4)
    with pytest.raises(ValueError, match=r"cached decoding \(decode=True\) runs one sequence"):
        mha(cached, jnp.ones((1, 2, D)), decode=True, segment_ids=jnp.zeros((1, 2), int))


def test_positions_without_rope_are_refused():
    graph = bx.Graph("net")
    mha = bx.MultiHeadAttention(graph / "attn", 2, 4, rng=bx.Rng(graph / "rng"))
    params = mha.rng.seed(bx.Params(), seed=0)
    with pytest.raises(ValueError, match=r"net/attn: positions only move RoPE") as e:
        mha(params, jnp.ones((1, 3, 8)), positions=jnp.arange(3))
    assert "use_rope=False" in str(e.value)


def test_positions_of_the_wrong_shape_name_both_shapes():
    mha, params = layer("blocked")
    with pytest.raises(ValueError, match=r"positions of shape \(2, 5\) do not give one") as e:
        mha(params, jnp.ones((2, 8, D)), positions=jnp.zeros((2, 5), int))
    assert "tokens have shape (2, 8) (..., T). Pass (T,) = (8,)" in str(e.value)


def test_positions_with_kv_or_decode_are_refused():
    mha, params = layer("blocked")
    with pytest.raises(ValueError, match=r"positions are for self-attention"):
        mha(params, jnp.ones((1, 4, D)), kv=jnp.ones((1, 6, D)), positions=jnp.arange(4))
    cached = mha.init_cache(params, (1,), max_length=4)
    with pytest.raises(ValueError, match=r"decode=True rotates by the cache's own positions"):
        mha(cached, jnp.ones((1, 2, D)), decode=True, positions=jnp.arange(2))


def test_rope_takes_positions_per_row():
    x = jax.random.normal(jax.random.key(0), (2, 5, 3, 4))
    rows = jnp.array([[0, 1, 2, 3, 4], [0, 1, 0, 1, 2]])
    y = bx.rope(x, rows)
    np.testing.assert_allclose(y[0], bx.rope(x[0], jnp.arange(5)), atol=1e-6)
    np.testing.assert_allclose(y[1, 2:], bx.rope(x[1, 2:], jnp.arange(3)), atol=1e-6)
    with pytest.raises(ValueError, match=r"rope: positions of shape \(4,\) do not give one"):
        bx.rope(x, jnp.arange(4))
