"""``MultiHeadAttention`` and ``rope``, split by concern; each module imports only those above it.

- ``_rope``: rotary position embeddings, and positions within packed segments;
- ``_masks``: the user's mask and segment ids, shaped for the logits of each core;
- ``_cores``: the attention cores (``blocked``, ``xla``, ``cudnn``) and how ``auto`` picks one;
- ``_options``: checks of the layer's constructor options;
- ``_projections``: the layer's query/key/value/out projections (with their LoRA adapters);
- ``_cache``: the key/value cache and one cached decoding step;
- ``_layer``: ``MultiHeadAttention`` itself, which puts them together.

They may import the rest of blox; nothing outside this subpackage imports them (``blox``
re-exports the public names).
"""

from ._layer import MultiHeadAttention as MultiHeadAttention
from ._rope import RopeScaling as RopeScaling
from ._rope import rope as rope
from ._rope import segment_positions as segment_positions
