"""Every use of JAX internals in the repository, in one place.

Nothing else in the repo imports ``jax._src`` or looks at ``jax.__version__``. Each shim says which
JAX versions it serves and when it can go. Where JAX offers a public name we use it; the shims
here cover what has no public spelling (registering rules for a primitive, the parameters of
higher-order primitives, which changed shape across releases).

Supported range: JAX 0.7.2 (the floor: orbax-checkpoint >= 0.12 breaks below it) to 0.12.x,
with or without 0.12's flags for its next primitives (``NEXT_FLAGS``). The shims live by concern:
jaxprs and their equations (``_jaxpr``), those next primitives (``_hijax``), rules for a primitive
(``_rules``), effects (``_effects``), the backend at run time (``_backend``), the cluster
environments that ``jax.distributed`` detects (``_clusters``).
"""

from ._backend import backends_initialized as backends_initialized
from ._backend import unrolled_threefry_on_cpu as unrolled_threefry_on_cpu
from ._backend import xla_cpu_remats_unrolled_layers as xla_cpu_remats_unrolled_layers
from ._backend import xla_cpu_xnn_fusion_supported as xla_cpu_xnn_fusion_supported
from ._clusters import cluster_environments as cluster_environments
from ._clusters import coordinator_address as coordinator_address
from ._effects import make_effect as make_effect
from ._effects import make_ordered_effect as make_ordered_effect
from ._effects import register_ordered_callback_lowering as register_ordered_callback_lowering
from ._hijax import NEXT_FLAGS as NEXT_FLAGS
from ._hijax import SUPPORTED_JAX as SUPPORTED_JAX
from ._hijax import CustomJVPTraced as CustomJVPTraced
from ._hijax import CustomVJPTraced as CustomVJPTraced
from ._hijax import RematTraced as RematTraced
from ._hijax import Scan3 as Scan3
from ._hijax import eval_jaxpr_p as eval_jaxpr_p
from ._hijax import hi_bind as hi_bind
from ._hijax import hi_call_jaxpr as hi_call_jaxpr
from ._hijax import hi_params as hi_params
from ._hijax import hi_primal_args as hi_primal_args
from ._hijax import jax_description as jax_description
from ._hijax import next_flags as next_flags
from ._hijax import primitive_name as primitive_name
from ._hijax import rule_key as rule_key
from ._hijax import sub_jaxprs as sub_jaxprs
from ._jaxpr import ClosedJaxpr as ClosedJaxpr
from ._jaxpr import Jaxpr as Jaxpr
from ._jaxpr import JaxprEqn as JaxprEqn
from ._jaxpr import Literal as Literal
from ._jaxpr import Primitive as Primitive
from ._jaxpr import Var as Var
from ._jaxpr import bind as bind
from ._jaxpr import call_p as call_p
from ._jaxpr import closed_call_p as closed_call_p
from ._jaxpr import cond_p as cond_p
from ._jaxpr import const_args_jaxpr as const_args_jaxpr
from ._jaxpr import custom_jvp_call_p as custom_jvp_call_p
from ._jaxpr import custom_vjp_call_p as custom_vjp_call_p
from ._jaxpr import eqn_context as eqn_context
from ._jaxpr import extend_jit_params as extend_jit_params
from ._jaxpr import is_drop_var as is_drop_var
from ._jaxpr import is_literal as is_literal
from ._jaxpr import jaxpr_and_consts as jaxpr_and_consts
from ._jaxpr import jit_p as jit_p
from ._jaxpr import remat_p as remat_p
from ._jaxpr import scan_layout as scan_layout
from ._jaxpr import scan_p as scan_p
from ._jaxpr import scan_unroll as scan_unroll
from ._jaxpr import shard_map_manual_axes as shard_map_manual_axes
from ._jaxpr import shard_map_p as shard_map_p
from ._jaxpr import shard_map_params as shard_map_params
from ._jaxpr import while_p as while_p
from ._rules import instantiate_zero as instantiate_zero
from ._rules import is_undefined_primal as is_undefined_primal
from ._rules import register_batching as register_batching
from ._rules import register_batching_always as register_batching_always
from ._rules import register_jvp as register_jvp
from ._rules import register_keep_alive as register_keep_alive
from ._rules import register_lowering as register_lowering
from ._rules import register_no_recompute as register_no_recompute
from ._rules import register_staged_params as register_staged_params
from ._rules import register_transpose as register_transpose
from ._rules import wrap_batched_cond as wrap_batched_cond
from ._rules import wrap_batched_while as wrap_batched_while
