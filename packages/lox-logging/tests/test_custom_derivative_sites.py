"""Sites in a scan inside custom_jvp/custom_vjp survive grad (spool and tap)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import lox


def _scanned(x):
    return _scan(x, log=True)


def _free(x):
    return _scan(x, log=False)


def _scan(x, log):
    def body(c, i):
        if log:
            lox.log({"v": jnp.sum(x) * i}, step=i.astype(jnp.int32))
        return c + jnp.sum(jnp.sin(x * i)), None

    return jax.lax.scan(body, 0.0, jnp.arange(3.0))[0]


def _custom_jvp():
    f = jax.custom_jvp(_scanned)
    f.defjvp(lambda p, t: (_scanned(*p), jax.jvp(_free, p, t)[1]))
    return f


def _custom_vjp():
    f = jax.custom_vjp(_scanned)
    grad_free = jax.grad(_free)
    f.defvjp(lambda x: (_scanned(x), x), lambda x, ct: (grad_free(x) * ct,))
    return f


@pytest.mark.parametrize("make", [_custom_jvp, _custom_vjp], ids=["custom_jvp", "custom_vjp"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_scan_sites_inside_custom_derivatives_survive_grad(make, jit):
    g = jax.grad(make())
    g = jax.jit(g) if jit else g
    x = jnp.array([1.0, 2.0])
    out, logs = lox.spool(g)(x)
    np.testing.assert_allclose(logs["v"], [0.0, 3.0, 6.0])
    assert logs.steps["v"]["step"].tolist() == [0, 1, 2]
    np.testing.assert_allclose(out, jax.grad(_free)(x), rtol=1e-6)
    seen = []
    lox.tap(g, lambda logs: seen.append(float(logs["v"][0])))(x)
    jax.effects_barrier()
    assert seen == [0.0, 3.0, 6.0]
