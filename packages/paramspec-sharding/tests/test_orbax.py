"""Checkpoints written from one mesh restore onto another through ``abstract`` (orbax)."""

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec

import paramspec as ps
from core_primitives import field, pytree_dataclass

ocp = pytest.importorskip("orbax.checkpoint")


@pytree_dataclass
class Model(ps.ParamInitializer):
    emb: jax.Array | ps.ParamSpec
    norm: jax.Array | ps.ParamSpec
    out: jax.Array | ps.ParamSpec
    out_bias: jax.Array | ps.ParamSpec
    eps: float = field(static=True, default=1e-6)

    @classmethod
    def param_specs(cls, cfg):
        vocab, d = cfg
        return cls(
            emb=ps.ParamSpec((vocab, d), ("vocab", "embed")),
            norm=ps.ParamSpec((d,), ("embed",), initializer=jax.nn.initializers.ones),
            out=ps.ParamSpec((d, vocab), ("embed", "vocab")),
            out_bias=ps.ParamSpec((vocab,), ("vocab",), initializer=jax.nn.initializers.zeros),
            eps=1e-5,
        )


RULES_A = ps.Rules({"vocab": "fsdp", "embed": None, "mlp": None})
RULES_B = ps.Rules({"vocab": "model", "embed": "data", "mlp": None})


def test_save_on_one_mesh_restore_onto_another(tmp_path, device_grid):
    cfg = (64, 16)
    mesh_a = ps.make_mesh((-1,), ("fsdp",))
    params = Model.init(cfg, jax.random.key(0), mesh_a, RULES_A)
    assert params.emb.sharding.spec == PartitionSpec("fsdp", None)

    path = tmp_path / "ckpt"
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(path, params)
        ckptr.wait_until_finished()

    mesh_b = ps.make_mesh(device_grid, ("data", "model"))
    target = Model.abstract(cfg, mesh_b, RULES_B)
    with ocp.StandardCheckpointer() as ckptr:
        restored = ckptr.restore(path, target)

    assert isinstance(restored, Model)
    assert restored.eps == params.eps == 1e-5
    assert restored.emb.sharding == target.emb.sharding
    assert restored.emb.sharding.spec == PartitionSpec("model", "data")
    d, m = device_grid  # (2, 4) on 8 devices: shards of (16, 8)
    assert {s.data.shape for s in restored.emb.addressable_shards} == {(64 // m, 16 // d)}
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(restored)):
        np.testing.assert_array_equal(a, b)
