"""``Param`` (one value with its flags) and ``Params`` (the flat, immutable container of all state).

Split by concern, leaves first; each module imports only the ones above it:

- ``_metadata``: ``Metadata``, the hashable static annotations of a parameter;
- ``_param``: ``Param``, one value with its ``trainable`` flag and metadata, and the interned
  static half every ``Param`` and ``Params`` entry shares;
- ``_structure``: the static half of ``Params`` (paths, flags, lock), hashed once;
- ``_container``: ``Params``, the ``Mapping`` users read and update;
- ``_flatten``: how both become pytrees (registered when it is imported, below).

Speed matters here: every jitted call flattens the ``Params`` it gets and unflattens the one it
returns. So ``Params`` keeps its values as one tuple that flattening hands over as is, and
everything static in a shared structure whose hash is computed once. A ``Param`` is a view made
on access; inside a ``Params`` it is not a pytree node, so a round trip costs one Python call,
not one per parameter. Nothing outside blox imports these modules; ``blox`` re-exports the names.
"""

from . import _flatten as _flatten  # registers Param and Params as pytrees
from ._container import Params as Params
from ._metadata import Metadata as Metadata
from ._param import Param as Param
