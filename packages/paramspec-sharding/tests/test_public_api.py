"""The exported names are the public API: changing them is a breaking change."""

import paramspec

EXPECTED = {
    "Cluster",
    "ParamInitializer",
    "ParamSpec",
    "ProcessInfo",
    "Rules",
    "ShardingError",
    "abstract",
    "constrain",
    "detect_cluster",
    "init",
    "init_sharded",
    "initialize_distributed",
    "is_param_spec",
    "logical_to_sharding",
    "make_global_batch",
    "make_mesh",
    "process_info",
    "shardings",
}


def test_exported_names_are_pinned():
    public = {n for n in dir(paramspec) if not n.startswith("_")}
    assert public == EXPECTED


def test_each_name_has_one_home():
    # Re-exports only: every public object is defined in a private module of this package.
    for name in EXPECTED:
        module = getattr(getattr(paramspec, name), "__module__", "")
        assert module.startswith("paramspec._"), (name, module)


def test_sharding_error_is_a_value_error():
    assert issubclass(paramspec.ShardingError, ValueError)
