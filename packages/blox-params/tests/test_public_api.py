"""The exported names are the public API: adding or removing one is a deliberate change."""

import blox

EXPECTED = {
    "BatchNorm",
    "Conv",
    "ConvTranspose",
    "Dropout",
    "Embed",
    "GRU",
    "GRUState",
    "Graph",
    "GraphError",
    "GroupNorm",
    "LSTM",
    "LSTMState",
    "LayerNorm",
    "Linear",
    "LoRA",
    "LockedParamsError",
    "MLP",
    "MoE",
    "Metadata",
    "MissingParamError",
    "Module",
    "MultiHeadAttention",
    "Param",
    "ParamDtypeError",
    "ParamShapeError",
    "Params",
    "RMSNorm",
    "Repeat",
    "Rng",
    "RngError",
    "Sequential",
    "avg_pool",
    "display",
    "max_pool",
    "min_pool",
    "rope",
    "RopeScaling",
    "segment_positions",
    "summary",
}


def test_exported_names_are_pinned():
    public = {n for n in dir(blox) if not n.startswith("_")}
    assert public == EXPECTED


def test_each_name_has_one_import_path():
    for name in EXPECTED:
        module = getattr(blox, name).__module__
        assert module.startswith("blox._"), (name, module)


def test_errors_subclass_builtins():
    assert issubclass(blox.ParamShapeError, ValueError)
    assert issubclass(blox.ParamDtypeError, ValueError)
    assert issubclass(blox.LockedParamsError, ValueError)
    assert issubclass(blox.MissingParamError, KeyError)
    assert issubclass(blox.RngError, ValueError)
    assert issubclass(blox.GraphError, ValueError)
