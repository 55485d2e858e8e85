"""How ``Param`` and ``Params`` become pytrees: the functions JAX calls on every jitted call.

A ``Params`` flattens to its values tuple as is, with its ``Structure`` as the aux data, and
unflattens by storing the tuple it gets back: one Python call per ``Params`` each way, none per
parameter (about as fast as a dict of arrays, which JAX flattens in C++). Key paths read
``['net/l1/kernel']``. A standalone ``Param`` is a node with one child, its value.

Importing this module registers both; the package's ``__init__`` imports it.
"""

from __future__ import annotations

from typing import Any

import jax

from ._container import Params
from ._param import Aux, Param
from ._structure import Structure

_new = object.__new__
_VALUE_KEY = jax.tree_util.GetAttrKey("value")


def _param_unflatten(aux: Aux, children: Any) -> Param:
    param = _new(Param)
    param._value = children[0]
    param._aux = aux
    return param


def _flatten(params: Params) -> tuple[tuple[Any, ...], Structure]:
    return params._values, params._struct


def _flatten_with_keys(params: Params) -> tuple[list[tuple[Any, Any]], Structure]:
    return list(zip(params._struct.keys, params._values)), params._struct


def _unflatten(struct: Structure, values: Any) -> Params:
    new = _new(Params)
    new._struct = struct
    new._values = values if type(values) is tuple else tuple(values)
    return new


# At import, as any module-level registration: once per process, because a module runs once
# under its name. (A call from the package's __init__ would run twice where pytest's doctest
# collection imports that __init__ file a second time under another name.)
jax.tree_util.register_pytree_with_keys(
    Param,
    lambda p: (((_VALUE_KEY, p._value),), p._aux),
    _param_unflatten,
    lambda p: ((p._value,), p._aux),
)
jax.tree_util.register_pytree_with_keys(Params, _flatten_with_keys, _unflatten, _flatten)
