"""blox: a functional neural-network library for JAX.

``outputs, params = model(params, inputs)``: a static ``Graph`` names every parameter, a flat
immutable ``Params`` holds all state (weights, RNG, batch statistics), and layers are plain
objects whose calls thread ``Params`` through explicitly.
"""

from ._errors import GraphError as GraphError
from ._errors import LockedParamsError as LockedParamsError
from ._errors import MissingParamError as MissingParamError
from ._errors import ParamDtypeError as ParamDtypeError
from ._errors import ParamShapeError as ParamShapeError
from ._errors import RngError as RngError
from ._params import Metadata as Metadata
from ._params import Param as Param
from ._params import Params as Params

__version__ = "0.1.0"
