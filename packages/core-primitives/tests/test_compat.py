"""core_primitives.compat: the names sibling packages use, and the backend helpers on this JAX."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core_primitives import compat

# Every shim a sibling package may use: one import path, `core_primitives.compat.<name>`.
NAMES = {
    "ClosedJaxpr", "Jaxpr", "JaxprEqn", "Literal", "Primitive", "Var",
    "call_p", "closed_call_p", "cond_p", "custom_jvp_call_p", "custom_vjp_call_p", "jit_p",
    "remat_p", "scan_p", "shard_map_p", "while_p",
    "bind", "const_args_jaxpr", "eqn_context", "extend_jit_params", "is_drop_var", "is_literal",
    "jaxpr_and_consts", "scan_layout", "scan_unroll", "shard_map_manual_axes", "shard_map_params",
    "instantiate_zero", "is_undefined_primal", "register_batching", "register_batching_always",
    "register_jvp", "register_keep_alive", "register_lowering", "register_no_recompute",
    "register_staged_params", "register_transpose", "wrap_batched_cond", "wrap_batched_while",
    "make_effect", "make_ordered_effect", "register_ordered_callback_lowering",
    "backends_initialized", "unrolled_threefry_on_cpu", "xla_cpu_remats_unrolled_layers",
    "xla_cpu_xnn_fusion_supported", "cluster_environments", "coordinator_address",
    "NEXT_FLAGS", "SUPPORTED_JAX", "CustomJVPTraced", "CustomVJPTraced", "RematTraced", "Scan3",
    "eval_jaxpr_p", "hi_bind", "hi_call_jaxpr", "hi_params", "hi_primal_args", "jax_description",
    "next_flags", "primitive_name", "rule_key", "sub_jaxprs",
}  # fmt: skip


def test_compat_exports_every_shim_and_nothing_else():
    public = {n for n in dir(compat) if not n.startswith("_")}
    assert public == NAMES


def test_the_xnn_fusion_it_allows_compiles_and_computes_the_same():
    if not compat.xla_cpu_xnn_fusion_supported():
        pytest.skip(f"jaxlib {jax.__version__} fails XNNPACK graph fusion at run time")
    if jax.default_backend() != "cpu":  # pragma: no cover
        pytest.skip("XNNPACK graph fusion is an XLA:CPU option")
    options = {"xla_cpu_experimental_xnn_graph_fusion_mode": "XNN_GRAPH_FUSION_MODE_GREEDY"}
    f = lambda w, x: jax.nn.relu(x @ w) @ w.T
    w, x = jnp.linspace(-1.0, 1.0, 48).reshape(8, 6), jnp.linspace(0.0, 2.0, 32).reshape(4, 8)
    fused = jax.jit(f, compiler_options=options)(w, x)
    np.testing.assert_allclose(fused, jax.jit(f)(w, x), rtol=1e-5)


def test_what_it_says_of_unrolled_remat_is_what_xla_cpu_does():
    # Six unrolled layers whose 1 MB GELU activations dominate the temporaries: recomputed,
    # the backward pass holds about one layer's; kept, all six.
    if jax.default_backend() != "cpu":  # pragma: no cover
        pytest.skip("a fact about XLA:CPU")

    def layer(x, w):
        return x + jax.nn.gelu(x @ w) @ w.T

    def loss(remat):
        step = jax.checkpoint(layer) if remat else layer

        def f(ws, x):
            for w in ws:
                x = step(x, w)
            return jnp.sum(x**2)

        return f

    ws, x = [jnp.full((64, 256), 0.01)] * 6, jnp.ones((1024, 64))

    def temporaries(remat):
        compiled = jax.jit(jax.grad(loss(remat))).lower(ws, x).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    recomputed = temporaries(True) < 0.6 * temporaries(False)
    assert recomputed == compat.xla_cpu_remats_unrolled_layers()
