"""display and summary."""

import io
import sys
import types

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
    assert "kernel  float32[3,4]  12  48 B" in text
    assert "counter  uint32[]   1  4 B  non-trainable" in text


def test_abstract_params_from_eval_shape():
    lin, rng = _params()
    abstract = jax.eval_shape(lambda: lin(rng.seed(bx.Params(), seed=0), jnp.ones((1, 3)))[1])
    assert "float32[3,4]  12  48 B" in bx.summary(abstract)


def test_display_rejects_other_trees():
    with pytest.raises(TypeError, match="display shows blox Params, got dict"):
        bx.display({"a": 1})  # type: ignore[arg-type]


@pytest.fixture
def notebook(monkeypatch):
    """A Jupyter kernel as blox sees one: IPython's get_ipython() has an IPKernelApp config."""
    kernel = types.SimpleNamespace(config={"IPKernelApp": {}})
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: kernel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", ipython)


@pytest.mark.usefixtures("notebook")
def test_notebook_uses_treescope(monkeypatch):
    shown = []
    fake = types.ModuleType("treescope")
    fake.display = shown.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "treescope", fake)
    params = bx.Params({("net", "w"): jnp.zeros(2)})
    bx.display(params)
    assert shown == [params]
    out = io.StringIO()
    bx.display(params, file=out)  # an explicit file always gets the text tree
    assert out.getvalue().startswith("Params: 1 arrays")


def _model_params():
    graph = bx.Graph("net")
    rng = bx.Rng(graph / "rng")
    mlp = bx.MLP(graph / "mlp", [8, 2], rng=rng)
    _, params = mlp(rng.seed(bx.Params(), seed=0), jnp.ones((1, 3)))
    return params.locked()


def test_repr_html_shows_the_path_tree_with_shapes_sizes_and_flags():
    page = _model_params()._repr_html_()
    assert page.startswith("\n<style>")
    assert '<span class="cp-badge cp-grey">locked</span>' in page
    assert "6 arrays · 53 values · 212 B (trainable: 4 arrays · 50 values · 200 B)" in page
    # the tree: net > mlp > linear_0, each a foldable node with its subtotal
    assert '<summary><span class="cp-node">net</span>' in page
    assert (
        '<summary><span class="cp-node">linear_0</span>'
        '<span class="cp-sum">2 arrays · 32 values · 128 B</span></summary>'
    ) in page
    assert page.index(">mlp<") < page.index(">linear_0<") < page.index(">linear_1<")
    kernel_row = (
        '<tr><td class="cp-name">kernel</td><td class="cp-kind">float32[3,8]</td>'
        '<td class="cp-num">24</td><td class="cp-num">96 B</td>'
        '<td><span class="cp-badge cp-green">trainable</span></td>'
    )
    assert kernel_row in page
    assert '<td class="cp-name">counter</td><td class="cp-kind">uint32[]</td>' in page
    assert page.count('<span class="cp-badge cp-purple">non-trainable</span>') == 2
    assert "rng_impl=&#x27;threefry2x32&#x27;" in page  # metadata, escaped


def test_repr_html_escapes_names_and_handles_abstract_and_root_level_params():
    params = bx.Params(
        {
            ("<script>alert(1)</script>", "w&b"): jnp.zeros(2),
            ("top",): bx.Param(jnp.zeros((), jnp.int32), trainable=False),
        }
    )
    page = params._repr_html_()
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "w&amp;b" in page
    assert '<td class="cp-name">top</td><td class="cp-kind">int32[]</td>' in page
    lin, rng = _params()
    abstract = jax.eval_shape(lambda: lin(rng.seed(bx.Params(), seed=0), jnp.ones((1, 3)))[1])
    assert (
        '<td class="cp-kind">float32[3,4]</td><td class="cp-num">12</td>' in abstract._repr_html_()
    )


def test_treescope_renders_paths_values_and_flags():
    treescope = pytest.importorskip("treescope", reason="the blox-params[treescope] extra")
    params = bx.Params(
        {
            ("net", "w"): bx.Param(jnp.zeros(2), metadata={"logical_axes": ("embed",)}),
            ("net", "n"): bx.Param(jnp.zeros((), jnp.int32), trainable=False),
        }
    )
    text = " ".join(treescope.render_to_text(params).split())
    assert text.startswith("Params({ ('net', 'w'): Param( value=<jax.Array([0., 0.], dtype=float")
    assert "trainable=True, metadata={'logical_axes': ('embed',)}, )" in text
    assert "('net', 'n'): Param(value=<jax.Array(0, dtype=int32)>, trainable=False)" in text


@pytest.mark.usefixtures("notebook")
def test_notebook_without_treescope_shows_the_html(monkeypatch):
    shown = []
    ipython_display = types.ModuleType("IPython.display")
    ipython_display.display = shown.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "treescope", None)  # import treescope -> ImportError
    monkeypatch.setitem(sys.modules, "IPython.display", ipython_display)
    params = bx.Params({("net", "w"): jnp.zeros(2)})
    bx.display(params)
    assert shown == [params]
