"""The interpreter: identity rewrites reproduce every higher-order primitive; rules can emit."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

from core_primitives import EmittedStructureError, Interpreter, compat


@jax.custom_jvp
def _softplus(x):
    return jnp.log1p(jnp.exp(x))


@_softplus.defjvp
def _softplus_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _softplus(x), jax.nn.sigmoid(x) * t


@jax.custom_vjp
def _clip_grad(x):
    return x * 1.0


def _clip_fwd(x):
    return x * 1.0, None


def _clip_bwd(_, g):
    return (jnp.clip(g, -0.5, 0.5),)


_clip_grad.defvjp(_clip_fwd, _clip_bwd)


@functools.partial(jax.jit, static_argnums=1)
def _inner_jit(x, k):
    return jnp.sin(x) * k


def _mesh():
    # Up to 4 of the devices present (4 of the 8 fake CPU devices; 1 on a 1-GPU machine).
    n = min(jax.device_count(), 4)
    return jax.make_mesh((n,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))


def _f_scan(x):
    def body(c, xi):
        def inner(c2, y):
            return c2 + jnp.sin(y * c), y * 2

        c, ys = lax.scan(inner, c, xi * jnp.ones(3))
        return c * 0.5, ys.sum()

    c, ys = lax.scan(body, jnp.float32(0.1), x)
    return c + ys.sum()


def _f_cond_switch(x):
    y = lax.cond(x.sum() > 0, lambda v: jnp.sin(v), lambda v: jnp.cos(v) * 2, x)
    return lax.switch(1, [jnp.tanh, jnp.exp, lambda v: v**2], y).sum()


def _f_while(x):
    def body(c):
        i, v = c
        return i + 1, v * 0.9 + jnp.sin(v)

    return lax.while_loop(lambda c: c[0] < 4, body, (0, x))[1].sum()


def _f_remat(x):
    g = jax.checkpoint(
        lambda v: jnp.sin(jnp.sin(v)) * v, policy=jax.checkpoint_policies.nothing_saveable
    )
    return g(x).sum()


def _f_custom(x):
    return (_softplus(x) + _clip_grad(x * 3.0)).sum()


def _f_jit(x):
    return (
        _inner_jit(x, 3).sum()
        + jax.jit(lambda v: lax.scan(lambda c, a: (c + a, c), 0.0, v)[1])(x).sum()
    )


def _f_closed_call(x):
    inner = jax.make_jaxpr(lambda v: jnp.cos(v) * 2.0)(x)
    return compat.bind(compat.closed_call_p, [x], {"call_jaxpr": inner})[0].sum()


def _f_shard_map(x):
    f = jax.shard_map(
        lambda v: jnp.sin(v) * lax.axis_index("i"), mesh=_mesh(), in_specs=P("i"), out_specs=P("i")
    )
    return f(jnp.tile(x, 4)[:8]).sum()


def _f_nested(x):
    # Every kind nested inside every other, at least once.
    def body(c, xi):
        v = jax.jit(jax.checkpoint(lambda a: _softplus(a) * c))(xi)
        v = lax.cond(v > 0, lambda a: _clip_grad(a), lambda a: -a, v)
        w = lax.fori_loop(0, 2, lambda i, a: a * 0.5 + jnp.sin(a), v)
        return c + w, w

    c, ws = lax.scan(body, 1.0, x)
    return c + ws.sum()


ZOO = {
    "scan": _f_scan,
    "cond_switch": _f_cond_switch,
    "while": _f_while,
    "remat": _f_remat,
    "custom_jvp_vjp": _f_custom,
    "jit": _f_jit,
    "closed_call": _f_closed_call,
    "shard_map": _f_shard_map,
    "nested": _f_nested,
}

X = jnp.linspace(-1.0, 1.0, 4)


def _identity(f):
    rewritten = Interpreter().transform(f)
    return lambda *a: rewritten(*a)[0]


@pytest.mark.parametrize("name", sorted(ZOO))
def test_identity_rewrite_reproduces_outputs(name):
    f = ZOO[name]
    np.testing.assert_allclose(_identity(f)(X), f(X), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(jax.jit(_identity(f))(X), f(X), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(set(ZOO) - {"while"}))
def test_identity_rewrite_reproduces_gradients(name):
    f = ZOO[name]
    np.testing.assert_allclose(jax.grad(_identity(f))(X), jax.grad(f)(X), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["remat", "nested"])
def test_rewriting_a_gradient_keeps_its_recomputation_fenced(name):
    # In a differentiated jaxpr the backward pass's recomputation is a remat marked
    # differentiated; its lowering puts an optimization barrier before the recomputed values,
    # so XLA cannot merge them with the forward values and keep those alive (which undoes the
    # memory checkpointing saves). A rewrite must keep every barrier.
    grad = jax.grad(ZOO[name])

    def barriers(f):
        return jax.jit(f).lower(X).as_text().count("optimization_barrier")

    assert barriers(grad) >= 1
    assert barriers(_identity(grad)) == barriers(grad)


def test_identity_rewrite_of_while_has_forward_mode_derivatives():
    # Reverse-mode through while_loop is unsupported in JAX itself; forward mode must match.
    t = jnp.ones_like(X)
    got = jax.jvp(_identity(_f_while), (X,), (t,))
    want = jax.jvp(_f_while, (X,), (t,))
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5)


@pytest.mark.parametrize("name", sorted(set(ZOO) - {"shard_map"}))
def test_identity_rewrite_reproduces_batching(name):
    f = ZOO[name]
    xs = jnp.stack([X, X * 0.5, -X])
    np.testing.assert_allclose(jax.vmap(_identity(f))(xs), jax.vmap(f)(xs), rtol=1e-5)


def test_gradients_of_custom_rules_are_the_custom_ones():
    # clip_grad's custom bwd clips to [-0.5, 0.5]; the plain derivative would be 3.
    g = jax.grad(_identity(lambda x: _clip_grad(x * 3.0).sum()))(X)
    np.testing.assert_allclose(g, jnp.full_like(X, 1.5))


def test_inner_jit_keeps_donation_and_name():
    inner = jax.jit(lambda a, b: a * 2 + b, donate_argnums=0)
    f = lambda a, b: inner(a, b) + 1
    jaxpr = jax.make_jaxpr(_identity(f))(X, X)
    (eqn,) = [e for e in jaxpr.eqns if e.primitive is compat.jit_p]
    assert eqn.params["donated_invars"] == (True, False)
    assert eqn.params["name"] == "<lambda>"


def test_inner_jit_keeps_shardings():
    mesh = _mesh()
    sharding = jax.sharding.NamedSharding(mesh, P("i"))
    inner = jax.jit(lambda a: a * 2, in_shardings=sharding, out_shardings=sharding)
    jaxpr = jax.make_jaxpr(_identity(lambda a: inner(a)))(jnp.ones(8))
    (eqn,) = [e for e in jaxpr.eqns if e.primitive is compat.jit_p]
    assert eqn.params["in_shardings"] == (sharding,)
    assert eqn.params["out_shardings"] == (sharding,)


def test_rewriting_does_not_corrupt_cached_jaxprs():
    def to_cos(ctx, eqn, invals):
        return [jnp.cos(invals[0])]

    f = lambda x: _inner_jit(x, 2)
    before = _inner_jit(X, 2)
    rewritten, _ = Interpreter({jax.lax.sin_p: to_cos}).transform(f)(X)
    np.testing.assert_allclose(rewritten, jnp.cos(X) * 2, rtol=1e-6)
    # The jitted function (and its cached jaxpr) is untouched.
    np.testing.assert_allclose(_inner_jit(X, 2), before)
    np.testing.assert_allclose(jax.jit(f)(X), jnp.sin(X) * 2, rtol=1e-6)


def _emit_sin_inputs(ctx, eqn, invals):
    ctx.emit({"x": invals[0]})
    return ctx.bind(eqn, invals)


EMIT = Interpreter({lax.sin_p: _emit_sin_inputs})


def test_emitted_values_from_nested_scans_come_out_stacked():
    def f(x):
        def outer(c, row):
            def inner(c2, v):
                return c2 + jnp.sin(v), None

            return lax.scan(inner, c, row)[0], None

        return lax.scan(outer, 0.0, x)[0]

    x = jnp.arange(15.0).reshape(5, 3)
    out, emitted = EMIT.transform(f)(x)
    assert len(emitted) == 1
    assert emitted[0]["x"].shape == (5, 3)  # outer length, inner length
    np.testing.assert_allclose(emitted[0]["x"], x)
    np.testing.assert_allclose(out, jnp.sin(x).sum(), rtol=1e-6)


def test_reverse_scan_emits_in_index_order():
    f = lambda x: lax.scan(lambda c, v: (c + jnp.sin(v), None), 0.0, x, reverse=True)[0]
    _, emitted = EMIT.transform(f)(jnp.arange(4.0))
    np.testing.assert_allclose(emitted[0]["x"], jnp.arange(4.0))


def test_emitted_values_cross_jit_remat_cond_and_custom_rules():
    def f(x):
        y = jax.jit(jnp.sin)(x)
        y = jax.checkpoint(jnp.sin)(y)
        y = lax.cond(x[0] > 0, jnp.sin, lambda v: jnp.sin(v) + 1, y)
        return _softplus(jnp.sin(y)) + _clip_grad(jnp.sin(y))

    out, emitted = EMIT.transform(f)(X)
    # jit, checkpoint, the taken cond branch, and the two calls outside the custom rules.
    assert len(emitted) == 5
    np.testing.assert_allclose(out, f(X), rtol=1e-6)
    np.testing.assert_allclose(emitted[0]["x"], X)
    # Autodiff through the rewritten function still works and uses the custom rules.
    g = jax.grad(lambda x: EMIT.transform(f)(x)[0].sum())(X)
    np.testing.assert_allclose(g, jax.grad(lambda x: f(x).sum())(X), rtol=1e-5)


def test_emitted_values_from_shard_map_get_one_row_per_shard():
    f = jax.shard_map(lambda v: jnp.sin(v), mesh=_mesh(), in_specs=P("i"), out_specs=P("i"))
    x = jnp.arange(8.0)
    _, emitted = EMIT.transform(f)(x)
    shards = _mesh().size  # 4 on the 8 fake CPU devices
    assert emitted[0]["x"].shape == (shards, 8 // shards)
    np.testing.assert_allclose(emitted[0]["x"].reshape(-1), x)


def test_cond_branches_emitting_different_structures_raise():
    f = lambda x: lax.cond(x > 0, jnp.sin, jnp.cos, x)
    with pytest.raises(EmittedStructureError, match=r"branch 0: \[\]\n  branch 1: \[\{'x'"):
        EMIT.transform(f)(1.0)


def test_emitting_inside_a_while_loop_raises_with_a_hint():
    f = lambda x: lax.while_loop(lambda c: c < 3, lambda c: c + jnp.sin(c), x)
    with pytest.raises(EmittedStructureError, match=r"inside the body of a while_loop.*lax.scan"):
        EMIT.transform(f)(0.5)


def test_literals_drop_vars_and_pytree_outputs():
    f = lambda x: {"a": x + 1.0, "b": (lax.sort_key_val(x, x)[0], 2.0 * x)}
    out, emitted = Interpreter().transform(f)(X)
    assert emitted == []
    jax.tree.map(np.testing.assert_allclose, out, f(X))


def _primitives(jaxpr):
    return [e.primitive.name for e in jaxpr.eqns]


def test_rewritten_cond_and_switch_add_no_equation():
    # lax.switch would clamp the (already valid) index again; the rewrite must not.
    def f(x):
        y = lax.cond(x > 0, lambda v: v * 2, lambda v: v * 3, x)
        return lax.switch(jnp.int32(5), [lambda v: v, lambda v: v + 1, jnp.sin], y)

    original = jax.make_jaxpr(f)(1.0)
    rewritten = jax.make_jaxpr(lambda x: Interpreter({}).transform(f)(x)[0])(1.0)
    assert _primitives(rewritten.jaxpr) == _primitives(original.jaxpr)
    assert f(1.0) == Interpreter({}).transform(f)(1.0)[0]


def _primitives_deep(jaxpr):
    # Primitive names in order, each higher-order one followed by its sub-jaxprs' primitives.
    names = []
    for e in jaxpr.eqns:
        names.append(e.primitive.name)
        for key in sorted(e.params):
            sub = e.params[key]
            if isinstance(sub, compat.ClosedJaxpr):
                sub = compat.jaxpr_and_consts(sub)[0]
            if isinstance(sub, compat.Jaxpr):
                names += [key, *_primitives_deep(sub)]
    return names


def _count_to(n, x):
    # The trip count depends on n: under vmap over n the predicate is batched per lane.
    return lax.while_loop(lambda c: c[0] < n, lambda c: (c[0] + 1, c[1] * 1.5 + x), (0, x))


def test_identity_rewrite_of_vmap_with_a_batched_while_predicate():
    ns, xs = jnp.array([1, 3, 0]), jnp.array([1.0, 2.0, 3.0])
    f = jax.vmap(_count_to)
    got, want = _identity(f)(ns, xs), f(ns, xs)
    jax.tree.map(np.testing.assert_array_equal, got, want)
    assert want[0].tolist() == [1, 3, 0]  # the lanes really stop at different steps
    jax.tree.map(np.testing.assert_array_equal, jax.jit(_identity(f))(ns, xs), want)
    original = jax.make_jaxpr(f)(ns, xs)
    rewritten = jax.make_jaxpr(_identity(f))(ns, xs)
    assert _primitives_deep(rewritten.jaxpr) == _primitives_deep(original.jaxpr)
    assert "while" in _primitives_deep(original.jaxpr)


def test_bad_rules_and_functions_have_clear_errors():
    with pytest.raises(TypeError, match=r"rules must be a mapping \{primitive: rule\}, got list"):
        Interpreter([lax.sin_p])
    with pytest.raises(TypeError, match=r"keyed by primitive objects .* got the key 'sin' \(str\)"):
        Interpreter({"sin": lambda ctx, eqn, invals: invals})
    with pytest.raises(TypeError, match=r"the rule for sin must be callable .* got 3 \(int\)"):
        Interpreter({lax.sin_p: 3})
    with pytest.raises(TypeError, match=r"default must be a rule .* got 'bind' \(str\)"):
        Interpreter(default="bind")
    with pytest.raises(
        TypeError, match=r"transform: fn must be callable, got 2.0 \(float\)\. Pass"
    ):
        Interpreter().transform(2.0)
