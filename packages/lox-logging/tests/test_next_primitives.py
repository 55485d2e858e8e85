"""No log lost under JAX's next primitives, and an error, never a silent drop, where lox cannot go.

Each flag test runs once per flag of ``core_primitives.compat.NEXT_FLAGS`` (the root conftest's
``next_flag`` fixture turns it on; skipped on a JAX without it) and compares what lox gives with
the flag on against the same call with it off, on a function holding every construct a flag
changes (scan, checkpoint, custom_jvp, custom_vjp), each with a site inside.
"""

from __future__ import annotations

import functools
import operator

import jax
import jax.extend.core as jex
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import lox
from core_primitives import UnknownPrimitiveError, compat

# Transformations JAX itself does not implement for a flag's primitive (JAX 0.12.0): what a user
# gets is JAX's NotImplementedError, with or without lox. docs/lox.md lists them.
JAX_GAPS = {("jax_scan3", "grad"), ("jax_scan3", "vmap")}
# Events per key: three scan iterations, one site in each other construct, one after them.
EVENTS = {"c": 3, "r": 1, "j": 1, "v": 1, "out": 1}


@jax.custom_jvp
def _logged_jvp(x):
    return jnp.sin(lox.log({"j": x})["j"])


_logged_jvp.defjvp(lambda p, t: (_logged_jvp(p[0]), jnp.cos(p[0]) * t[0]))


@jax.custom_vjp
def _logged_vjp(x):
    return jnp.cos(lox.log({"v": x})["v"])


_logged_vjp.defvjp(lambda x: (_logged_vjp(x), x), lambda x, g: (-jnp.sin(x) * g,))


def _every_construct(xs):
    def body(c, x):
        lox.log({"c": c}, step=jnp.int32(7))
        return c + x, c * 2.0

    c, ys = lax.scan(body, 0.5, xs)  # ys reach the output (see the scan3 gap below)
    r = jax.checkpoint(lambda a: jnp.sin(lox.log({"r": a * 2.0})["r"]))(c)
    out = _logged_vjp(_logged_jvp(r))
    lox.log({"out": out})
    return out + ys.sum()


XS = jnp.array([0.5, -1.0, 2.0])


def _tapped(f, *args):
    seen = []
    jax.block_until_ready(lox.tap(f, seen.append)(*args))
    jax.effects_barrier()
    return functools.reduce(operator.add, seen)


RUN = {
    "spool": lambda: lox.spool(_every_construct)(XS)[1],
    "tap": lambda: _tapped(_every_construct, XS),
    "grad": lambda: lox.spool(jax.grad(_every_construct))(XS)[1],
    "vmap": lambda: lox.spool(jax.vmap(_every_construct))(jnp.stack([XS, XS * 3.0]))[1],
    "jit": lambda: jax.jit(lox.spool(_every_construct))(XS)[1],
}


def _with_flag_off(flag, fn):
    jax.config.update(flag, False)
    try:
        return fn()
    finally:
        jax.config.update(flag, True)


def _assert_same_logs(got, want):
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_allclose(got[key], want[key], rtol=1e-6, err_msg=key)
        assert sorted(got.steps[key]) == sorted(want.steps[key])
        for step in want.steps[key]:
            np.testing.assert_array_equal(got.steps[key][step], want.steps[key][step])


@pytest.mark.parametrize("how", list(RUN))
def test_every_log_is_kept_under_each_flag(next_flag, how):
    if (next_flag, how) in JAX_GAPS:
        plain = {"grad": lambda: jax.grad(_every_construct)(XS), "vmap": lambda: jax.vmap(
            _every_construct)(jnp.stack([XS, XS]))}[how]  # fmt: skip
        for fn in (plain, RUN[how]):  # JAX's own error, with or without lox
            with pytest.raises(NotImplementedError, match=f"for {how} support, subclass .*Scan3"):
                fn()
        return
    got = RUN[how]()
    lead = 1 if how == "vmap" else 0  # the batch axis comes first
    assert {k: jnp.shape(v)[lead] for k, v in got.items()} == EVENTS
    _assert_same_logs(got, _with_flag_off(next_flag, RUN[how]))


def test_strip_leaves_no_site_under_each_flag(next_flag):
    stripped = lox.strip(_every_construct)
    assert "lox_log" not in str(jax.make_jaxpr(stripped)(XS))
    assert "lox_log" in str(jax.make_jaxpr(_every_construct)(XS))  # the sites were there
    np.testing.assert_allclose(stripped(XS), _every_construct(XS), rtol=1e-6)


# --- a higher-order primitive lox does not know ------------------------------------------------
# my_call evaluates the jaxpr in its params; lox has no rule for it, as for a primitive a new
# JAX release adds.
my_call_p = jex.Primitive("my_call")
my_call_p.multiple_results = True
my_call_p.def_impl(lambda *args, body: jex.jaxpr_as_fun(body)(*args))
my_call_p.def_abstract_eval(lambda *avals, body: body.out_avals)


def _logs_inside_my_call(x):
    inner = lambda v: [lox.log({"hidden": v, "also": v * 2})["hidden"] * 3.0]
    return my_call_p.bind(x, body=jax.make_jaxpr(inner)(x))[0] + lox.log({"seen": x})["seen"]


@pytest.mark.parametrize("api", ["spool", "tap", "strip"])
def test_sites_inside_an_unknown_primitive_raise_instead_of_vanishing(api):
    run = {"spool": lox.spool, "tap": lambda f: lox.tap(f, print), "strip": lox.strip}[api]
    with pytest.raises(UnknownPrimitiveError) as err:
        run(_logs_inside_my_call)(jnp.float32(1.0))
    text = str(err.value)
    assert text.startswith(f"lox.{api}: log site(s) ['also', 'hidden'] sit inside my_call, a ")
    assert f"cannot enter on JAX {jax.__version__}" in text
    assert "would lose their events without a word" in text
    assert "Fix: pin JAX to a supported version" in text and "report this message" in text
    assert compat.SUPPORTED_JAX in text


def test_an_unknown_primitive_without_sites_is_left_alone():
    def f(x):
        inner = lambda v: [jnp.sin(v)]
        return my_call_p.bind(x, body=jax.make_jaxpr(inner)(x))[0] + lox.log({"seen": x})["seen"]

    rewritten = lox.keep(f, names="other")  # an interpreter with a rule, nothing inside
    np.testing.assert_allclose(rewritten(jnp.float32(1.0)), np.sin(1.0) + 1.0, rtol=1e-6)


# --- what JAX 0.12.0's Scan3 gets wrong by itself ----------------------------------------------
# Strict expected failures: a JAX that fixes one makes its test fail, so that the gap can come
# out of docs/lox.md ("JAX's next primitives").
@pytest.fixture
def scan3():
    if "jax_scan3" not in compat.next_flags():
        pytest.skip(f"JAX {jax.__version__} has no jax_scan3 flag as JAX 0.12 defines it")
    before = jax.config.jax_scan3
    jax.config.update("jax_scan3", True)
    try:
        yield
    finally:
        jax.config.update("jax_scan3", before)


def _carry_only(xs):
    def body(c, x):
        lox.log({"c": c})
        return c + x, None

    return lax.scan(body, 0.0, xs)[0]


@pytest.mark.xfail(
    strict=True, reason="JAX 0.12.0: jit drops a Scan3 whose stacked outputs are unused"
)
def test_scan3_without_used_outputs_keeps_its_carry_and_tapped_sites(scan3):
    assert float(jax.jit(_carry_only)(XS)) == float(XS.sum())
    assert _tapped(_carry_only, XS)["c"].tolist() == [0.0, 0.5, -0.5]


@pytest.mark.xfail(
    strict=True, reason="JAX 0.12.0: tap compiles f, and jit drops the Scan3 (no jit of our own)"
)
def test_scan3_without_used_outputs_keeps_tapped_sites_without_a_jit(scan3):
    seen = []  # tap alone, no jit around it: docs/lox.md says it is hit all the same
    jax.block_until_ready(lox.tap(_carry_only, seen.append)(XS))
    jax.effects_barrier()
    assert [s["c"].tolist() for s in seen] == [[0.0], [0.5], [-0.5]]


@pytest.mark.xfail(strict=True, reason="JAX 0.12.0: Scan3 ignores reverse=True")
def test_scan3_reverse_runs_backwards(scan3):
    _, ys = lax.scan(lambda c, x: (c + x, c), 0.0, XS, reverse=True)
    np.testing.assert_allclose(ys, [1.0, 2.0, 0.0])


@pytest.mark.xfail(strict=True, reason="JAX 0.12.0: Scan3 of length 0 raises IndexError")
def test_scan3_of_length_zero_logs_no_event(scan3):
    f = lambda xs: lax.scan(lambda c, x: (c, lox.log({"x": x})["x"]), 0.0, xs)[1]
    _, logs = lox.spool(f)(jnp.zeros((0,)))
    assert logs["x"].shape == (0,)
