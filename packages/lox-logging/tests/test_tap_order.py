"""Tap's callbacks arrive in program order even when nothing orders them by data.

The sites below log values that do not depend on the scan carry, so only an ordered callback
keeps XLA from running the inner jit's site first (it did, with unordered callbacks).
"""

import jax
import jax.numpy as jnp
import pytest

import lox


def _independent_sites(x):
    def body(c, i):
        lox.log({"a": i + 10}, tags="t")
        c = jax.lax.cond(
            i % 2 == 0,
            lambda c: c + lox.log({"b": i + 200}, tags="t")["b"],
            lambda c: c - lox.log({"b": i + 200}, tags="t")["b"],
            c,
        )
        c = jax.jit(lambda c: c + lox.log({"d": i + 300}, tags="t")["d"])(c)
        lox.log({"e": i * 0}, tags="u")
        return c, None

    return jax.lax.scan(body, x, jnp.arange(3))[0]


@pytest.mark.next_flag_gap(
    "jax_scan3",
    "JAX 0.12.0's jit drops a Scan3 whose stacked outputs are unused, sites and all (tap "
    "compiles f; the scan here has a carry only)",
)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize(
    "filters", [{}, {"tags": "t"}, {"names": ["a", "b", "d"]}], ids=["all", "tags", "names"]
)
def test_tap_order_holds_for_sites_without_data_dependencies(jit, filters):
    seen = []
    g = lox.tap(
        _independent_sites, lambda logs: seen.append(int(next(iter(logs.values()))[0])), **filters
    )
    (jax.jit(g) if jit else g)(0)
    jax.effects_barrier()
    per_step = [[10 + i, 200 + i, 300 + i] + ([0] if not filters else []) for i in range(3)]
    assert seen == [v for step in per_step for v in step]


def _batched_sites(x):
    def body(c, i):
        lox.log({"a": x * 0 + i + 10})
        c = jax.lax.cond(x > 0, lambda c: c + lox.log({"b": x * 0 + i + 200})["b"], lambda c: c, c)
        c = jax.jit(lambda c: c + lox.log({"d": x * 0 + i + 300})["d"])(c)
        return c, None

    return jax.lax.scan(body, x, jnp.arange(3))[0]


def test_tap_order_under_vmap_with_batched_predicate_is_per_site_then_lane():
    seen = []
    g = lox.tap(_batched_sites, lambda logs: seen.append(int(next(iter(logs.values()))[0])))
    jax.vmap(g)(jnp.array([1, 0]))
    jax.effects_barrier()
    # Lane 1 (x = 0) takes the branch that does not log.
    assert seen == [v for i in range(3) for v in (10 + i, 10 + i, 200 + i, 300 + i, 300 + i)]
