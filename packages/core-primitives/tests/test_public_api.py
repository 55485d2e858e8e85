"""The exported names of core_primitives are public API: this pins them."""

import core_primitives

EXPECTED = {
    "Context",
    "EmittedStructureError",
    "HasChildLogicalAxes",
    "HasLogicalAxes",
    "Interpreter",
    "LogicalAxes",
    "Path",
    "RuleOutputError",
    "UnknownPrimitiveError",
    "bind_eqn",
    "compat",
    "did_you_mean",
    "dtype_shape",
    "field",
    "format_path",
    "format_problems",
    "got_expected",
    "has_child_logical_axes",
    "has_logical_axes",
    "html_tree",
    "identity_primitive",
    "keypath_to_path",
    "lazy_exports",
    "list_alternatives",
    "pytree_dataclass",
    "tree_paths",
}


def test_public_names_are_pinned():
    public = {n for n in dir(core_primitives) if not n.startswith("_")}
    assert public == EXPECTED


def test_only_compat_touches_jax_internals():
    import pathlib

    root = pathlib.Path(core_primitives.__file__).parent
    sources = sorted(root.rglob("*.py"))
    offenders = [
        str(p.relative_to(root))
        for p in sources
        if "compat" not in p.relative_to(root).parts
        and ("jax._src" in p.read_text() or "jax.__version__" in p.read_text())
    ]
    assert offenders == [] and len(sources) > 10
