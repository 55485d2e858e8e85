"""paramspec: parameter specs, logical-axis rules and sharded init, from one CPU to many hosts.

Describe parameters as a tree of :class:`ParamSpec` (shape, logical axes, dtype, initializer),
map logical axes to mesh axes with :class:`Rules`, and create every array directly in its sharded
layout with :func:`init`.
"""

from ._cluster import Cluster as Cluster
from ._cluster import detect_cluster as detect_cluster
from ._distributed import ProcessInfo as ProcessInfo
from ._distributed import initialize_distributed as initialize_distributed
from ._distributed import make_global_batch as make_global_batch
from ._distributed import process_info as process_info
from ._errors import ShardingError as ShardingError
from ._init import abstract as abstract
from ._init import init as init
from ._init import init_sharded as init_sharded
from ._init import shardings as shardings
from ._initializer import ParamInitializer as ParamInitializer
from ._mesh import make_mesh as make_mesh
from ._rules import Rules as Rules
from ._rules import constrain as constrain
from ._rules import logical_to_sharding as logical_to_sharding
from ._spec import ParamSpec as ParamSpec
from ._spec import is_param_spec as is_param_spec

__version__ = "0.1.0"
