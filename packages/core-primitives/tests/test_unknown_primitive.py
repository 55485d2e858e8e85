"""A higher-order primitive without a rule: bound unchanged, unless a ruled equation sits inside.

The test builds such a primitive: ``my_call``, which evaluates the jaxpr in its params, with no
interpreter rule, as a primitive JAX adds in a new release would be.
"""

from __future__ import annotations

import jax
import jax.extend.core as jex
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from core_primitives import Interpreter, UnknownPrimitiveError

my_call_p = jex.Primitive("my_call")
my_call_p.multiple_results = True
my_call_p.def_impl(lambda *args, body: jex.jaxpr_as_fun(body)(*args))
my_call_p.def_abstract_eval(lambda *avals, body: body.out_avals)


def my_call(fn, *args):
    return my_call_p.bind(*args, body=jax.make_jaxpr(fn)(*args))


def _emit_sin_inputs(ctx, eqn, invals):
    ctx.emit(invals[0])
    return ctx.bind(eqn, invals)


X = jnp.linspace(-1.0, 1.0, 3)


def test_a_ruled_equation_inside_an_unknown_primitive_raises_with_the_way_out():
    f = lambda x: my_call(lambda v: jnp.sin(v) * 2.0, x)[0]
    with pytest.raises(UnknownPrimitiveError) as err:
        Interpreter({lax.sin_p: _emit_sin_inputs}).transform(f)(X)
    text = str(err.value)
    assert "higher-order primitive my_call holds a jaxpr" in text
    assert "equations its rules rewrite (sin)" in text and "skip them silently" in text
    assert f"this is JAX {jax.__version__}" in text and "0.7.2 .. 0.12.x" in text
    assert "Fix: pin JAX to a supported version, or report this message" in text
    assert "Interpreter({my_prim: my_rule, ...})" in text
    assert isinstance(err.value, NotImplementedError)


def test_ruled_equations_are_found_at_any_depth():
    inner = lambda v: lax.scan(lambda c, a: (c + jax.jit(jnp.sin)(a), None), 0.0, v)[0]
    f = lambda x: jax.jit(lambda y: my_call(inner, y)[0])(x)
    with pytest.raises(UnknownPrimitiveError, match="my_call"):
        Interpreter({lax.sin_p: _emit_sin_inputs}).transform(f)(X)


def test_an_unknown_primitive_with_nothing_to_rewrite_is_bound_unchanged():
    f = lambda x: my_call(lambda v: jnp.cos(v) * 2.0, x)[0] + jnp.sin(x)
    out, emitted = Interpreter({lax.sin_p: _emit_sin_inputs}).transform(f)(X)
    np.testing.assert_allclose(out, jnp.cos(X) * 2.0 + jnp.sin(X), rtol=1e-6)
    assert len(emitted) == 1  # the sin outside
    out, emitted = Interpreter().transform(lambda x: my_call(jnp.sin, x)[0])(X)  # no rules
    np.testing.assert_allclose(out, jnp.sin(X), rtol=1e-6)


def test_a_rule_for_the_primitive_is_the_way_in():
    def enter(ctx, eqn, invals):
        outs, emitted = ctx.interpreter.eval_jaxpr(eqn.params["body"], invals)
        for e in emitted:
            ctx.emit(e)
        return outs

    f = lambda x: my_call(lambda v: jnp.sin(v) * 2.0, x)[0]
    out, emitted = Interpreter({lax.sin_p: _emit_sin_inputs, my_call_p: enter}).transform(f)(X)
    np.testing.assert_allclose(out, jnp.sin(X) * 2.0, rtol=1e-6)
    np.testing.assert_allclose(emitted[0], X)
