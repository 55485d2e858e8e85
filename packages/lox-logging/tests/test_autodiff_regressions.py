"""No log is lost under autodiff and none is reordered by tap, in the cases that once did."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lox


def _scan_loss(w, *, remat=False):
    def step(c, x):
        c = c + jnp.sum(w * x)
        lox.log({"c": c})
        return c, None

    return jax.lax.scan(jax.checkpoint(step) if remat else step, 0.0, jnp.ones((3, 2)))[0]


def _fori_loss(w):
    def body(i, c):
        c = c + jnp.sum(w) * i
        lox.log({"c": c}, step=i)
        return c

    return jax.lax.fori_loop(0, 3, body, 0.0)


@pytest.mark.parametrize(
    "transform",
    [
        pytest.param(lambda f: f, id="plain"),
        pytest.param(jax.grad, id="grad"),
        pytest.param(jax.value_and_grad, id="value_and_grad"),
        pytest.param(lambda f: lambda w: jax.vjp(f, w)[1](1.0), id="vjp"),
        pytest.param(lambda f: jax.jit(jax.grad(f)), id="jit_grad"),
    ],
)
def test_scan_sites_survive_differentiation(transform):
    _, logs = lox.spool(transform(_scan_loss))(jnp.ones(2))
    np.testing.assert_allclose(logs["c"], [2.0, 4.0, 6.0])


def test_remat_scan_body_under_grad_keeps_its_site():
    loss = lambda w: _scan_loss(w, remat=True)
    assert "lox_log" in str(jax.make_jaxpr(jax.grad(loss))(jnp.ones(2)))
    _, logs = lox.spool(jax.grad(loss))(jnp.ones(2))
    np.testing.assert_allclose(logs["c"], [2.0, 4.0, 6.0])


def test_static_fori_loop_under_grad_keeps_events_and_steps():
    _, logs = lox.spool(jax.grad(_fori_loss))(jnp.ones(2))
    np.testing.assert_allclose(logs["c"], [0.0, 2.0, 6.0])
    assert logs.steps["c"]["step"].tolist() == [0, 1, 2]


def test_vmap_of_grad_keeps_events_per_lane():
    _, logs = lox.spool(jax.vmap(jax.grad(_scan_loss)))(jnp.ones((2, 2)))
    np.testing.assert_allclose(logs["c"], [[2.0, 4.0, 6.0]] * 2)


def _scan_cond_jit(xs):
    def body(c, x):
        lox.log({"a": x}, step=10)
        c = jax.lax.cond(x > 0, lambda c: lox.log({"b": c}, step=201)["b"] + 1, lambda c: c, c)
        c = jax.jit(lambda c: lox.log({"d": c}, step=301)["d"] * 2)(c)
        return c, None

    return jax.lax.scan(body, 0.0, xs)[0]


@pytest.mark.next_flag_gap(
    "jax_scan3",
    "JAX 0.12.0's jit drops a Scan3 whose stacked outputs are unused, sites and all (tap "
    "compiles f; the scan here has a carry only)",
)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("names", [None, ["a", "d"], ["b", "d"]])
def test_tap_keeps_program_order_through_cond_and_inner_jit(jit, names):
    seen = []
    g = lox.tap(
        _scan_cond_jit,
        lambda logs: seen.append(int(next(iter(logs.steps.values()))["step"][0])),
        names=names,
    )
    (jax.jit(g) if jit else g)(jnp.array([1.0, -1.0, 2.0]))
    jax.effects_barrier()
    full = [10, 201, 301, 10, 301, 10, 201, 301]
    keep = {"a": 10, "b": 201, "d": 301}
    wanted = set(keep.values()) if names is None else {keep[n] for n in names}
    assert seen == [s for s in full if s in wanted]
