import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

from paramspec import ParamSpec, Rules, ShardingError, abstract, init, make_mesh, shardings

RULES = Rules({"embed": "model", "mlp": "data", "vocab": None, "heads": ("data", "model")})


@pytest.fixture(scope="module")
def mesh(device_grid):
    return make_mesh(device_grid, ("data", "model"))


def specs():
    return {
        "emb": ParamSpec((64, 16), ("vocab", "embed")),
        "mlp": {"w": ParamSpec((16, 32), ("embed", "mlp")), "b": ParamSpec((32,), ("mlp",))},
        "heads": ParamSpec((8, 3), ("heads", None), dtype=jnp.bfloat16),
    }


def test_shardings_tree(mesh):
    out = shardings(specs(), mesh, RULES)
    assert out["emb"] == NamedSharding(mesh, PartitionSpec(None, "model"))
    assert out["mlp"]["w"].spec == PartitionSpec("model", "data")
    assert out["heads"].spec == PartitionSpec(("data", "model"), None)


def test_init_places_each_array_with_expected_shards(mesh, device_grid):
    params = init(specs(), jax.random.key(0), mesh, RULES)
    d, m = device_grid  # (2, 4) on 8 devices: emb (64, 4), w (4, 16), b (16,), heads (1, 3)
    expected = {
        "emb": (64, 16 // m),
        "w": (16 // m, 32 // d),
        "b": (32 // d,),
        "heads": (8 // (d * m), 3),
    }
    got = {
        "emb": params["emb"],
        "w": params["mlp"]["w"],
        "b": params["mlp"]["b"],
        "heads": params["heads"],
    }
    for name, array in got.items():
        assert {s.data.shape for s in array.addressable_shards} == {expected[name]}, name
    assert params["mlp"]["w"].sharding == NamedSharding(mesh, PartitionSpec("model", "data"))
    assert params["heads"].dtype == jnp.bfloat16


def test_init_is_deterministic_and_independent_of_other_leaves(mesh):
    a = init(specs(), jax.random.key(0), mesh, RULES)
    more = dict(specs(), extra=ParamSpec((16, 16), ("embed", None)))
    b = init(more, jax.random.key(0), mesh, RULES)
    np.testing.assert_array_equal(a["mlp"]["w"], b["mlp"]["w"])
    np.testing.assert_array_equal(a["emb"], b["emb"])
    c = init(specs(), jax.random.key(1), mesh, RULES)
    assert not np.array_equal(a["emb"], c["emb"])


def _bits(key, shape, dtype):
    return jax.random.randint(key, shape, 0, 1 << 24).astype(dtype)


def test_init_values_do_not_depend_on_the_mesh(mesh):
    one_device = make_mesh((1,), ("x",), devices=jax.devices()[:1])
    tree = dict(specs(), bits=ParamSpec((16, 32), ("embed", "mlp"), initializer=_bits))
    sharded = init(tree, jax.random.key(0), mesh, RULES)
    single = init(tree, jax.random.key(0), one_device, dict.fromkeys(RULES))
    # The random bits are identical; float transforms (erfinv) may differ by an ulp between
    # differently partitioned programs on some JAX versions.
    np.testing.assert_array_equal(sharded["bits"], single["bits"])
    for a, b in zip(jax.tree.leaves(sharded), jax.tree.leaves(single)):
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=1e-6, atol=1e-7)


def test_key_forms_agree(mesh):
    a = init(specs(), jax.random.key(3), mesh, RULES)
    b = init(specs(), 3, mesh, RULES)
    np.testing.assert_array_equal(a["emb"], b["emb"])


@pytest.fixture
def compiles(monkeypatch):
    """The executables compiled ahead of time (``Lowered.compile``) while the test runs.

    ``init`` compiles its program that way (so it can tidy host memory before the first run), so
    this sees what ``init`` really compiles, through JAX's public AOT API.
    """
    seen = []
    compile_ = jax.stages.Lowered.compile

    def recording(self, *args, **kwargs):
        seen.append(compile_(self, *args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(jax.stages.Lowered, "compile", recording)
    return seen


def test_init_compiles_once_for_equal_specs(mesh, compiles):
    tree = {"w": ParamSpec((24, 40), ("vocab", "embed"))}  # shapes no other test uses
    init(tree, 0, mesh, RULES)
    assert len(compiles) == 1
    init({"w": ParamSpec((24, 40), ("vocab", "embed"))}, 1, mesh, RULES)  # equal, not the same
    assert len(compiles) == 1


def test_init_program_needs_no_rng_temporaries(mesh, compiles):
    """On CPU the parameters live in host memory: generating them must not need ~3x their bytes
    of scratch (JAX's rolled-loop threefry does; paramspec compiles init with the unrolled one)."""
    tree = {"w": ParamSpec((512, 256), ("vocab", "embed")), "v": ParamSpec((256, 64), (None, None))}
    init(tree, 0, mesh, RULES)
    (compiled,) = compiles
    analysis = compiled.memory_analysis()
    if analysis is None:  # pragma: no cover
        pytest.skip("this jaxlib reports no memory analysis for CPU executables")
    assert analysis.temp_size_in_bytes < 0.05 * analysis.output_size_in_bytes


def test_init_works_inside_jit_and_eval_shape(mesh):
    expected = init(specs(), 5, mesh, RULES)
    inside = jax.jit(lambda k: init(specs(), k, mesh, RULES))(jax.random.key(5))
    np.testing.assert_array_equal(inside["mlp"]["w"], expected["mlp"]["w"])
    shapes = jax.eval_shape(lambda k: init(specs(), k, mesh, RULES), jax.random.key(5))
    assert shapes["heads"].shape == (8, 3) and shapes["heads"].dtype == jnp.bfloat16


def test_abstract_gives_restore_targets(mesh):
    out = abstract(specs(), mesh, RULES)
    w = out["mlp"]["w"]
    assert isinstance(w, jax.ShapeDtypeStruct)
    assert (w.shape, w.dtype) == ((16, 32), jnp.float32)
    assert w.sharding == NamedSharding(mesh, PartitionSpec("model", "data"))


def test_unhashable_initializer_still_works(mesh):
    class Init:
        __hash__ = None  # type: ignore[assignment]

        def __call__(self, key, shape, dtype):
            return jnp.full(shape, 7, dtype)

    params = init({"w": ParamSpec((8,), ("embed",), initializer=Init())}, 0, mesh, RULES)
    assert params["w"].tolist() == [7.0] * 8


@pytest.mark.min_devices(2, why="a size that a data axis of 2 does not divide")
def test_validation_names_every_offending_path(mesh, device_grid):
    bad = {
        "net": {
            "emb": ParamSpec((50, 16), ("vocab", "embd")),
            "mlp": ParamSpec((16, 15), ("embed", "mlp")),
            "both": ParamSpec((16, 16), ("embed", "embed")),
        },
        "ok": ParamSpec((16,), ("embed",)),
    }
    for fn in (lambda: shardings(bad, mesh, RULES), lambda: init(bad, 0, mesh, RULES)):
        with pytest.raises(ShardingError) as info:
            fn()
        text = str(info.value)
        assert "(3 problems)" in text
        assert "net/emb: logical axis 'embd' (dim 1) has no rule." in text
        assert "net/mlp: dim 1 (logical axis 'mlp') has size 15, not divisible by 2" in text
        assert "Pad the dimension to a multiple of 2" in text
        assert "net/both: mesh axis 'model' is used twice, by logical axes 'embed' (dim 0)" in text
        assert f"'data': {device_grid[0]}, 'model': {device_grid[1]}" in text
        assert "  - ok" not in text


def test_init_rejects_arrays_with_paths(mesh):
    tree = {"a": ParamSpec((8,), ("embed",)), "b": jnp.ones(3), "c": 1.0}
    with pytest.raises(TypeError) as info:
        init(tree, 0, mesh, RULES)
    text = str(info.value)
    assert "b: got ArrayImpl of shape (3,), expected a ParamSpec." in text
    assert "c: got float 1.0, expected a ParamSpec." in text
    assert "not arrays that were already created" in text


def test_shardings_rejects_leaves_without_logical_axes(mesh):
    with pytest.raises(
        TypeError, match=r"x/0: got ArrayImpl of shape \(2,\), expected a ParamSpec or an object"
    ):
        shardings({"x": [jnp.ones(2)]}, mesh, RULES)


def test_empty_tree(mesh):
    assert init({}, 0, mesh, RULES) == {}
    assert shardings({"a": None}, mesh, RULES) == {"a": None}


def test_raw_prng_key_data_is_accepted(mesh):
    a = init(specs(), jax.random.PRNGKey(0), mesh, RULES)
    assert a["emb"].shape == (64, 16)


def test_swapped_arguments_error_text(mesh):
    with pytest.raises(
        TypeError, match=r"init\(\): key: got Mesh .*expected a PRNG key.*argument order"
    ):
        init(specs(), mesh, jax.random.key(0), RULES)
    with pytest.raises(
        TypeError, match=r"shardings\(\): mesh: got Rules, expected a jax.sharding.Mesh"
    ):
        shardings(specs(), RULES, mesh)
    with pytest.raises(TypeError, match=r"key: got ArrayImpl with dtype float32 and shape \(3,\)"):
        init(specs(), jnp.ones(3), mesh, RULES)


def test_bad_initializer_output_names_path(mesh):
    spec = ParamSpec((4, 4), ("embed", None), initializer=lambda k, s, d: jnp.ones(s[:1]))
    with pytest.raises(
        ValueError,
        match=r"initializer of net/w returned shape \(4,\) and dtype float32, expected \(4, 4\)",
    ):
        init({"net": {"w": spec}}, 0, mesh, RULES)


def test_initializer_with_the_wrong_signature_names_path(mesh):
    factory = ParamSpec((4, 4), ("embed", None), initializer=jax.nn.initializers.normal)
    with pytest.raises(
        TypeError,
        match=r"initializer of net/w \(shape \(4, 4\), dtype float32\) failed: .*"
        r"called as init\(key, shape, dtype\)",
    ):
        init({"net": {"w": factory}}, 0, mesh, RULES)
    two_args = ParamSpec((4,), ("embed",), initializer=lambda k, s: jnp.ones(s))
    with pytest.raises(TypeError, match=r"initializer of b \(shape \(4,\), dtype float32\) failed"):
        init({"b": two_args}, 0, mesh, RULES)


def test_initializer_returning_no_array_names_path(mesh):
    # lecun_normal(key, shape, dtype) is accepted by the factory and returns a function.
    spec = ParamSpec((4, 4), ("embed", None), initializer=jax.nn.initializers.lecun_normal)
    with pytest.raises(
        TypeError, match=r"initializer of w returned function, expected an array of shape \(4, 4\)"
    ):
        init({"w": spec}, 0, mesh, RULES)


def test_initializer_errors_carry_the_path_as_a_note(mesh):
    def needs_a_file(key, shape, dtype):
        raise FileNotFoundError("embeddings.npy")

    spec = ParamSpec((0, 4), (None, None), initializer=needs_a_file)
    with pytest.raises(FileNotFoundError, match="embeddings.npy") as info:
        init({"net": {"w": spec}}, 0, mesh, RULES)
    assert "init(): raised by the initializer of net/w (shape (0, 4)" in info.value.__notes__[0]


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype float64")
def test_float64_without_x64_says_how_to_enable_it(mesh):
    spec = ParamSpec((4,), ("embed",), dtype=jnp.float64, initializer=jax.nn.initializers.ones)
    with pytest.raises(ValueError, match=r"without 64-bit types.*jax_enable_x64"):
        init({"w": spec}, 0, mesh, RULES)


def test_a_batch_of_keys_is_refused(mesh):
    with pytest.raises(TypeError, match=r"got a key array of shape \(2,\), expected a single key"):
        init(specs(), jax.random.split(jax.random.key(0)), mesh, RULES)
    with pytest.raises(ValueError, match=r"seed 1180591620717411303424 does not fit in 64 bits"):
        init(specs(), 2**70, mesh, RULES)


def test_key_committed_to_one_device_is_accepted(mesh):
    expected = init(specs(), 4, mesh, RULES)
    for key in (jax.random.PRNGKey(4), jax.random.key(4)):
        committed = jax.device_put(key, jax.devices()[-1])
        params = init(specs(), committed, mesh, RULES)
        np.testing.assert_array_equal(params["mlp"]["w"], expected["mlp"]["w"])
