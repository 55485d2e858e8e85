"""The interpreter under JAX's next primitives (its ``jax_scan3``/``jax_remat3``/... flags).

Each test runs once per flag (the root conftest's ``next_flag`` fixture turns it on) and is
skipped on a JAX without that flag. The function below holds all four constructs the flags
change, so whichever flag is on, one of them is JAX's new primitive and the others the classic.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from core_primitives import Interpreter

# The class each flag's construct binds (printed in jaxprs in place of the classic primitive).
NEW_PRIMITIVE = {
    "jax_scan3": "Scan3",
    "jax_remat3": "RematTraced",
    "jax_custom_vjp3": "CustomVJPTraced",
    "jax_custom_jvp3": "CustomJVPTraced",
}
# Transformations JAX itself does not implement for a flag's primitive (JAX 0.12.0): its own
# NotImplementedError is what a user gets, with or without the interpreter.
JAX_GAPS = {("jax_scan3", "grad"), ("jax_scan3", "vmap")}


@jax.custom_jvp
def _shifted_sin(v):
    return jnp.sin(v + 1.0)


_shifted_sin.defjvp(lambda p, t: (_shifted_sin(p[0]), jnp.cos(p[0] + 1.0) * t[0]))


@jax.custom_vjp
def _clipped_sin(v):
    return jnp.sin(v + 3.0)


_clipped_sin.defvjp(
    lambda v: (_clipped_sin(v), v), lambda v, g: (jnp.clip(g * jnp.cos(v + 3.0), -0.5, 0.5),)
)


def _every_construct(xs):
    c, ys = lax.scan(lambda c, x: (c + jnp.sin(x), c), 0.0, xs)  # sin sees each x
    r = jax.checkpoint(lambda v: jnp.sin(v * 2.0))(c)  # sin sees 2c
    j = _shifted_sin(r)  # sin sees r + 1
    return _clipped_sin(j) + ys.sum()  # sin sees j + 3


def _emit_sin_inputs(ctx, eqn, invals):
    ctx.emit(invals[0])
    return ctx.bind(eqn, invals)


def _reference_emitted(xs):
    c = jnp.sin(xs).sum()
    r = jnp.sin(2.0 * c)
    j = jnp.sin(r + 1.0)
    return [xs, 2.0 * c, r + 1.0, j + 3.0]


XS = jnp.linspace(-1.0, 1.0, 4)


def test_emitted_values_leave_each_next_primitive(next_flag):
    interp = Interpreter({lax.sin_p: _emit_sin_inputs})
    out, emitted = jax.jit(interp.transform(_every_construct))(XS)
    np.testing.assert_allclose(out, _every_construct(XS), rtol=1e-6)
    assert len(emitted) == 4 and emitted[0].shape == (4,)  # one per iteration, stacked
    for got, want in zip(emitted, _reference_emitted(XS)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_the_rewrite_keeps_the_next_primitive(next_flag):
    # Rewritten as the same kind of equation, not lowered to something else on the way.
    name = NEW_PRIMITIVE[next_flag]
    assert name in str(jax.make_jaxpr(_every_construct)(XS))
    rewritten = Interpreter({lax.sin_p: _emit_sin_inputs}).transform(_every_construct)
    assert name in str(jax.make_jaxpr(rewritten)(XS))


@pytest.mark.parametrize("how", ["grad", "vmap", "jit"])
def test_identity_rewrite_reproduces_transformations(next_flag, how):
    identity = Interpreter({lax.sin_p: lambda ctx, eqn, invals: ctx.bind(eqn, invals)})
    rewritten = lambda xs: identity.transform(_every_construct)(xs)[0]
    apply = {
        "grad": lambda f: jax.grad(f)(XS),
        "vmap": lambda f: jax.vmap(f)(jnp.stack([XS, XS * 2.0])),
        "jit": lambda f: jax.jit(f)(XS),
    }[how]
    if (next_flag, how) in JAX_GAPS:
        for f in (_every_construct, rewritten):  # the same error with or without the rewrite
            with pytest.raises(NotImplementedError, match=NEW_PRIMITIVE[next_flag]):
                apply(f)
        return
    np.testing.assert_allclose(apply(rewritten), apply(_every_construct), rtol=1e-6)


def test_calling_a_traced_function_is_entered():
    # A jax.stages.Traced called inside a traced function binds eval_jaxpr from JAX 0.12
    # (earlier releases inline it): either way its equations are rewritten.
    traced = jax.jit(lambda v: jnp.sin(v) * 2.0).trace(XS)
    if not callable(traced):
        pytest.skip(f"a Traced cannot be called on JAX {jax.__version__}")
    out, emitted = Interpreter({lax.sin_p: _emit_sin_inputs}).transform(lambda v: traced(v))(XS)
    np.testing.assert_allclose(out, jnp.sin(XS) * 2.0, rtol=1e-6)
    assert len(emitted) == 1
    np.testing.assert_allclose(emitted[0], XS)
