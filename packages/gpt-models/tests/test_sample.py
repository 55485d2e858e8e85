import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpt_models import PRESETS, forward, generate, init_params, sample_token

CFG = dataclasses.replace(
    PRESETS["tiny"].model, seq_len=32, d_model=32, n_layers=2, n_heads=4, init_std=0.3
)


@pytest.fixture(scope="module")
def params():
    return init_params(CFG, jax.random.key(0))


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(0.0, None, None), (1.0, None, None), (0.8, 20, 0.9)]
)
@pytest.mark.parametrize("variant", [{}, {"pos": "learned", "n_kv_heads": 2, "scan_layers": False}])
def test_cached_equals_uncached(params, temperature, top_k, top_p, variant):
    cfg = dataclasses.replace(CFG, **variant)
    p = params if not variant else init_params(cfg, jax.random.key(0))
    prompt = jnp.array([[72, 105, 33], [10, 20, 30]])
    kw = {
        "max_new_tokens": 20,
        "temperature": temperature,
        "top_k": top_k,
        "top_p": top_p,
        "key": jax.random.key(1),
    }
    cached = generate(p, prompt, cfg, **kw)
    uncached = generate(p, prompt, cfg, use_cache=False, **kw)
    assert cached.shape == (2, 23)
    np.testing.assert_array_equal(cached, uncached)
    np.testing.assert_array_equal(cached[:, :3], prompt)


def test_greedy_matches_argmax_of_forward(params):
    out = generate(
        params, jnp.array([1, 2, 3]), CFG, max_new_tokens=4, temperature=0.0, key=jax.random.key(0)
    )
    for i in range(3, 7):
        logits = forward(params, out[None, :i], CFG)[0, -1]
        assert int(out[i]) == int(jnp.argmax(logits))


def test_top_k_one_and_tiny_top_p_are_greedy(params):
    prompt = jnp.array([5, 6, 7])
    greedy = generate(params, prompt, CFG, max_new_tokens=8, temperature=0.0, key=jax.random.key(0))
    for kw in ({"top_k": 1}, {"top_p": 1e-6}):
        got = generate(
            params, prompt, CFG, max_new_tokens=8, temperature=1.0, key=jax.random.key(3), **kw
        )
        np.testing.assert_array_equal(got, greedy)


def test_top_k_restricts_support():
    logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05]]))
    keys = jax.random.split(jax.random.key(0), 200)
    draws = jax.vmap(lambda k: sample_token(logits, k, 1.0, 2, None))(keys)
    assert set(np.unique(draws).tolist()) == {0, 1}
    draws = jax.vmap(lambda k: sample_token(logits, k, 1.0, None, 0.7))(keys)
    assert set(np.unique(draws).tolist()) == {0, 1}  # 0.5 + 0.3 reaches 0.7


def test_stop_token_fills_the_rest(params):
    prompt = jnp.array([[72, 105, 33], [1, 2, 3]])
    free = generate(params, prompt, CFG, max_new_tokens=12, temperature=1.0, key=jax.random.key(2))
    stop = int(free[0, 6])  # a token row 0 emits at step 3
    first = int(np.argmax(np.asarray(free[0, 3:]) == stop)) + 3
    for cache in (True, False):
        out = generate(params, prompt, CFG, max_new_tokens=12, temperature=1.0, key=jax.random.key(2),
                       stop_token=stop, use_cache=cache)  # fmt: skip
        np.testing.assert_array_equal(out[0, : first + 1], free[0, : first + 1])
        assert (np.asarray(out[0, first:]) == stop).all()


def test_length_errors(params):
    with pytest.raises(
        ValueError,
        match=r"prompt \(3 tokens\) \+ max_new_tokens \(40\) = 43 exceeds .* model.seq_len = 32",
    ):
        generate(params, jnp.array([1, 2, 3]), CFG, max_new_tokens=40, key=jax.random.key(0))
    with pytest.raises(ValueError, match=r"the prompt is empty"):
        generate(params, jnp.zeros((0,), jnp.int32), CFG, max_new_tokens=4, key=jax.random.key(0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -1.0}, r"generate: temperature = -1.0 must be a finite number >= 0"),
        ({"temperature": float("nan")}, r"temperature = nan must be a finite number >= 0"),
        ({"top_k": -2}, r"generate: top_k = -2 must be >= 0 \(0 keeps every token\)\."),
        ({"top_p": 0.0}, r"generate: top_p = 0.0 must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p = 1.5 must be in \(0, 1\]"),
        ({"max_new_tokens": -1}, r"generate: max_new_tokens = -1 must be >= 0\."),
    ],
)
def test_bad_sampling_options_are_refused(params, kwargs, message):
    args = {"max_new_tokens": 4, "key": jax.random.key(0), **kwargs}
    with pytest.raises(ValueError, match=message):
        generate(params, jnp.array([1, 2, 3]), CFG, **args)
