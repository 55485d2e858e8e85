"""display and summary."""

import io

import jax
import jax.numpy as jnp
import pytest

import blox as bx


def _params():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    lin = bx.Linear(graph / "lin", 4, rng=rng)
    return lin, rng


def test_text_tree_with_counts_and_bytes():
    lin, rng = _params()
    _, params = lin(rng.seed(bx.Params(), seed=0), jnp.ones((1, 3)))
    out = io.StringIO()
    bx.display(params.locked(), file=out)
    text = out.getvalue()
    assert text.splitlines()[0] == (
        "Params (locked): 4 arrays, 19 values, 76 B (trainable: 2 arrays, 16 values, 64 B)"
    )
    assert "net/lin  (2 arrays, 16 values, 64 B)" in text
    assert "kernel  f32[3,4]  12  48 B" in text
    assert "counter  u32[]   1  4 B  non-trainable" in text


def test_abstract_params_from_eval_shape():
    lin, rng = _params()
    abstract = jax.eval_shape(lambda: lin(rng.seed(bx.Params(), seed=0), jnp.ones((1, 3)))[1])
    assert "f32[3,4]  12  48 B" in bx.summary(abstract)


def test_display_rejects_other_trees():
    with pytest.raises(TypeError, match="display shows blox Params, got dict"):
        bx.display({"a": 1})  # type: ignore[arg-type]


def test_notebook_uses_treescope(monkeypatch):
    import sys
    import types

    from blox import _display

    shown = []
    fake = types.ModuleType("treescope")
    fake.display = shown.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "treescope", fake)
    monkeypatch.setattr(_display, "_in_notebook", lambda: True)
    params = bx.Params({("net", "w"): jnp.zeros(2)})
    bx.display(params)
    assert shown == [params]
    out = io.StringIO()
    bx.display(params, file=out)  # an explicit file always gets the text tree
    assert out.getvalue().startswith("Params: 1 arrays")
