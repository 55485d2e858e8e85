"""dtype_shape and html_tree: the display helpers lox and blox share."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from core_primitives import dtype_shape, html_tree


def test_dtype_shape_of_arrays_tracers_structs_and_keys():
    assert dtype_shape(np.zeros((3, 4), np.float32)) == "float32[3,4]"
    assert dtype_shape(jnp.int32(1)) == "int32[]"
    assert dtype_shape(jnp.zeros((2, 0), jnp.bfloat16)) == "bfloat16[2,0]"
    assert dtype_shape(jax.ShapeDtypeStruct((5, 2, 3), jnp.uint8), drop_leading=1) == "uint8[2,3]"
    seen = []
    jax.jit(lambda x: seen.append(dtype_shape(x)) or x)(jnp.ones((2, 3)))
    assert seen == ["float32[2,3]"]
    assert dtype_shape(jax.random.split(jax.random.key(0), 2)) == "key<fry>[2]"


def test_dtype_shape_of_non_arrays_is_their_repr():
    assert dtype_shape(1.5) == "1.5"
    assert dtype_shape(None) == "None"
    assert dtype_shape("a") == "'a'"


def test_html_tree_groups_rows_by_path_and_escapes_names():
    rows = [
        (("net", "<b>", "w"), [("kind", "float32[3]"), ("num", "3")]),
        (("top",), [("", "<i>raw html</i>")]),
        (("net", "bias"), [("meta", "x")]),
    ]
    page = html_tree(rows, head="Params", group_note=lambda p: f"<{'/'.join(p)}>", open_depth=1)
    assert page.startswith("\n<style>") and page.count("<style>") == 1
    assert '<div class="cp-tree"><div class="cp-head">Params</div>' in page
    # root rows first, then groups in first-seen order; a group's rows before its sub-groups
    assert page.index(">top<") < page.index(">net<") < page.index(">bias<") < page.index(">w<")
    assert (
        '<details open><summary><span class="cp-node">net</span>'
        '<span class="cp-sum">&lt;net&gt;</span></summary>'
    ) in page
    assert '<details><summary><span class="cp-node">&lt;b&gt;</span>' in page  # depth 1: folded
    assert (
        '<tr><td class="cp-name">w</td><td class="cp-kind">float32[3]</td>'
        '<td class="cp-num">3</td></tr>'
    ) in page
    assert '<tr><td class="cp-name">top</td><td><i>raw html</i></td></tr>' in page


def test_html_tree_without_notes_unfolds_everything_and_refuses_an_empty_path():
    page = html_tree([(("a", "b", "c"), [])], head="")
    assert page.count("<details open>") == 2 and "cp-sum" not in page.split("</style>")[1]
    with pytest.raises(ValueError, match=r"html_tree: a row has an empty path .*\(\('loss',\)"):
        html_tree([((), [("num", "1")])], head="x")
