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


def test_saving_says_when_the_background_writes_are_done(tmp_path):
    # gpt train keeps freed memory for its steps only once no save is being written
    ckpt = Checkpointer(tmp_path, keep=2)
    assert ckpt.saving() is False
    big = {"state": {"w": jnp.ones((4096, 4096)), "step": jnp.array(1)}}  # 64 MB to write
    ckpt.save(1, big, {"step": 1})
    assert ckpt.saving() is True
    ckpt.wait()
    assert ckpt.saving() is False and ckpt.steps() == [1]
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


def test_reader_sees_steps_saved_after_it_opened(tmp_path):
    reader = Checkpointer(tmp_path, keep=2)  # e.g. `gpt eval` on a run that is still training
    writer = Checkpointer(tmp_path, keep=2)
    for s in (1, 2, 3):
        writer.save(s, _state(s), {"step": s})
    writer.wait()
    _, _, step = reader.restore(_state(0))
    assert step == 3
    writer.close()
    reader.close()


@pytest.fixture
def live_run(tmp_path):
    """A run's writer holding step 1 (keeping one step) and a second process's reader of it."""
    writer = Checkpointer(tmp_path, keep=1)
    writer.save(1, _state(1), {"step": 1})
    writer.wait()
    reader = Checkpointer(tmp_path, keep=1)
    yield writer, reader
    writer.close()
    reader.close()


def test_a_step_rotated_away_mid_read_is_not_damage(tmp_path, live_run, monkeypatch, recwarn):
    import orbax.checkpoint as ocp

    writer, reader = live_run
    real_restore = ocp.CheckpointManager.restore
    calls = []

    def restore_while_the_writer_rotates(self, step, *args, **kwargs):
        calls.append(step)
        if len(calls) == 1:  # the live run saves step 2 and, keeping one, deletes step 1
            writer.save(2, _state(2), {"step": 2})
            writer.wait()
            assert not (tmp_path / "1").exists()
            raise FileNotFoundError(f"Checkpoint at {tmp_path / '1'} not found.")
        return real_restore(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "restore", restore_while_the_writer_rotates)
    state, _, step = reader.restore(_state(0))
    assert calls == [1, 2] and step == 2 and float(state["state"]["w"][0]) == 2.0
    assert not [w for w in recwarn if issubclass(w.category, CheckpointWarning)]


def test_a_step_deleted_while_the_steps_are_listed_is_listed_again(tmp_path, live_run, monkeypatch):
    # The CI race: orbax lists step N, the live run deletes it (keep-N), orbax stats it.
    import orbax.checkpoint as ocp

    writer, reader = live_run
    real_reload = ocp.CheckpointManager.reload
    calls = []

    def reload_racing_a_rotation(self):
        calls.append(1)
        if len(calls) == 1:
            raise FileNotFoundError(f"[Errno 2] No such file or directory: '{tmp_path / '0'}'")
        return real_reload(self)

    monkeypatch.setattr(ocp.CheckpointManager, "reload", reload_racing_a_rotation)
    state, _, step = reader.restore(_state(0))
    assert step == 1 and float(state["state"]["w"][0]) == 1.0 and len(calls) >= 2

    def reload_always_racing(self):
        raise FileNotFoundError(f"[Errno 2] No such file or directory: '{tmp_path / '0'}'")

    monkeypatch.setattr(ocp.CheckpointManager, "reload", reload_always_racing)
    with pytest.raises(
        UsageError,
        match=r"Could not list the checkpoints in .*: the run writing them deleted a step while it "
        r"was listed, 5 times in a row .*raise train.checkpoint_every",
    ):
        reader.restore(_state(0))


def test_a_run_rotating_faster_than_a_reader_is_a_clear_error(tmp_path, live_run, monkeypatch):
    import orbax.checkpoint as ocp

    writer, reader = live_run

    def every_read_loses_the_race(self, step, *args, **kwargs):
        writer.save(step + 1, _state(step + 1), {"step": step + 1})
        writer.wait()
        raise FileNotFoundError(f"Checkpoint at {tmp_path / str(step)} not found.")

    monkeypatch.setattr(ocp.CheckpointManager, "restore", every_read_loses_the_race)
    with pytest.raises(
        UsageError,
        match=r"Could not restore a checkpoint from .*: the run writing it replaced its "
        r"checkpoints during each of 5 reads\. Try again, or raise train.checkpoint_every",
    ):
        reader.restore(_state(0))
    monkeypatch.undo()


def test_reads_leave_nothing_behind_and_clear_a_dead_readers_view(tmp_path):
    import fcntl
    import os

    ckpt = Checkpointer(tmp_path, keep=1)
    ckpt.save(1, _state(1), {"step": 1})
    ckpt.wait()
    # A reader reads through a view of hard links in checkpoints/.reading/<host>-<pid>-<id>/,
    # holding a flock on its "held" file; one killed with kill -9 leaves the view behind.
    # A view is only judged after a minute: its reader may not have locked it yet.
    dead = tmp_path / ".reading" / "host-1-dead"
    (dead / "1").mkdir(parents=True)
    (dead / "held").touch()
    new = tmp_path / ".reading" / "host-3-new"
    new.mkdir()
    (new / "held").touch()
    live = tmp_path / ".reading" / "host-2-live"
    live.mkdir()
    fd = os.open(live / "held", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    for view in (dead, live):
        os.utime(view, (0, 0))
    assert ckpt.restore(_state(0))[2] == 1
    assert not dead.exists() and live.exists() and new.exists()
    os.close(fd)  # that reader ends without cleaning up
    for view in (live, new):
        os.utime(view, (0, 0))
    assert ckpt.restore(_state(0))[2] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".digests", "1"]
    ckpt.close()


def test_no_checkpoint_is_a_clear_error(tmp_path):
    ckpt = Checkpointer(tmp_path / "c", keep=1)
    with pytest.raises(
        UsageError,
        match=r"No checkpoint in .*c: the run saved none yet .*gpt train --config .*config\.toml --name NEW",
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


def _swap_in_older_step(folder, newer, older):
    # Files that orbax reads without complaint but that hold other values: only the digest notices.
    shutil.rmtree(folder / str(newer) / "state")
    shutil.copytree(folder / str(older) / "state", folder / str(newer) / "state")


def test_a_step_whose_arrays_changed_on_disk_is_never_loaded(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=3)
    for s in (1, 2):
        ckpt.save(s, _state(s), {"step": s})
    ckpt.close()
    assert sorted(p.name for p in (tmp_path / ".digests").iterdir()) == ["1.json", "2.json"]
    _swap_in_older_step(tmp_path, 2, 1)
    ckpt = Checkpointer(tmp_path, keep=3)
    with pytest.warns(CheckpointWarning, match=r"step 2 .*DigestMismatch: array state\['") as w:
        state, _, step = ckpt.restore(_state(0))
    assert "changed or damaged on disk" in str(w[0].message)
    assert step == 1 and float(state["state"]["w"][0]) == 1.0
    ckpt.close()


def test_every_step_damaged_is_a_usage_error_naming_each(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=3)
    for s in (1, 2):
        ckpt.save(s, _state(s), {"step": s})
    ckpt.close()
    _swap_in_older_step(tmp_path, 2, 1)
    (tmp_path / ".digests" / "1.json").write_text("{not json")
    ckpt = Checkpointer(tmp_path, keep=3)
    with pytest.warns(CheckpointWarning), pytest.raises(UsageError) as err:
        ckpt.restore(_state(0))
    text = str(err.value)
    assert "step 2: DigestMismatch" in text
    assert "step 1: DigestMismatch: its digest file" in text and "is damaged" in text
    ckpt.close()


def test_a_newer_step_without_its_digest_counts_as_damaged(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=3)
    for s in (1, 2):
        ckpt.save(s, _state(s), {"step": s})
    ckpt.close()
    (tmp_path / ".digests" / "2.json").unlink()
    ckpt = Checkpointer(tmp_path, keep=3)
    with pytest.warns(CheckpointWarning, match="its save was interrupted"):
        assert ckpt.restore(_state(0))[2] == 1
    shutil.rmtree(tmp_path / ".digests")  # saved before digests existed: restored unverified
    assert ckpt.restore(_state(0))[2] == 2
    ckpt.close()


def test_damaged_newer_steps_are_discarded_so_the_resumed_run_can_save_them(tmp_path):
    ckpt = Checkpointer(tmp_path, keep=3)
    for s in (1, 2):
        ckpt.save(s, _state(s), {"step": s})
    ckpt.close()
    _swap_in_older_step(tmp_path, 2, 1)
    ckpt = Checkpointer(tmp_path, keep=3)
    with pytest.warns(CheckpointWarning):
        _, _, step = ckpt.restore(_state(0))
    assert ckpt.discard_damaged(step) == [2] and ckpt.steps() == [1]
    ckpt.save(2, _state(7), {"step": 2})  # was orbax's StepAlreadyExistsError
    ckpt.wait()
    state, _, step = ckpt.restore(_state(0))
    assert step == 2 and float(state["state"]["w"][0]) == 7.0
    ckpt.close()
