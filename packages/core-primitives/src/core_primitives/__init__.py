"""core_primitives: the shared core of the stack.

The one place that touches JAX internals (``core_primitives.compat``), a helper for identity-like
custom primitives, a jaxpr interpreter that recurses through higher-order primitives, keyed pytree
dataclasses, tuple-path helpers, error-message helpers, the display helpers (``dtype_shape``,
``html_tree``) and the protocols sibling packages share.
"""

from typing import TYPE_CHECKING

from ._lazy import lazy_exports

# The public names, imported when first used (importing JAX takes seconds; a caller that only
# needs the error helpers should not wait for it). This block is the one list of them.
if TYPE_CHECKING:
    from . import compat as compat
    from ._context import Context as Context
    from ._context import bind_eqn as bind_eqn
    from ._dataclass import field as field
    from ._dataclass import pytree_dataclass as pytree_dataclass
    from ._display import dtype_shape as dtype_shape
    from ._display import html_tree as html_tree
    from ._errors import did_you_mean as did_you_mean
    from ._errors import format_problems as format_problems
    from ._errors import got_expected as got_expected
    from ._errors import list_alternatives as list_alternatives
    from ._interpreter import Interpreter as Interpreter
    from ._interpreter_errors import EmittedStructureError as EmittedStructureError
    from ._interpreter_errors import RuleOutputError as RuleOutputError
    from ._lazy import lazy_exports as lazy_exports
    from ._paths import Path as Path
    from ._paths import format_path as format_path
    from ._paths import keypath_to_path as keypath_to_path
    from ._paths import tree_paths as tree_paths
    from ._primitive import identity_primitive as identity_primitive
    from ._protocols import HasChildLogicalAxes as HasChildLogicalAxes
    from ._protocols import HasLogicalAxes as HasLogicalAxes
    from ._protocols import LogicalAxes as LogicalAxes
    from ._protocols import has_child_logical_axes as has_child_logical_axes
    from ._protocols import has_logical_axes as has_logical_axes
    from ._unknown_primitive import UnknownPrimitiveError as UnknownPrimitiveError

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
__version__ = "0.1.0"
