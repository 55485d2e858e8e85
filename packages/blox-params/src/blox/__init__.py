"""blox: a functional neural-network library for JAX.

``outputs, params = model(params, inputs)``: a static ``Graph`` names every parameter, a flat
immutable ``Params`` holds all state (weights, RNG, batch statistics), and layers are plain
objects whose calls thread ``Params`` through explicitly.
"""

from ._attention import MultiHeadAttention as MultiHeadAttention
from ._attention import RopeScaling as RopeScaling
from ._attention import rope as rope
from ._attention import segment_positions as segment_positions
from ._conv import Conv as Conv
from ._conv import ConvTranspose as ConvTranspose
from ._display import display as display
from ._display import summary as summary
from ._dropout import Dropout as Dropout
from ._errors import GraphError as GraphError
from ._errors import LockedParamsError as LockedParamsError
from ._errors import MissingParamError as MissingParamError
from ._errors import ParamDtypeError as ParamDtypeError
from ._errors import ParamShapeError as ParamShapeError
from ._errors import RngError as RngError
from ._graph import Graph as Graph
from ._linear import Embed as Embed
from ._linear import Linear as Linear
from ._lora import LoRA as LoRA
from ._module import Module as Module
from ._moe import MoE as MoE
from ._norm import BatchNorm as BatchNorm
from ._norm import GroupNorm as GroupNorm
from ._norm import LayerNorm as LayerNorm
from ._norm import RMSNorm as RMSNorm
from ._params import Metadata as Metadata
from ._params import Param as Param
from ._params import Params as Params
from ._pooling import avg_pool as avg_pool
from ._pooling import max_pool as max_pool
from ._pooling import min_pool as min_pool
from ._recurrent import GRU as GRU
from ._recurrent import LSTM as LSTM
from ._recurrent import GRUState as GRUState
from ._recurrent import LSTMState as LSTMState
from ._repeat import Repeat as Repeat
from ._rng import Rng as Rng
from ._sequential import MLP as MLP
from ._sequential import Sequential as Sequential

__version__ = "0.1.0"
