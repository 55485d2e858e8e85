"""Graph: tuple paths, children, walk, binding rules."""

import pytest

import blox as bx


def test_paths_children_and_any_characters():
    graph = bx.Graph("net")
    node = graph / "a/b" / "c d"
    assert node.path == ("net", "a/b", "c d")
    assert graph.child("a/b") is graph / "a/b"
    assert graph.is_root and not node.is_root
    assert list(graph.children()) == ["a/b"]


def test_walk_yields_modules_in_creation_order():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mlp = bx.MLP(graph / "mlp", [2, 2], rng=rng)
    assert [m.path for m in graph.walk()] == [
        ("net", "rng"),
        ("net", "mlp"),
        ("net", "mlp", "linear_0"),
        ("net", "mlp", "linear_1"),
    ]
    assert next(iter((graph / "mlp").walk())) is mlp


def test_binding_to_root_names_the_root():
    with pytest.raises(ValueError, match=r"cannot bind to the root node net.*graph / 'layer'"):
        bx.Linear(bx.Graph("net"), 3)


def test_binding_twice_is_refused():
    graph = bx.Graph("net")
    bx.Linear(graph / "l1", 3)
    with pytest.raises(bx.GraphError, match=r"a Linear is already bound there.*graph / 'layer2'"):
        bx.LayerNorm(graph / "l1")


def test_module_needs_a_graph():
    with pytest.raises(TypeError, match=r"takes a Graph node.*got str"):
        bx.Linear("net", 3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non-empty strings"):
        bx.Graph("")


def test_root_is_the_top_node_from_anywhere():
    graph = bx.Graph("net")
    deep = graph / "encoder" / "block" / "attn"
    assert deep.root is graph
    assert graph.root is graph
    rng = bx.Rng(graph / "rng")
    assert rng.graph.root is graph
    assert [type(m).__name__ for m in deep.root.walk()] == ["Rng"]
