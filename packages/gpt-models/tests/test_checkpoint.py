import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpt_models import Checkpointer, CheckpointWarning, UsageError


def _state(x):
    return {"state": {"w": jnp.full((4,), float(x)), "step": jnp.int32(x)}}


def test_round_trip_and_keep_n(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=2)
    for s in (1, 2, 3):
        ckpt.save(s, _state(s), {"step": s})
    ckpt.wait()
    assert ckpt.steps() == [2, 3]
    state, meta, step = ckpt.restore(_state(0))
    assert step == 3 and meta == {"step": 3} and float(state["state"]["w"][0]) == 3.0
    state, _, _ = ckpt.restore(_state(0), step=2)
    assert int(state["state"]["step"]) == 2
    ckpt.close()


def test_damaged_latest_falls_back_with_a_warning(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=3)
    for s in (1, 2):
        ckpt.save(s, _state(s), {"step": s})
    ckpt.close()
    for f in (tmp_path / "2" / "state").rglob("*"):  # damage every file of the newest step
        if f.is_file():
            f.write_bytes(b"garbage")
    ckpt = Checkpointer(tmp_path, keep=3)
    with pytest.warns(CheckpointWarning, match=r"Checkpoint step 2 in .* could not be restored"):
        state, meta, step = ckpt.restore(_state(0))
    assert step == 1 and float(state["state"]["w"][0]) == 1.0
    ckpt.close()


def test_no_checkpoint_is_a_clear_error(tmp_path):
    ckpt = Checkpointer(tmp_path / "c", keep=1)
    with pytest.raises(
        UsageError, match=r"No checkpoint in .*c: the run saved none yet .*Train it"
    ):
        ckpt.restore(_state(0))
    ckpt.close()


def test_sharded_round_trip_onto_another_layout(tmp_path):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    n = jax.device_count()  # 8 rows split over every device present
    mesh = jax.make_mesh((n,), ("x",), axis_types=(jax.sharding.AxisType.Auto,))
    x = jax.device_put(np.arange(64.0).reshape(8, 8), NamedSharding(mesh, P("x", None)))
    ckpt = Checkpointer(tmp_path, keep=1)
    ckpt.save(1, {"a": {"x": x}}, {})
    ckpt.wait()
    target = {
        "x": jax.ShapeDtypeStruct((8, 8), x.dtype, sharding=NamedSharding(mesh, P(None, "x")))
    }
    out, _, _ = ckpt.restore({"a": target})
    np.testing.assert_array_equal(out["a"]["x"], x)
    assert out["a"]["x"].sharding.spec == P(None, "x")
    ckpt.close()


def test_restore_reads_only_the_named_items(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=1)
    ckpt.save(1, {"params": {"w": jnp.ones(3)}, "opt": {"m": jnp.full(3, 7.0)}}, {"step": 1})
    ckpt.close()
    # Without the "opt" folder the step cannot be restored whole, but its params still can.
    shutil.rmtree(tmp_path / "1" / "opt")
    ckpt = Checkpointer(tmp_path, keep=1)
    items, meta, step = ckpt.restore({"params": {"w": jnp.zeros(3)}})
    assert list(items) == ["params"] and items["params"]["w"].tolist() == [1.0] * 3
    with pytest.raises(UsageError, match="could be restored"):
        ckpt.restore({"params": {"w": jnp.zeros(3)}, "opt": {"m": jnp.zeros(3)}})
    ckpt.close()


def test_meta_is_a_reserved_item_name(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=1)
    with pytest.raises(ValueError, match="include the reserved name 'meta'.*Rename that item"):
        ckpt.save(1, {"meta": {"w": jnp.ones(1)}}, {})
    ckpt.close()
